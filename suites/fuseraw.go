package suites

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// The raw FUSE server (Params.FuseServer "raw") is a passthrough of the
// backing directory that serves /dev/fuse the way libfuse's loop does:
// each server thread is one OS thread that reads a request, answers it
// and reads the next. It reads and writes /dev/fuse with raw system calls
// and runs with the collector off and no asynchronous preemption, so Go's
// scheduler takes no part: go-fuse's readers block in read(2) as Go
// system calls, and the runtime's handoffs around them (its monitor
// taking a blocked thread's processor and waking another thread, every
// few tens of microseconds while a request is served) are wake-ups of
// their own, whose number follows the timing of each request.
//
// It answers what the bonnie workload and the mount ask for, as go-fuse's
// loopback does (entry and attribute timeouts of zero, the same init
// capabilities); every other request gets ENOSYS.

// FUSE opcodes (include/uapi/linux/fuse.h).
const (
	opLookup      = 1
	opForget      = 2
	opGetattr     = 3
	opSetattr     = 4
	opMkdir       = 9
	opUnlink      = 10
	opRmdir       = 11
	opOpen        = 14
	opRead        = 15
	opWrite       = 16
	opStatfs      = 17
	opRelease     = 18
	opGetxattr    = 22
	opListxattr   = 23
	opFlush       = 25
	opInit        = 26
	opCreate      = 35
	opInterrupt   = 36
	opDestroy     = 38
	opBatchForget = 42
)

const (
	rawMaxWrite      = 1 << 17 // go-fuse's default MaxWrite
	rawMaxBackground = 12      // go-fuse's default MaxBackground
	fuseRootID       = 1
	fuseKernelMajor  = 7
	fuseOurMinor     = 31
	getattrFH        = 1 // FUSE_GETATTR_FH
)

type rawNode struct {
	path    string
	lookups uint64
}

// rawFS is the passthrough's state: the nodes the kernel knows, by node
// ID, and the open files, by handle.
type rawFS struct {
	fd int // /dev/fuse

	mu     sync.Mutex
	nodes  map[uint64]*rawNode
	ids    map[string]uint64 // path → node ID, for paths that still exist
	nextID uint64
	files  map[uint64]int // handle → backing fd
	nextFh uint64
}

// rawFuseServer mounts a passthrough of backing on mnt and serves it with
// threads OS threads until it is unmounted; it writes one byte to stdout
// when mounted.
func rawFuseServer(backing, mnt string, threads int) error {
	_, cpu := rawCPUs()
	if err := pinTo(cpu); err != nil {
		return err
	}
	var st unix.Stat_t
	if err := unix.Stat(mnt, &st); err != nil {
		return err
	}
	fd, err := unix.Open("/dev/fuse", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	data := fmt.Sprintf("fd=%d,rootmode=%o,user_id=%d,group_id=%d,max_read=%d",
		fd, st.Mode&unix.S_IFMT, os.Geteuid(), os.Getegid(), rawMaxWrite)
	if err := unix.Mount("patchbot-passthrough", mnt, "fuse.patchbot", unix.MS_NOSUID|unix.MS_NODEV, data); err != nil {
		return fmt.Errorf("mounting FUSE: %w", err)
	}
	fs := &rawFS{
		fd:     fd,
		nodes:  map[uint64]*rawNode{fuseRootID: {path: backing, lookups: 1}},
		ids:    map[string]uint64{backing: fuseRootID},
		nextID: fuseRootID + 1,
		files:  map[uint64]int{},
		nextFh: 1,
	}
	if _, err := os.Stdout.Write([]byte{1}); err != nil {
		return err
	}
	errs := make(chan error, threads)
	for i := 0; i < threads; i++ {
		go func() {
			runtime.LockOSThread()
			errs <- fs.serve()
		}()
	}
	var first error
	for i := 0; i < threads; i++ {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}

// serve is one server thread: read a request, answer it, until the file
// system is unmounted (ENODEV).
func (fs *rawFS) serve() error {
	in := make([]byte, rawMaxWrite+4096)
	out := make([]byte, rawMaxWrite+4096)
	for {
		n, _, e := unix.RawSyscall(unix.SYS_READ, uintptr(fs.fd), uintptr(unsafe.Pointer(&in[0])), uintptr(len(in)))
		switch e {
		case 0:
		case unix.EINTR, unix.EAGAIN, unix.ENOENT: // ENOENT: the request was interrupted before it was read
			continue
		case unix.ENODEV: // unmounted
			return nil
		default:
			return fmt.Errorf("reading /dev/fuse: %w", e)
		}
		reply := fs.handle(in[:n], out)
		if reply == nil {
			continue
		}
		_, _, e = unix.RawSyscall(unix.SYS_WRITE, uintptr(fs.fd), uintptr(unsafe.Pointer(&reply[0])), uintptr(len(reply)))
		if e != 0 && e != unix.ENOENT { // ENOENT: the request was interrupted meanwhile
			return fmt.Errorf("writing /dev/fuse: %w", e)
		}
	}
}

var (
	inHeaderSize  = int(unsafe.Sizeof(fuse.InHeader{}))
	outHeaderSize = int(unsafe.Sizeof(fuse.OutHeader{}))
)

// handle answers one request into out: the reply to write, or nil for a
// request that takes none (FORGET, INTERRUPT) or a malformed one.
func (fs *rawFS) handle(req, out []byte) []byte {
	if len(req) < inHeaderSize {
		return nil
	}
	h := (*fuse.InHeader)(unsafe.Pointer(&req[0]))
	if int(h.Length) != len(req) {
		return nil
	}
	body := req[inHeaderSize:]
	// The reply's payload goes after its header.
	payload := out[outHeaderSize:]
	var n int
	var errno syscall.Errno
	switch h.Opcode {
	case opInit:
		n, errno = fs.init(req, payload)
	case opLookup:
		n, errno = fs.lookup(h.NodeId, cstring(body), payload)
	case opForget:
		if in := structIn[fuse.ForgetIn](req); in != nil {
			fs.forget(h.NodeId, in.Nlookup)
		}
		return nil
	case opBatchForget:
		fs.batchForget(body)
		return nil
	case opInterrupt:
		return nil
	case opGetattr:
		n, errno = fs.getattr(req, payload)
	case opSetattr:
		n, errno = fs.setattr(req, payload)
	case opMkdir:
		n, errno = fs.mkdir(req, payload)
	case opUnlink, opRmdir:
		errno = fs.remove(h.NodeId, cstring(body), h.Opcode == opRmdir)
	case opCreate:
		n, errno = fs.create(req, payload)
	case opOpen:
		n, errno = fs.open(req, payload)
	case opRead:
		n, errno = fs.read(req, payload)
	case opWrite:
		n, errno = fs.write(req, payload)
	case opFlush:
		errno = fs.flush(req)
	case opRelease:
		errno = fs.release(req)
	case opStatfs:
		n, errno = fs.statfs(h.NodeId, payload)
	case opGetxattr:
		n, errno = fs.getxattr(req, payload)
	case opListxattr:
		n, errno = fs.listxattr(req, payload)
	case opDestroy:
	default:
		errno = unix.ENOSYS
	}
	if errno != 0 {
		n = 0
	}
	oh := (*fuse.OutHeader)(unsafe.Pointer(&out[0]))
	*oh = fuse.OutHeader{Length: uint32(outHeaderSize + n), Status: -int32(errno), Unique: h.Unique}
	return out[:outHeaderSize+n]
}

// structIn is req as the input struct T, or nil when req is too short.
func structIn[T any](req []byte) *T {
	var t T
	if len(req) < int(unsafe.Sizeof(t)) {
		return nil
	}
	return (*T)(unsafe.Pointer(&req[0]))
}

// nodeIn is req as the input struct T and the path of the node it is
// about (its header's NodeId).
func nodeIn[T any](fs *rawFS, req []byte) (*T, string, syscall.Errno) {
	in := structIn[T](req)
	if in == nil {
		return nil, "", unix.EINVAL
	}
	p, ok := fs.path((*fuse.InHeader)(unsafe.Pointer(&req[0])).NodeId)
	if !ok {
		return nil, "", unix.ESTALE
	}
	return in, p, 0
}

// childIn is req as the input struct T and the path of the name that
// follows it in the directory of its header's NodeId (MKDIR, CREATE).
func childIn[T any](fs *rawFS, req []byte) (*T, string, syscall.Errno) {
	in := structIn[T](req)
	if in == nil {
		return nil, "", unix.EINVAL
	}
	p, errno := fs.child((*fuse.InHeader)(unsafe.Pointer(&req[0])).NodeId, cstring(req[unsafe.Sizeof(*in):]))
	return in, p, errno
}

// put writes v at the start of out and returns its size.
func put[T any](out []byte, v T) int {
	*(*T)(unsafe.Pointer(&out[0])) = v
	return int(unsafe.Sizeof(v))
}

func cstring(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}

func (fs *rawFS) init(req, out []byte) (int, syscall.Errno) {
	in := structIn[fuse.InitIn](req)
	if in == nil || in.Major != fuseKernelMajor {
		return 0, unix.EIO
	}
	// go-fuse's negotiation (fuse.doInit) with its default options.
	flags := in.Flags64() & (fuse.CAP_ASYNC_READ | fuse.CAP_BIG_WRITES | fuse.CAP_FILE_OPS |
		fuse.CAP_READDIRPLUS | fuse.CAP_NO_OPEN_SUPPORT | fuse.CAP_PARALLEL_DIROPS | fuse.CAP_MAX_PAGES |
		fuse.CAP_RENAME_SWAP | fuse.CAP_AUTO_INVAL_DATA)
	minor := uint32(fuseOurMinor)
	if in.Minor < minor {
		minor = in.Minor
	}
	o := fuse.InitOut{
		Major:               fuseKernelMajor,
		Minor:               minor,
		MaxReadAhead:        in.MaxReadAhead,
		MaxWrite:            rawMaxWrite,
		MaxBackground:       rawMaxBackground,
		CongestionThreshold: rawMaxBackground * 3 / 4,
		MaxPages:            uint16((rawMaxWrite-1)/os.Getpagesize() + 1),
		Flags:               uint32(flags),
		Flags2:              uint32(flags >> 32),
	}
	return put(out, o), 0
}

func (fs *rawFS) path(id uint64) (string, bool) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	n, ok := fs.nodes[id]
	if !ok {
		return "", false
	}
	return n.path, true
}

// child is the path of name in the directory parent.
func (fs *rawFS) child(parent uint64, name string) (string, syscall.Errno) {
	dir, ok := fs.path(parent)
	if !ok {
		return "", unix.ESTALE
	}
	if name == "" || name == "." || name == ".." || len(name) > 255 {
		return "", unix.EINVAL
	}
	return filepath.Join(dir, name), 0
}

// entry looks up path for the kernel: one more lookup of its node, and
// its attributes, timeouts zero as go-fuse's loopback gives them here.
func (fs *rawFS) entry(path string, out []byte) (int, syscall.Errno) {
	var st syscall.Stat_t
	if err := syscall.Lstat(path, &st); err != nil {
		return 0, err.(syscall.Errno)
	}
	fs.mu.Lock()
	id, ok := fs.ids[path]
	if !ok {
		id = fs.nextID
		fs.nextID++
		fs.ids[path] = id
		fs.nodes[id] = &rawNode{path: path}
	}
	fs.nodes[id].lookups++
	fs.mu.Unlock()
	e := fuse.EntryOut{NodeId: id}
	e.Attr.FromStat(&st)
	return put(out, e), 0
}

func (fs *rawFS) lookup(parent uint64, name string, out []byte) (int, syscall.Errno) {
	p, errno := fs.child(parent, name)
	if errno != 0 {
		return 0, errno
	}
	return fs.entry(p, out)
}

func (fs *rawFS) forget(id, n uint64) {
	if id == fuseRootID {
		return
	}
	fs.mu.Lock()
	defer fs.mu.Unlock()
	node, ok := fs.nodes[id]
	if !ok {
		return
	}
	if node.lookups > n {
		node.lookups -= n
		return
	}
	delete(fs.nodes, id)
	if fs.ids[node.path] == id {
		delete(fs.ids, node.path)
	}
}

func (fs *rawFS) batchForget(body []byte) {
	if len(body) < 8 {
		return
	}
	count := int(*(*uint32)(unsafe.Pointer(&body[0])))
	one := 16 // struct fuse_forget_one
	for i := 0; i < count && 8+(i+1)*one <= len(body); i++ {
		p := body[8+i*one:]
		fs.forget(*(*uint64)(unsafe.Pointer(&p[0])), *(*uint64)(unsafe.Pointer(&p[8])))
	}
}

func (fs *rawFS) attr(path string, fh uint64, useFh bool, out []byte) (int, syscall.Errno) {
	var st syscall.Stat_t
	var err error
	if fd, ok := fs.file(fh); useFh && ok {
		err = syscall.Fstat(fd, &st)
	} else {
		err = syscall.Lstat(path, &st)
	}
	if err != nil {
		return 0, err.(syscall.Errno)
	}
	a := fuse.AttrOut{}
	a.Attr.FromStat(&st)
	return put(out, a), 0
}

func (fs *rawFS) getattr(req, out []byte) (int, syscall.Errno) {
	in, p, errno := nodeIn[fuse.GetAttrIn](fs, req)
	if errno != 0 {
		return 0, errno
	}
	return fs.attr(p, in.Fh(), in.Flags()&getattrFH != 0, out)
}

func (fs *rawFS) setattr(req, out []byte) (int, syscall.Errno) {
	in, p, errno := nodeIn[fuse.SetAttrInCommon](fs, req)
	if errno != 0 {
		return 0, errno
	}
	if in.Valid&fuse.FATTR_MODE != 0 {
		if err := syscall.Chmod(p, in.Mode&07777); err != nil {
			return 0, err.(syscall.Errno)
		}
	}
	if in.Valid&fuse.FATTR_SIZE != 0 {
		if err := syscall.Truncate(p, int64(in.Size)); err != nil {
			return 0, err.(syscall.Errno)
		}
	}
	if in.Valid&(fuse.FATTR_ATIME|fuse.FATTR_MTIME|fuse.FATTR_ATIME_NOW|fuse.FATTR_MTIME_NOW) != 0 {
		ts := []unix.Timespec{{Nsec: unix.UTIME_OMIT}, {Nsec: unix.UTIME_OMIT}}
		switch {
		case in.Valid&fuse.FATTR_ATIME_NOW != 0:
			ts[0].Nsec = unix.UTIME_NOW
		case in.Valid&fuse.FATTR_ATIME != 0:
			ts[0] = unix.Timespec{Sec: int64(in.Atime), Nsec: int64(in.Atimensec)}
		}
		switch {
		case in.Valid&fuse.FATTR_MTIME_NOW != 0:
			ts[1].Nsec = unix.UTIME_NOW
		case in.Valid&fuse.FATTR_MTIME != 0:
			ts[1] = unix.Timespec{Sec: int64(in.Mtime), Nsec: int64(in.Mtimensec)}
		}
		if err := unix.UtimesNanoAt(unix.AT_FDCWD, p, ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return 0, err.(syscall.Errno)
		}
	}
	fh, useFh := in.GetFh()
	return fs.attr(p, fh, useFh, out)
}

func (fs *rawFS) mkdir(req, out []byte) (int, syscall.Errno) {
	in, p, errno := childIn[fuse.MkdirIn](fs, req)
	if errno != 0 {
		return 0, errno
	}
	if err := syscall.Mkdir(p, in.Mode&^in.Umask); err != nil {
		return 0, err.(syscall.Errno)
	}
	return fs.entry(p, out)
}

func (fs *rawFS) remove(parent uint64, name string, dir bool) syscall.Errno {
	p, errno := fs.child(parent, name)
	if errno != 0 {
		return errno
	}
	var err error
	if dir {
		err = syscall.Rmdir(p)
	} else {
		err = syscall.Unlink(p)
	}
	if err != nil {
		return err.(syscall.Errno)
	}
	// The node lives until the kernel forgets it; a file made at the
	// path meanwhile is another node.
	fs.mu.Lock()
	delete(fs.ids, p)
	fs.mu.Unlock()
	return 0
}

func (fs *rawFS) addFile(fd int) uint64 {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fh := fs.nextFh
	fs.nextFh++
	fs.files[fh] = fd
	return fh
}

func (fs *rawFS) file(fh uint64) (int, bool) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fd, ok := fs.files[fh]
	return fd, ok
}

func (fs *rawFS) create(req, out []byte) (int, syscall.Errno) {
	in, p, errno := childIn[fuse.CreateIn](fs, req)
	if errno != 0 {
		return 0, errno
	}
	fd, err := syscall.Open(p, int(in.Flags)|syscall.O_CREAT|syscall.O_CLOEXEC, in.Mode&^in.Umask)
	if err != nil {
		return 0, err.(syscall.Errno)
	}
	n, errno := fs.entry(p, out)
	if errno != 0 {
		syscall.Close(fd)
		return 0, errno
	}
	return n + put(out[n:], fuse.OpenOut{Fh: fs.addFile(fd)}), 0
}

func (fs *rawFS) open(req, out []byte) (int, syscall.Errno) {
	in, p, errno := nodeIn[fuse.OpenIn](fs, req)
	if errno != 0 {
		return 0, errno
	}
	flags := int(in.Flags) &^ (syscall.O_CREAT | syscall.O_EXCL | syscall.O_NOCTTY)
	fd, err := syscall.Open(p, flags|syscall.O_CLOEXEC, 0)
	if err != nil {
		return 0, err.(syscall.Errno)
	}
	return put(out, fuse.OpenOut{Fh: fs.addFile(fd)}), 0
}

func (fs *rawFS) read(req, out []byte) (int, syscall.Errno) {
	in := structIn[fuse.ReadIn](req)
	if in == nil {
		return 0, unix.EINVAL
	}
	fd, ok := fs.file(in.Fh)
	if !ok {
		return 0, unix.EBADF
	}
	size := min(int(in.Size), len(out))
	n, err := syscall.Pread(fd, out[:size], int64(in.Offset))
	if err != nil {
		return 0, err.(syscall.Errno)
	}
	return n, 0
}

func (fs *rawFS) write(req, out []byte) (int, syscall.Errno) {
	in := structIn[fuse.WriteIn](req)
	if in == nil {
		return 0, unix.EINVAL
	}
	data := req[unsafe.Sizeof(*in):]
	if int(in.Size) > len(data) {
		return 0, unix.EINVAL
	}
	fd, ok := fs.file(in.Fh)
	if !ok {
		return 0, unix.EBADF
	}
	n, err := syscall.Pwrite(fd, data[:in.Size], int64(in.Offset))
	if err != nil {
		return 0, err.(syscall.Errno)
	}
	return put(out, fuse.WriteOut{Size: uint32(n)}), 0
}

// flush closes a duplicate of the file, as go-fuse's loopback does, so
// that what close(2) would report reaches the caller.
func (fs *rawFS) flush(req []byte) syscall.Errno {
	in := structIn[fuse.FlushIn](req)
	if in == nil {
		return unix.EINVAL
	}
	fd, ok := fs.file(in.Fh)
	if !ok {
		return unix.EBADF
	}
	dup, err := syscall.Dup(fd)
	if err != nil {
		return err.(syscall.Errno)
	}
	if err := syscall.Close(dup); err != nil {
		return err.(syscall.Errno)
	}
	return 0
}

func (fs *rawFS) release(req []byte) syscall.Errno {
	in := structIn[fuse.ReleaseIn](req)
	if in == nil {
		return unix.EINVAL
	}
	fs.mu.Lock()
	fd, ok := fs.files[in.Fh]
	delete(fs.files, in.Fh)
	fs.mu.Unlock()
	if ok {
		syscall.Close(fd)
	}
	return 0
}

func (fs *rawFS) statfs(id uint64, out []byte) (int, syscall.Errno) {
	p, ok := fs.path(id)
	if !ok {
		return 0, unix.ESTALE
	}
	var s syscall.Statfs_t
	if err := syscall.Statfs(p, &s); err != nil {
		return 0, err.(syscall.Errno)
	}
	var o fuse.StatfsOut
	o.FromStatfsT(&s)
	return put(out, o), 0
}

// xattrIn is struct fuse_getxattr_in.
type xattrIn struct {
	fuse.InHeader
	Size    uint32
	Padding uint32
}

func (fs *rawFS) getxattr(req, out []byte) (int, syscall.Errno) {
	in, p, errno := nodeIn[xattrIn](fs, req)
	if errno != 0 {
		return 0, errno
	}
	name := cstring(req[unsafe.Sizeof(*in):])
	return xattrReply(in.Size, out, func(dest []byte) (int, error) { return unix.Lgetxattr(p, name, dest) })
}

func (fs *rawFS) listxattr(req, out []byte) (int, syscall.Errno) {
	in, p, errno := nodeIn[xattrIn](fs, req)
	if errno != 0 {
		return 0, errno
	}
	return xattrReply(in.Size, out, func(dest []byte) (int, error) { return unix.Llistxattr(p, dest) })
}

// xattrReply answers a size query (size 0: struct fuse_getxattr_out) or
// the value itself.
func xattrReply(size uint32, out []byte, get func([]byte) (int, error)) (int, syscall.Errno) {
	var dest []byte
	if size > 0 {
		dest = out[:min(int(size), len(out))]
	}
	n, err := get(dest)
	if err != nil {
		var errno syscall.Errno
		if errors.As(err, &errno) {
			return 0, errno
		}
		return 0, unix.EIO
	}
	if size == 0 {
		return put(out, fuse.GetXAttrOut{Size: uint32(n)}), 0
	}
	return n, 0
}

// The raw client (Params.FuseServer "raw") is bonnie's client as a
// process of its own, as bonnie++ is: one thread (GOMAXPROCS 1, the
// collector off, no preemption signals) making each file's system calls
// raw, so that Go's scheduler takes no part in the calls it times. The
// agent sends it the files once, then one phase at a time on stdin, and
// reads each phase's times from stdout.

type bonnieSpec struct {
	Files    []string
	Sizes    []int
	MaxBytes int
}

// check says what is wrong with a spec: a size for each file, each
// within 0 to MaxBytes.
func (spec bonnieSpec) check() error {
	if len(spec.Sizes) != len(spec.Files) || spec.MaxBytes < 0 {
		return fmt.Errorf("bonnie's client: %d sizes for %d files, at most %d bytes", len(spec.Sizes), len(spec.Files), spec.MaxBytes)
	}
	for i, n := range spec.Sizes {
		if n < 0 || n > spec.MaxBytes {
			return fmt.Errorf("bonnie's client: %s has %d bytes, want 0 to %d", spec.Files[i], n, spec.MaxBytes)
		}
	}
	return nil
}

type bonniePhaseReq struct {
	Op  string
	Idx []int
}

type bonniePhaseReply struct {
	Elapsed int64   // ns
	Lat     []int64 // ns, one a file
	Err     string
}

// bonnieClient is the raw client's process.
func bonnieClient() error {
	cpu, _ := rawCPUs()
	if err := pinTo(cpu); err != nil {
		return err
	}
	dec, enc := json.NewDecoder(os.Stdin), json.NewEncoder(os.Stdout)
	var spec bonnieSpec
	if err := dec.Decode(&spec); err != nil {
		return err
	}
	if err := spec.check(); err != nil {
		return err
	}
	paths, err := cPaths(spec.Files)
	if err != nil {
		return err
	}
	data := make([]byte, spec.MaxBytes+1)
	buf := make([]byte, spec.MaxBytes+1)
	var stx unix.Statx_t
	for {
		var ph bonniePhaseReq
		if err := dec.Decode(&ph); err == io.EOF {
			return nil
		} else if err != nil {
			return err
		}
		rep := bonniePhaseReply{Lat: make([]int64, 0, len(ph.Idx))}
		t0 := time.Now()
		for _, i := range ph.Idx {
			if i < 0 || i >= len(paths) {
				rep.Err = fmt.Sprintf("file %d of %d", i, len(paths))
				break
			}
			s := time.Now()
			if e := rawBonnieOp(ph.Op, paths[i], data[:spec.Sizes[i]], buf, &stx); e != 0 {
				rep.Err = fmt.Sprintf("%s %s: %v", ph.Op, spec.Files[i], e)
				break
			}
			rep.Lat = append(rep.Lat, int64(time.Since(s)))
		}
		rep.Elapsed = int64(time.Since(t0))
		if err := enc.Encode(rep); err != nil {
			return err
		}
	}
}

var atFDCWD = unix.AT_FDCWD

// rawBonnieOp is bonnieOp in raw system calls.
func rawBonnieOp(op string, path *byte, data, buf []byte, stx *unix.Statx_t) syscall.Errno {
	switch op {
	case "create":
		fd, _, e := unix.RawSyscall6(unix.SYS_OPENAT, uintptr(atFDCWD), uintptr(unsafe.Pointer(path)),
			uintptr(unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC), 0o644, 0, 0)
		if e != 0 {
			return e
		}
		if len(data) > 0 {
			if _, _, e = unix.RawSyscall(unix.SYS_WRITE, fd, uintptr(unsafe.Pointer(&data[0])), uintptr(len(data))); e != 0 {
				unix.RawSyscall(unix.SYS_CLOSE, fd, 0, 0)
				return e
			}
		}
		_, _, e = unix.RawSyscall(unix.SYS_CLOSE, fd, 0, 0)
		return e
	case "read":
		if _, _, e := unix.RawSyscall6(unix.SYS_STATX, uintptr(atFDCWD), uintptr(unsafe.Pointer(path)),
			unix.AT_STATX_SYNC_AS_STAT, unix.STATX_BASIC_STATS, uintptr(unsafe.Pointer(stx)), 0); e != 0 {
			return e
		}
		if stx.Size == 0 {
			return 0
		}
		fd, _, e := unix.RawSyscall6(unix.SYS_OPENAT, uintptr(atFDCWD), uintptr(unsafe.Pointer(path)),
			uintptr(unix.O_RDONLY|unix.O_CLOEXEC), 0, 0, 0)
		if e != 0 {
			return e
		}
		_, _, e = unix.RawSyscall(unix.SYS_READ, fd, uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)))
		unix.RawSyscall(unix.SYS_CLOSE, fd, 0, 0)
		return e
	case "delete":
		_, _, e := unix.RawSyscall(unix.SYS_UNLINKAT, uintptr(atFDCWD), uintptr(unsafe.Pointer(path)), 0)
		return e
	}
	return unix.EINVAL
}

// startRawChild starts this executable again as the child role with
// procs of Go's processors, the collector off and no preemption signals,
// its stdin and stdout piped to the caller: a process whose system calls
// Go's runtime takes no part in.
func startRawChild(role string, procs int) (*exec.Cmd, io.WriteCloser, io.ReadCloser, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, nil, nil, err
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), childEnv+"="+role, "GOMAXPROCS="+strconv.Itoa(procs), "GOGC=off", "GODEBUG=asyncpreemptoff=1")
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, nil, nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, nil, nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, nil, nil, err
	}
	return cmd, in, out, nil
}

// cPaths makes each path a C string for the raw calls.
func cPaths(files []string) ([]*byte, error) {
	paths := make([]*byte, len(files))
	for i, f := range files {
		p, err := unix.BytePtrFromString(f)
		if err != nil {
			return nil, err
		}
		paths[i] = p
	}
	return paths, nil
}

// rawClient is the agent's end of a raw client process.
type rawClient struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	dec *json.Decoder
	enc *json.Encoder
}

func startRawClient(spec bonnieSpec) (*rawClient, error) {
	if err := spec.check(); err != nil {
		return nil, err
	}
	cmd, in, out, err := startRawChild("bonnie", 1)
	if err != nil {
		return nil, fmt.Errorf("starting bonnie's client: %w", err)
	}
	c := &rawClient{cmd: cmd, in: in, dec: json.NewDecoder(out), enc: json.NewEncoder(in)}
	if err := c.enc.Encode(spec); err != nil {
		c.close()
		return nil, err
	}
	return c, nil
}

// phase runs one phase's ops on the files idx.
func (c *rawClient) phase(op string, idx []int) (time.Duration, latencies, error) {
	if err := c.enc.Encode(bonniePhaseReq{Op: op, Idx: idx}); err != nil {
		return 0, nil, fmt.Errorf("bonnie's client: %w", err)
	}
	var rep bonniePhaseReply
	if err := c.dec.Decode(&rep); err != nil {
		return 0, nil, fmt.Errorf("bonnie's client: %w", err)
	}
	if rep.Err != "" {
		return 0, nil, errors.New(rep.Err)
	}
	lat := make(latencies, len(rep.Lat))
	for i, d := range rep.Lat {
		lat[i] = time.Duration(d)
	}
	return time.Duration(rep.Elapsed), lat, nil
}

func (c *rawClient) close() {
	c.in.Close()
	waitChild(c.cmd, 10*time.Second)
}

// Where the raw client and server run: the client on the first CPU, the
// server's threads on the last, so that every request and every reply is
// a wake-up from one CPU to the other. Left to the scheduler, one server
// thread's windows fell in two modes: most with the server asleep at each
// request, some 16% faster with 37% fewer wake-ups, and a run whose
// rounds drew different shares of them could see nothing within 40%.
func rawCPUs() (client, server int) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return 0, 0
	}
	client, server = -1, 0
	for cpu := 0; cpu < len(set)*64; cpu++ {
		if set.IsSet(cpu) {
			if client < 0 {
				client = cpu
			}
			server = cpu
		}
	}
	return max(client, 0), server
}

// pinTo pins every thread of this process to cpu; the threads made
// later inherit it from the thread that makes them.
func pinTo(cpu int) error {
	var set unix.CPUSet
	set.Set(cpu)
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return err
	}
	for _, t := range tasks {
		tid, err := strconv.Atoi(t.Name())
		if err != nil {
			continue
		}
		if err := unix.SchedSetaffinity(tid, &set); err != nil && !errors.Is(err, unix.ESRCH) {
			return fmt.Errorf("pinning thread %d to CPU %d: %w", tid, cpu, err)
		}
	}
	return nil
}
