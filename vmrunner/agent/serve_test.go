package agent

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"net"
	"testing"

	"github.com/patchbot/patchbot/vmrunner/proto"
)

// TestServe speaks the protocol to Serve as the host does: ready first,
// then for each request its events, always ending with "done".
func TestServe(t *testing.T) {
	host, guest := net.Pipe()
	defer host.Close()
	powered := make(chan bool, 1)
	h := Handler{
		KernelRelease: "6.1.0-test",
		RunSuite: func(ctx context.Context, req proto.Request) (any, error) {
			Progressf(ctx, "round %d", req.Round)
			if req.Suite == "broken" {
				return nil, errors.New("workload crashed")
			}
			return map[string]int{"round": req.Round}, nil
		},
		PowerOff: func() { powered <- true; guest.Close() },
	}
	go Serve(context.Background(), guest, h)
	sc := bufio.NewScanner(host)
	next := func() proto.Event {
		t.Helper()
		if !sc.Scan() {
			t.Fatalf("no event: %v", sc.Err())
		}
		var ev proto.Event
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("bad event %q: %v", sc.Bytes(), err)
		}
		return ev
	}
	if ev := next(); ev.Type != proto.EventReady || ev.KernelRelease != "6.1.0-test" {
		t.Fatalf("first event = %+v, want ready with the release", ev)
	}

	tests := []struct {
		line  string
		types []string
		check func(t *testing.T, evs []proto.Event)
	}{
		{`{"id":"1","op":"run-suite","suite":"s","round":4}`, []string{"progress", "result", "done"}, func(t *testing.T, evs []proto.Event) {
			if evs[0].Msg != "round 4" || string(evs[1].Data) != `{"round":4}` || evs[2].ID != "1" {
				t.Errorf("events = %+v", evs)
			}
		}},
		{`{"id":"2","op":"run-suite","suite":"broken"}`, []string{"progress", "error", "done"}, func(t *testing.T, evs []proto.Event) {
			if evs[1].Msg != "workload crashed" {
				t.Errorf("error = %q", evs[0].Msg)
			}
		}},
		{`{"id":"3","op":"info"}`, []string{"result", "done"}, func(t *testing.T, evs []proto.Event) {
			if evs[0].KernelRelease != "6.1.0-test" {
				t.Errorf("info result = %+v", evs[0])
			}
		}},
		// No PrepareSuite: nothing to prepare, an empty result.
		{`{"id":"3p","op":"prepare-suite","suite":"s"}`, []string{"result", "done"}, func(t *testing.T, evs []proto.Event) {
			if string(evs[0].Data) != `{}` {
				t.Errorf("prepare result = %s, want {}", evs[0].Data)
			}
		}},
		{`{"id":"4","op":"exec"}`, []string{"error", "done"}, nil},
		{`not json`, []string{"error", "done"}, nil},
		{`{"id":"5","op":"frobnicate"}`, []string{"error", "done"}, nil},
		{`{"id":"6","op":"poweroff"}`, []string{"result", "done"}, nil},
	}
	for _, tt := range tests {
		if _, err := host.Write([]byte(tt.line + "\n")); err != nil {
			t.Fatal(err)
		}
		var evs []proto.Event
		for range tt.types {
			evs = append(evs, next())
		}
		for i, want := range tt.types {
			if evs[i].Type != want {
				t.Errorf("%s: event %d = %+v, want %s", tt.line, i, evs[i], want)
			}
		}
		if tt.check != nil {
			tt.check(t, evs)
		}
	}
	if !<-powered {
		t.Error("poweroff did not call PowerOff")
	}
}
