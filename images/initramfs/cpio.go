package initramfs

import (
	"fmt"
	"io"
	"os"
	"path"
	"strings"
)

// cpioWriter writes the "newc" cpio format the kernel unpacks into its
// initial root filesystem. Entries carry mtime 0 and sequential inode
// numbers, so the same input gives the same bytes.
type cpioWriter struct {
	w    io.Writer
	off  int64
	ino  int
	dirs map[string]bool
	err  error
}

func newCPIOWriter(w io.Writer) *cpioWriter {
	return &cpioWriter{w: w, dirs: map[string]bool{"": true, ".": true, "/": true}}
}

const (
	modeDir  = 0o040000
	modeFile = 0o100000
	modeChar = 0o020000
	modeLink = 0o120000
)

func (c *cpioWriter) write(b []byte) {
	if c.err != nil {
		return
	}
	n, err := c.w.Write(b)
	c.off += int64(n)
	c.err = err
}

func (c *cpioWriter) pad() {
	if r := c.off % 4; r != 0 {
		c.write(make([]byte, 4-r))
	}
}

// entry writes one header, name and body. name is relative ("dev/console").
func (c *cpioWriter) entry(name string, mode uint32, rdevMajor, rdevMinor int, body []byte) {
	c.ino++
	nlink := 1
	if mode&0o170000 == modeDir {
		nlink = 2
	}
	hdr := fmt.Sprintf("070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X",
		c.ino, mode, 0, 0, nlink, 0, len(body), 0, 0, rdevMajor, rdevMinor, len(name)+1, 0)
	c.write([]byte(hdr))
	c.write([]byte(name + "\x00"))
	c.pad()
	c.write(body)
	c.pad()
}

// mkdirAll writes the directories leading to name that are not written yet.
func (c *cpioWriter) mkdirAll(dir string) {
	dir = strings.Trim(path.Clean(dir), "/")
	if c.dirs[dir] {
		return
	}
	c.mkdirAll(path.Dir(dir))
	c.dirs[dir] = true
	c.entry(dir, modeDir|0o755, 0, 0, nil)
}

func (c *cpioWriter) file(name string, perm os.FileMode, body []byte) {
	name = strings.Trim(path.Clean(name), "/")
	c.mkdirAll(path.Dir(name))
	c.entry(name, modeFile|uint32(perm.Perm()), 0, 0, body)
}

func (c *cpioWriter) charDev(name string, perm os.FileMode, major, minor int) {
	name = strings.Trim(path.Clean(name), "/")
	c.mkdirAll(path.Dir(name))
	c.entry(name, modeChar|uint32(perm.Perm()), major, minor, nil)
}

// close writes the trailer.
func (c *cpioWriter) close() error {
	c.entry("TRAILER!!!", 0, 0, 0, nil)
	return c.err
}
