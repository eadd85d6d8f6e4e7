package vmrunner

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"sync"

	"github.com/patchbot/patchbot/vmrunner/proto"
)

// channel is the host end of the agent's port: requests go out as JSON
// lines, events come in on a channel fed by one reader goroutine.
type channel struct {
	conn   io.ReadWriteCloser
	events chan proto.Event
	// err is why events was closed (io.EOF when the guest went away).
	errMu sync.Mutex
	err   error
	wmu   sync.Mutex
}

func newChannel(conn io.ReadWriteCloser) *channel {
	c := &channel{conn: conn, events: make(chan proto.Event, 64)}
	go c.read()
	return c
}

func (c *channel) read() {
	defer close(c.events)
	sc := bufio.NewScanner(c.conn)
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	for sc.Scan() {
		var ev proto.Event
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			// A garbled line: say so as a log event rather than stop.
			ev = proto.Event{Type: proto.EventLog, Msg: fmt.Sprintf("unparsable line from agent: %q", sc.Bytes())}
		}
		c.events <- ev
	}
	err := sc.Err()
	if err == nil {
		err = io.EOF
	}
	c.errMu.Lock()
	c.err = err
	c.errMu.Unlock()
}

// readErr is why the events channel closed.
func (c *channel) readErr() error {
	c.errMu.Lock()
	defer c.errMu.Unlock()
	return c.err
}

func (c *channel) send(req proto.Request) error {
	b, err := json.Marshal(req)
	if err != nil {
		return err
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_, err = c.conn.Write(append(b, '\n'))
	return err
}

func (c *channel) Close() error { return c.conn.Close() }
