package images

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// artifact is one file a build hands back from its object tree. The tree
// was written by the build, so nothing in it is trusted: it is opened
// without following any link on the way, must be a regular file no larger
// than max, and must look like what it claims to be.
type artifact struct {
	path string // in the object tree
	name string // in the build directory of the cache
	max  int64
	kind func(head []byte) error
}

var (
	bzImageArtifact = artifact{"arch/x86/boot/bzImage", imageFile, 64 << 20, isBzImage}
	configArtifact  = artifact{".config", confFile, 4 << 20, isConfig}
	vmlinuxArtifact = artifact{"vmlinux", elfFile, 512 << 20, isX86ELF}
)

// isX86ELF checks for a 64-bit little-endian x86-64 ELF file: the
// uncompressed kernel a PVH boot loads.
func isX86ELF(head []byte) error {
	if len(head) < 20 || string(head[:4]) != "\x7fELF" || head[4] != 2 || head[5] != 1 || head[18] != 0x3e || head[19] != 0 {
		return errors.New("is not a 64-bit x86 ELF file")
	}
	return nil
}

// isBzImage checks the x86 boot sector signature and the setup header's
// magic: what QEMU's -kernel will look for.
func isBzImage(head []byte) error {
	if len(head) < 0x206 || head[0x1fe] != 0x55 || head[0x1ff] != 0xaa || string(head[0x202:0x206]) != "HdrS" {
		return errors.New("is not an x86 kernel image (no boot signature and HdrS header)")
	}
	return nil
}

// isConfig checks for the header Kconfig writes.
func isConfig(head []byte) error {
	if !bytes.HasPrefix(head, []byte("#\n# Automatically generated file; DO NOT EDIT.\n")) || bytes.IndexByte(head, 0) >= 0 {
		return errors.New("is not a kernel .config written by Kconfig")
	}
	return nil
}

// badArtifact says that a build's output is not what it should be: the
// build's doing (a patched build's BuildError; a base's InfraError).
type badArtifact struct {
	path string
	why  string
}

func (e *badArtifact) Error() string { return "the build's " + e.path + " " + e.why }

// openBeneath opens the regular file rel below dir for reading, following
// no symbolic link in any component, and checks its size.
func openBeneath(dir, rel string, max int64) (*os.File, error) {
	bad := func(why string) error { return &badArtifact{path: rel, why: why} }
	fd, err := syscall.Open(dir, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, infra("opening "+dir, err)
	}
	parts := strings.Split(filepath.Clean(rel), "/")
	for _, p := range parts[:len(parts)-1] {
		next, err := syscall.Openat(fd, p, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
		syscall.Close(fd)
		if err != nil {
			return nil, openErr(bad, err)
		}
		fd = next
	}
	// O_NONBLOCK: a FIFO planted in place of the file must not hang us.
	ffd, err := syscall.Openat(fd, parts[len(parts)-1],
		syscall.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_NOCTTY|syscall.O_CLOEXEC, 0)
	syscall.Close(fd)
	if err != nil {
		return nil, openErr(bad, err)
	}
	f := os.NewFile(uintptr(ffd), filepath.Join(dir, rel))
	fi, err := f.Stat()
	switch {
	case err != nil:
		f.Close()
		return nil, infra("checking "+rel, err)
	case !fi.Mode().IsRegular():
		f.Close()
		return nil, bad(fmt.Sprintf("is not a regular file (%v)", fi.Mode().Type()))
	case fi.Size() > max:
		f.Close()
		return nil, bad(fmt.Sprintf("is %d bytes, over the %d allowed", fi.Size(), max))
	}
	return f, nil
}

func openErr(bad func(string) error, err error) error {
	switch err {
	case syscall.ELOOP, syscall.ENOTDIR:
		return bad("is or lies beneath a symbolic link")
	case syscall.ENOENT:
		return bad("is missing")
	case syscall.EACCES:
		return bad("cannot be read")
	}
	return infra("opening a build artifact", err)
}

// readArtifact reads a small artifact whole, checked.
func readArtifact(obj string, a artifact) ([]byte, error) {
	f, err := openBeneath(obj, a.path, a.max)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, a.max+1))
	if err != nil {
		return nil, infra("reading "+a.path, err)
	}
	if int64(len(data)) > a.max {
		return nil, &badArtifact{path: a.path, why: "grew past its size limit while read"}
	}
	if err := a.kind(data); err != nil {
		return nil, &badArtifact{path: a.path, why: err.Error()}
	}
	return data, nil
}

// copyArtifact copies a checked artifact from the object tree obj into
// the build directory dir, mode 0600, and returns the copy's path.
func copyArtifact(obj string, a artifact, dir string) (string, error) {
	f, err := openBeneath(obj, a.path, a.max)
	if err != nil {
		return "", err
	}
	defer f.Close()
	head := make([]byte, 4096)
	n, err := io.ReadFull(f, head)
	if err != nil && err != io.ErrUnexpectedEOF && err != io.EOF {
		return "", infra("reading "+a.path, err)
	}
	if err := a.kind(head[:n]); err != nil {
		return "", &badArtifact{path: a.path, why: err.Error()}
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return "", infra("reading "+a.path, err)
	}
	dst := filepath.Join(dir, a.name)
	tmp, err := os.CreateTemp(dir, a.name+".tmp*") // 0600, O_EXCL
	if err != nil {
		return "", infra("copying "+a.path, err)
	}
	defer os.Remove(tmp.Name())
	copied, err := io.Copy(tmp, io.LimitReader(f, a.max+1))
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", infra("copying "+a.path, err)
	}
	if copied > a.max {
		return "", &badArtifact{path: a.path, why: "grew past its size limit while copied"}
	}
	return dst, infra("copying "+a.path, os.Rename(tmp.Name(), dst))
}
