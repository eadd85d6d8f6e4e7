package vmrunner

import (
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// maxImage bounds what is copied into memory for QEMU (a kernel or an
// initramfs): far above any real one, it stops a runaway file.
const maxImage = 1 << 30

// openImage opens a file the VM is given, read-only, without following a
// symbolic link at its last component, and checks that it is a regular
// file: the cache holds what builds produced, and a link planted there
// must not hand a VM a file of patchbot's.
func openImage(path string) (*os.File, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	f := os.NewFile(uintptr(fd), path)
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("%s: not a regular file (%s)", path, st.Mode().Type())
	}
	// O_NONBLOCK only kept a FIFO from blocking the open.
	if _, err := unix.FcntlInt(f.Fd(), unix.F_SETFL, 0); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// sealedCopy copies the file at path into a sealed memfd. QEMU reads
// the kernel and the initramfs by path (it reopens them), so it is given
// /proc/self/fd/N of this copy: a memfd can be reopened by any process
// that holds it, while the file in the cache (0600, under 0700
// directories) stays closed to QEMU's user. The seals make the copy
// immutable, so every VM sees what was checked.
func sealedCopy(path string) (*os.File, error) {
	src, err := openImage(path)
	if err != nil {
		return nil, err
	}
	defer src.Close()
	fd, err := unix.MemfdCreate("patchbot-"+filepath.Base(path), unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, fmt.Errorf("memfd for %s: %w", path, err)
	}
	m := os.NewFile(uintptr(fd), "memfd:"+filepath.Base(path))
	n, err := io.Copy(m, io.LimitReader(src, maxImage+1))
	if err == nil && n > maxImage {
		err = fmt.Errorf("larger than %d MiB", maxImage>>20)
	}
	if err == nil {
		_, err = unix.FcntlInt(m.Fd(), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_WRITE|unix.F_SEAL_SEAL)
	}
	if err != nil {
		m.Close()
		return nil, fmt.Errorf("copying %s for the VM: %w", path, err)
	}
	return m, nil
}

// xenNotePhys32Entry is the ELF note (owner "Xen") holding the kernel's
// 32-bit PVH entry point, which QEMU looks for to boot an ELF as PVH.
const xenNotePhys32Entry = 18

// bootPath is the path a spec boots on under the config's Boot, and the
// kernel file for it: PVH when asked, or in auto mode when the kernel has
// a PVH-bootable ELF; legacy otherwise. Asking for PVH of a kernel without
// one is an error. hz is the PVH kernel's CONFIG_HZ (kernelHZ), 0 on the
// legacy path or when the ELF does not say.
func bootPath(want string, s Spec) (boot, kernel string, hz int, err error) {
	if want == BootLegacy {
		return BootLegacy, s.Kernel, 0, nil
	}
	vmlinux, why := pvhKernel(s)
	switch {
	case vmlinux != "":
		return BootPVH, vmlinux, kernelHZ(vmlinux), nil
	case want == BootPVH:
		return "", "", 0, fmt.Errorf("spec %q: PVH boot asked for, but %s", s.Name, why)
	}
	return BootLegacy, s.Kernel, 0, nil
}

// pvhKernel returns the ELF to boot at its PVH entry point for s: the
// explicit Spec.Vmlinux, the Kernel itself if it is such an ELF, or the
// "vmlinux" beside it. why says why there is none.
func pvhKernel(s Spec) (path, why string) {
	candidates := []string{s.Kernel, filepath.Join(filepath.Dir(s.Kernel), "vmlinux")}
	if s.Vmlinux != "" {
		candidates = []string{s.Vmlinux}
	}
	why = "no vmlinux beside " + s.Kernel
	for _, c := range candidates {
		ok, err := hasPVHEntry(c)
		switch {
		case ok:
			return c, ""
		case errors.Is(err, errNotELF) && c == s.Kernel && s.Vmlinux == "":
			// a bzImage: look beside it
		case errors.Is(err, os.ErrNotExist) && s.Vmlinux == "":
		case err != nil:
			why = err.Error()
		default:
			why = c + " has no PVH entry point (CONFIG_PVH)"
		}
	}
	return "", why
}

var errNotELF = errors.New("not an ELF file")

// hasPVHEntry reports whether path is an x86-64 ELF with a PVH entry
// note. A file that is not an ELF at all (a bzImage) is errNotELF.
func hasPVHEntry(path string) (bool, error) {
	f, err := openImage(path)
	if err != nil {
		return false, err
	}
	defer f.Close()
	var magic [4]byte
	if _, err := io.ReadFull(f, magic[:]); err != nil || string(magic[:]) != elf.ELFMAG {
		return false, fmt.Errorf("%s: %w", path, errNotELF)
	}
	ef, err := elf.NewFile(f)
	if err != nil {
		return false, fmt.Errorf("%s: %w", path, err)
	}
	if ef.Machine != elf.EM_X86_64 {
		return false, fmt.Errorf("%s: an ELF for %s, not x86-64", path, ef.Machine)
	}
	for _, p := range ef.Progs {
		if p.Type != elf.PT_NOTE || p.Filesz > 1<<20 {
			continue
		}
		data := make([]byte, p.Filesz)
		if _, err := p.ReadAt(data, 0); err != nil {
			return false, fmt.Errorf("%s: notes: %w", path, err)
		}
		if hasNote(data, ef.ByteOrder, "Xen", xenNotePhys32Entry) {
			return true, nil
		}
	}
	return false, nil
}

// hasNote walks ELF notes (namesz, descsz, type, name, desc; each padded
// to 4 bytes) for one of the given owner and type.
func hasNote(data []byte, bo binary.ByteOrder, owner string, typ uint32) bool {
	pad := func(n uint32) uint64 { return (uint64(n) + 3) &^ 3 }
	for len(data) >= 12 {
		namesz, descsz, t := bo.Uint32(data), bo.Uint32(data[4:]), bo.Uint32(data[8:])
		end := 12 + pad(namesz) + pad(descsz)
		if end > uint64(len(data)) {
			return false
		}
		name := data[12 : 12+uint64(namesz)]
		if len(name) > 0 && name[len(name)-1] == 0 {
			name = name[:len(name)-1]
		}
		if t == typ && string(name) == owner {
			return true
		}
		data = data[end:]
	}
	return false
}

// kernelHZ is the tick rate (CONFIG_HZ) an x86-64 vmlinux was built with,
// read from its ELF: jiffies_64 starts at INITIAL_JIFFIES, (u32)(-300*HZ),
// so that the jiffies counter wraps five minutes after boot. 0 when the
// ELF has no symbol table (a stripped vmlinux) or the value is not of that
// form: the caller then leaves the kernel to calibrate.
func kernelHZ(path string) int {
	f, err := openImage(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	ef, err := elf.NewFile(f)
	if err != nil || ef.Machine != elf.EM_X86_64 {
		return 0
	}
	// The ELF comes from a build of a stranger's patch: read its symbol
	// table only when it is of a kernel's size (6.1's is 1-2 MiB).
	if st := ef.Section(".symtab"); st == nil || st.Size > maxSymtab {
		return 0
	}
	syms, err := ef.Symbols()
	if err != nil {
		return 0
	}
	for _, s := range syms {
		if s.Name != "jiffies_64" || s.Size != 8 || int(s.Section) >= len(ef.Sections) {
			continue
		}
		sec := ef.Sections[s.Section]
		if sec.Type != elf.SHT_PROGBITS || s.Value < sec.Addr || s.Value+8 > sec.Addr+sec.Size {
			return 0
		}
		var b [8]byte
		if _, err := sec.ReadAt(b[:], int64(s.Value-sec.Addr)); err != nil {
			return 0
		}
		return hzFromInitialJiffies(ef.ByteOrder.Uint64(b[:]))
	}
	return 0
}

// maxSymtab bounds the symbol table kernelHZ reads into memory.
const maxSymtab = 64 << 20

// hzFromInitialJiffies inverts INITIAL_JIFFIES = (u32)(-300*HZ), for the
// rates a kernel can be configured with (10 to 10,000 Hz).
func hzFromInitialJiffies(v uint64) int {
	if v == 0 || v >= 1<<32 {
		return 0
	}
	d := 1<<32 - v
	if d%300 != 0 {
		return 0
	}
	if hz := d / 300; hz >= 10 && hz <= 10000 {
		return int(hz)
	}
	return 0
}
