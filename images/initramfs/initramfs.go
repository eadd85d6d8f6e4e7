// Package initramfs builds the guest's initial root filesystem: a cpio
// (newc) archive holding the static guest agent as /init, the kernel
// modules the VM needs when the kernel is not built with them (the Debian
// kernel), and any extra files. No busybox: the agent does what init must.
//
// Archives are cached by content (the agent binary's hash, the modules,
// the files), so a new agent version gives a new archive and the same one is
// built once.
package initramfs

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"
)

// Options say what goes into the archive.
type Options struct {
	// ModuleRoot is the patchbot source tree the agent is built from
	// (./cmd/patchbot-agent). Default: the tree this package was compiled
	// from, else the nearest go.mod of github.com/patchbot/patchbot above
	// the working directory.
	ModuleRoot string
	// Agent is a prebuilt static agent binary; when set, nothing is built.
	// Default: $PATCHBOT_AGENT.
	Agent string
	// CacheDir holds built archives. Default: $PATCHBOT_CACHE/initramfs,
	// else the user's cache directory + patchbot/initramfs.
	CacheDir string
	// Modules, when set, are packed under /lib/modules/<release>/ with a
	// modules.dep the agent loads them from, in order.
	Modules *Modules
	// Files are extra files for the suites.
	Files []File
}

// File is one extra file: Data, or the contents of Source.
type File struct {
	Path   string // in the guest, e.g. "/etc/patchbot/suite.yaml"
	Source string
	Data   []byte
	Mode   os.FileMode // default 0644
}

// Modules selects kernel modules from an installed module tree.
type Modules struct {
	// Dir is the tree, e.g. /lib/modules/6.1.0-57-amd64 (with modules.dep).
	Dir string
	// Release is the guest's uname -r; default filepath.Base(Dir).
	Release string
	// Names are modules such as "virtio_pci"; what they depend on is added.
	Names []string
}

// VMModules are what a guest needs from a modular kernel: the agent's
// virtio-serial port, virtio disks, and what the suites mount.
var VMModules = []string{"virtio_pci", "virtio_console", "virtio_blk", "squashfs", "fuse", "loop"}

// Build returns the path of a cached archive for opts, building it first
// if needed.
func Build(ctx context.Context, opts Options) (string, error) {
	agentPath := opts.Agent
	if agentPath == "" {
		agentPath = os.Getenv("PATCHBOT_AGENT")
	}
	if agentPath == "" {
		var err error
		if agentPath, err = BuildAgent(ctx, opts.ModuleRoot); err != nil {
			return "", err
		}
	}
	agentBin, err := os.ReadFile(agentPath)
	if err != nil {
		return "", fmt.Errorf("initramfs: read agent: %w", err)
	}
	files := []File{{Path: "/init", Data: agentBin, Mode: 0o755}}
	if opts.Modules != nil {
		mf, err := opts.Modules.files()
		if err != nil {
			return "", err
		}
		files = append(files, mf...)
	}
	for _, f := range opts.Files {
		if f.Data == nil && f.Source != "" {
			if f.Data, err = os.ReadFile(f.Source); err != nil {
				return "", fmt.Errorf("initramfs: extra file %s: %w", f.Path, err)
			}
		}
		if !strings.HasPrefix(f.Path, "/") || f.Path == "/init" {
			return "", fmt.Errorf("initramfs: extra file path %q must be absolute and not /init", f.Path)
		}
		files = append(files, f)
	}

	dir := opts.CacheDir
	if dir == "" {
		if dir, err = defaultCacheDir(); err != nil {
			return "", err
		}
	}
	// Not compressed: under TCG the kernel's gunzip of the 2 MiB archive
	// cost 450 ms of a boot against 140 ms to copy the 4.3 MiB out raw,
	// and alternated boots were 25-55 ms faster at the median (docs/vmrunner.md).
	// QEMU loads the file from the host's page cache either way.
	out := filepath.Join(dir, "initramfs-"+key(files)+".cpio")
	if _, err := os.Stat(out); err == nil {
		// The file's time is its last use: the cache evicts the least
		// recently used (images.Builder.Evict).
		now := time.Now()
		os.Chtimes(out, now, now)
		return out, nil
	}
	if err := privateDir(dir); err != nil {
		return "", err
	}
	tmp, err := os.CreateTemp(dir, ".initramfs-*")
	if err != nil {
		return "", fmt.Errorf("initramfs: %w", err)
	}
	defer os.Remove(tmp.Name())
	if err := write(tmp, files); err != nil {
		tmp.Close()
		return "", fmt.Errorf("initramfs: write %s: %w", tmp.Name(), err)
	}
	if err := tmp.Close(); err != nil {
		return "", fmt.Errorf("initramfs: %w", err)
	}
	// 0600 like the rest of the cache: a VM gets a copy through a
	// descriptor (vmrunner), never the file.
	os.Chmod(tmp.Name(), 0o600)
	// Rename is atomic: concurrent builders of the same key both succeed.
	if err := os.Rename(tmp.Name(), out); err != nil {
		return "", fmt.Errorf("initramfs: %w", err)
	}
	return out, nil
}

// privateDir makes the cache directory and keeps it 0700.
func privateDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("initramfs: %w", err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return fmt.Errorf("initramfs: %w", err)
	}
	return nil
}

func key(files []File) string {
	h := sha256.New()
	for _, f := range files {
		sum := sha256.Sum256(f.Data)
		fmt.Fprintf(h, "%s %o %x\n", f.Path, f.mode(), sum)
	}
	return hex.EncodeToString(h.Sum(nil))[:20]
}

func (f File) mode() os.FileMode {
	if f.Mode == 0 {
		return 0o644
	}
	return f.Mode
}

func write(w io.Writer, files []File) error {
	bw := bufio.NewWriterSize(w, 1<<20)
	c := newCPIOWriter(bw)
	// The kernel opens /dev/console for init's stdio before anything is
	// mounted, so the node must be in the archive.
	c.charDev("/dev/console", 0o600, 5, 1)
	for _, d := range []string{"/proc", "/sys", "/tmp", "/run", "/mnt"} {
		c.mkdirAll(d)
	}
	for _, f := range files {
		c.file(f.Path, f.mode(), f.Data)
	}
	if err := c.close(); err != nil {
		return err
	}
	return bw.Flush()
}

func defaultCacheDir() (string, error) {
	if d := os.Getenv("PATCHBOT_CACHE"); d != "" {
		return filepath.Join(d, "initramfs"), nil
	}
	d, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("initramfs: no cache directory: %w", err)
	}
	return filepath.Join(d, "patchbot", "initramfs"), nil
}

var (
	agentMu    sync.Mutex
	agentBuilt = map[string]string{} // module root → binary, once per process
)

// BuildAgent builds a static agent (CGO_ENABLED=0) from the patchbot tree
// at root ("" to find it) and returns the binary's path. It refuses a tree
// whose agent sources are not those of the revision this binary was built
// from (checkAgentSources).
func BuildAgent(ctx context.Context, root string) (string, error) {
	if root == "" {
		var err error
		if root, err = findModuleRoot(); err != nil {
			return "", err
		}
	}
	agentMu.Lock()
	defer agentMu.Unlock()
	if p, ok := agentBuilt[root]; ok {
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	if err := checkAgentSources(ctx, root, binaryRevision()); err != nil {
		return "", err
	}
	dir, err := defaultCacheDir()
	if err != nil {
		return "", err
	}
	if err := privateDir(dir); err != nil {
		return "", err
	}
	f, err := os.CreateTemp(dir, ".patchbot-agent-*")
	if err != nil {
		return "", fmt.Errorf("initramfs: %w", err)
	}
	f.Close()
	// Without the symbol table and DWARF (panics still name functions):
	// a smaller /init is less for the guest to unpack.
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-buildvcs=false", "-ldflags=-s -w", "-o", f.Name(), "./cmd/patchbot-agent")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
	if out, err := cmd.CombinedOutput(); err != nil {
		os.Remove(f.Name())
		return "", fmt.Errorf("initramfs: build the guest agent in %s: %w\n%s", root, err, out)
	}
	// Name the binary by its hash, so one file per agent version stays.
	b, err := os.ReadFile(f.Name())
	if err != nil {
		return "", fmt.Errorf("initramfs: %w", err)
	}
	sum := sha256.Sum256(b)
	p := filepath.Join(dir, "patchbot-agent-"+hex.EncodeToString(sum[:])[:20])
	if err := os.Rename(f.Name(), p); err != nil {
		return "", fmt.Errorf("initramfs: %w", err)
	}
	agentBuilt[root] = p
	return p, nil
}

// findModuleRoot returns the source tree this package was compiled from,
// or the one holding the working directory.
func findModuleRoot() (string, error) {
	if _, file, _, ok := runtime.Caller(0); ok {
		root := filepath.Dir(filepath.Dir(filepath.Dir(file)))
		if isPatchbotRoot(root) {
			return root, nil
		}
	}
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("initramfs: %w", err)
	}
	for {
		if isPatchbotRoot(dir) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("initramfs: no patchbot source tree to build the agent from (set Options.ModuleRoot or Options.Agent)")
		}
		dir = parent
	}
}

func isPatchbotRoot(dir string) bool {
	b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	return err == nil && bytes.HasPrefix(b, []byte("module github.com/patchbot/patchbot\n"))
}

// files resolves the modules and their dependencies and returns them with
// a modules.dep that lists only them, dependencies before dependents.
func (m *Modules) files() ([]File, error) {
	release := m.Release
	if release == "" {
		release = filepath.Base(m.Dir)
	}
	dep, err := os.ReadFile(filepath.Join(m.Dir, "modules.dep"))
	if err != nil {
		return nil, fmt.Errorf("initramfs: modules: %w", err)
	}
	deps := map[string][]string{} // path → dependencies
	byName := map[string]string{} // name → path
	for _, line := range strings.Split(string(dep), "\n") {
		p, rest, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		deps[p] = strings.Fields(rest)
		byName[moduleName(p)] = p
	}
	var order []string
	seen := map[string]bool{}
	var add func(p string)
	add = func(p string) {
		if seen[p] {
			return
		}
		seen[p] = true
		d := deps[p]
		for i := len(d) - 1; i >= 0; i-- {
			add(d[i])
		}
		order = append(order, p)
	}
	for _, n := range m.Names {
		p, ok := byName[strings.ReplaceAll(n, "-", "_")]
		if !ok {
			builtin, _ := os.ReadFile(filepath.Join(m.Dir, "modules.builtin"))
			if strings.Contains(string(builtin), "/"+n+".ko") {
				continue // built into the kernel
			}
			return nil, fmt.Errorf("initramfs: module %q not in %s/modules.dep", n, m.Dir)
		}
		add(p)
	}
	var files []File
	var depOut strings.Builder
	guestDir := "/lib/modules/" + release + "/"
	for _, p := range order {
		data, err := readModule(filepath.Join(m.Dir, p))
		if err != nil {
			return nil, err
		}
		gp := trimCompression(p)
		files = append(files, File{Path: guestDir + gp, Data: data})
		var ds []string
		for _, d := range deps[p] {
			ds = append(ds, trimCompression(d))
		}
		fmt.Fprintf(&depOut, "%s:", gp)
		for _, d := range ds {
			fmt.Fprintf(&depOut, " %s", d)
		}
		depOut.WriteString("\n")
	}
	files = append(files, File{Path: guestDir + "modules.dep", Data: []byte(depOut.String())})
	return files, nil
}

func moduleName(p string) string {
	return strings.ReplaceAll(strings.TrimSuffix(filepath.Base(trimCompression(p)), ".ko"), "-", "_")
}

func trimCompression(p string) string {
	for _, ext := range []string{".xz", ".zst", ".gz"} {
		if strings.HasSuffix(p, ".ko"+ext) {
			return strings.TrimSuffix(p, ext)
		}
	}
	return p
}

// readModule returns a module uncompressed: the agent loads it with
// finit_module, which a kernel without in-kernel decompression needs plain.
func readModule(p string) ([]byte, error) {
	var tool string
	switch {
	case strings.HasSuffix(p, ".ko.gz"):
		f, err := os.Open(p)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		zr, err := gzip.NewReader(f)
		if err != nil {
			return nil, fmt.Errorf("initramfs: %s: %w", p, err)
		}
		return io.ReadAll(zr)
	case strings.HasSuffix(p, ".ko.xz"):
		tool = "xz"
	case strings.HasSuffix(p, ".ko.zst"):
		tool = "zstd"
	default:
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("initramfs: module: %w", err)
		}
		return b, nil
	}
	out, err := exec.Command(tool, "-dc", p).Output()
	if err != nil {
		return nil, fmt.Errorf("initramfs: decompress %s with %s: %w", p, tool, err)
	}
	return out, nil
}

// KernelRelease reads the release (uname -r) from a bzImage's header.
func KernelRelease(bzImage string) (string, error) {
	f, err := os.Open(bzImage)
	if err != nil {
		return "", fmt.Errorf("kernel release: %w", err)
	}
	defer f.Close()
	hdr := make([]byte, 0x210)
	if _, err := io.ReadFull(f, hdr); err != nil {
		return "", fmt.Errorf("kernel release of %s: %w", bzImage, err)
	}
	if string(hdr[0x202:0x206]) != "HdrS" {
		return "", fmt.Errorf("kernel release: %s is not a bzImage", bzImage)
	}
	off := int64(hdr[0x20e]) | int64(hdr[0x20f])<<8
	buf := make([]byte, 256)
	n, _ := f.ReadAt(buf, off+0x200)
	s := string(buf[:n])
	if i := strings.IndexAny(s, " \x00"); i >= 0 {
		s = s[:i]
	}
	if s == "" {
		return "", fmt.Errorf("kernel release: no version string in %s", bzImage)
	}
	return s, nil
}

// ModulesFor returns the VM modules for bzImage when its release has a
// module tree under /lib/modules (a distribution kernel), and nil when it
// has none (a kernel built with everything it needs, like images/' own).
func ModulesFor(bzImage string) (*Modules, error) {
	rel, err := KernelRelease(bzImage)
	if err != nil {
		return nil, err
	}
	dir := filepath.Join("/lib/modules", rel)
	if _, err := os.Stat(filepath.Join(dir, "modules.dep")); err != nil {
		return nil, nil
	}
	return &Modules{Dir: dir, Release: rel, Names: VMModules}, nil
}

// ForKernel is Build with the modules bzImage needs, if any.
func ForKernel(ctx context.Context, bzImage string, opts Options) (string, error) {
	mods, err := ModulesFor(bzImage)
	if err != nil {
		return "", err
	}
	if mods != nil {
		opts.Modules = mods
	}
	return Build(ctx, opts)
}
