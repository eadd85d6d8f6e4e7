// Package fsimage builds the read-only squashfs images that the suites read:
// a file tree generated from a seed (file count, size distribution,
// directory fan-out) packed by mksquashfs with a chosen compressor and block
// size. The same Spec always gives the same bytes, so a cached image can be
// reused and an A/B comparison reads identical data on both kernels.
package fsimage

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// Group is a set of files of one size range, laid out as
// /<Name>/d<NNN>/f<NNNNNN> under the image root.
type Group struct {
	Name     string `yaml:"name" json:"name"`
	Count    int    `yaml:"count" json:"count"`         // files in the group
	MinBytes int64  `yaml:"min_bytes" json:"min_bytes"` // sizes are uniform in [MinBytes, MaxBytes]
	MaxBytes int64  `yaml:"max_bytes" json:"max_bytes"`
	// Dirs is the directory fan-out: files are spread round-robin over this
	// many directories (default 1).
	Dirs int `yaml:"dirs" json:"dirs"`
}

// Spec is everything that determines an image's bytes.
type Spec struct {
	Seed       uint64  `yaml:"seed" json:"seed"`
	Compressor string  `yaml:"compressor" json:"compressor"` // gzip, xz, zstd, lzo, lz4
	BlockSize  int     `yaml:"block_size" json:"block_size"` // bytes, power of two in [4K, 1M]
	Fragments  *bool   `yaml:"fragments" json:"fragments"`   // pack file tails into fragments (default true)
	Groups     []Group `yaml:"groups" json:"groups"`
}

// Defaults for an unset Spec field.
const (
	DefaultCompressor = "gzip"
	DefaultBlockSize  = 128 << 10
)

// withDefaults returns s with unset fields filled in.
func (s Spec) withDefaults() Spec {
	if s.Compressor == "" {
		s.Compressor = DefaultCompressor
	}
	if s.BlockSize == 0 {
		s.BlockSize = DefaultBlockSize
	}
	if s.Fragments == nil {
		t := true
		s.Fragments = &t
	}
	g := make([]Group, len(s.Groups))
	copy(g, s.Groups)
	for i := range g {
		if g[i].Dirs == 0 {
			g[i].Dirs = 1
		}
	}
	s.Groups = g
	return s
}

// Validate reports the first problem with s, naming the field.
func (s Spec) Validate() error {
	s = s.withDefaults()
	switch s.Compressor {
	case "gzip", "xz", "zstd", "lzo", "lz4", "lzma":
	default:
		return fmt.Errorf("fsimage: compressor %q: want gzip, xz, zstd, lzo, lz4 or lzma", s.Compressor)
	}
	if s.BlockSize < 4096 || s.BlockSize > 1<<20 || s.BlockSize&(s.BlockSize-1) != 0 {
		return fmt.Errorf("fsimage: block_size %d: want a power of two from 4096 to 1048576", s.BlockSize)
	}
	if len(s.Groups) == 0 {
		return errors.New("fsimage: no file groups")
	}
	seen := map[string]bool{}
	for i, g := range s.Groups {
		switch {
		case g.Name == "" || strings.ContainsAny(g.Name, "/\x00") || g.Name == "." || g.Name == "..":
			return fmt.Errorf("fsimage: group %d: name %q is not a single path element", i, g.Name)
		case seen[g.Name]:
			return fmt.Errorf("fsimage: group %q appears twice", g.Name)
		case g.Count < 1:
			return fmt.Errorf("fsimage: group %q: count %d: want at least 1", g.Name, g.Count)
		case g.MinBytes < 0 || g.MaxBytes < g.MinBytes:
			return fmt.Errorf("fsimage: group %q: sizes [%d, %d] are not a range", g.Name, g.MinBytes, g.MaxBytes)
		case g.Dirs < 1 || g.Dirs > g.Count:
			return fmt.Errorf("fsimage: group %q: dirs %d: want 1..count (%d)", g.Name, g.Dirs, g.Count)
		}
		seen[g.Name] = true
	}
	return nil
}

// Key is a short hash of the normalised spec and the mksquashfs version: the
// cache name of the image.
func (s Spec) Key(mksquashfsVersion string) string {
	b, _ := json.Marshal(struct {
		Spec    Spec
		Version string
		Layout  int // bump when the tree generator changes
	}{s.withDefaults(), mksquashfsVersion, 1})
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:8])
}

// File is one generated file, as the workloads see it under the mount point.
type File struct {
	Path string // relative to the image root, e.g. "small/d003/f000017"
	Size int64
}

// Files lists the files of the spec's tree in a fixed order (group by group,
// in creation order), without generating any data. Workloads use it to know
// what to read without walking the mount.
func (s Spec) Files() []File {
	s = s.withDefaults()
	var out []File
	for gi, g := range s.Groups {
		rng := rand.New(rand.NewPCG(s.Seed, uint64(gi)))
		for i := 0; i < g.Count; i++ {
			out = append(out, File{Path: filePath(g, i), Size: fileSize(rng, g)})
			rng.Uint64() // the content seed of file i, drawn in the same order as Generate
		}
	}
	return out
}

func filePath(g Group, i int) string {
	return fmt.Sprintf("%s/d%03d/f%06d", g.Name, i%g.Dirs, i)
}

func fileSize(rng *rand.Rand, g Group) int64 {
	if g.MaxBytes == g.MinBytes {
		return g.MinBytes
	}
	return g.MinBytes + rng.Int64N(g.MaxBytes-g.MinBytes+1)
}

// Generate writes the spec's tree under dir (which must be empty or absent).
// File contents are text-like words so that they compress about as well as
// ordinary files: decompression cost is what the suites exercise.
func (s Spec) Generate(dir string) error {
	if err := s.Validate(); err != nil {
		return err
	}
	s = s.withDefaults()
	for gi, g := range s.Groups {
		for d := 0; d < g.Dirs; d++ {
			if err := os.MkdirAll(filepath.Join(dir, g.Name, fmt.Sprintf("d%03d", d)), 0o755); err != nil {
				return fmt.Errorf("fsimage: generating tree: %w", err)
			}
		}
		// Modes are fixed explicitly: the umask must not change the image.
		for d := 0; d < g.Dirs; d++ {
			if err := os.Chmod(filepath.Join(dir, g.Name, fmt.Sprintf("d%03d", d)), 0o755); err != nil {
				return fmt.Errorf("fsimage: generating tree: %w", err)
			}
		}
		if err := os.Chmod(filepath.Join(dir, g.Name), 0o755); err != nil {
			return fmt.Errorf("fsimage: generating tree: %w", err)
		}
		rng := rand.New(rand.NewPCG(s.Seed, uint64(gi)))
		for i := 0; i < g.Count; i++ {
			size := fileSize(rng, g)
			content := rng.Uint64()
			if err := writeFile(filepath.Join(dir, filePath(g, i)), size, content); err != nil {
				return fmt.Errorf("fsimage: generating tree: %w", err)
			}
		}
	}
	return nil
}

// words is the vocabulary of generated files; its size gives gzip about a
// 2.5:1 ratio, near that of source code.
var words = strings.Fields(`squashfs cache entry block fragment metadata inode
directory read write lock unlock wake sleep queue thread task kernel page folio
readahead decompress gzip zstd buffer offset length index table super mount
file open close stat the a of to in and for with on at by from is are was were
0 1 2 3 4 5 6 7 8 9 10 16 32 64 128 256 512 1024 4096 65536 { } ( ) ; = + - *`)

func writeFile(path string, size int64, seed uint64) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	if err := f.Chmod(0o644); err != nil {
		f.Close()
		return err
	}
	w := bufio.NewWriterSize(f, 64<<10)
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	var n int64
	for n < size {
		word := words[rng.IntN(len(words))]
		sep := byte(' ')
		if rng.IntN(12) == 0 {
			sep = '\n'
		}
		for j := 0; j < len(word) && n < size; j++ {
			w.WriteByte(word[j])
			n++
		}
		if n < size {
			w.WriteByte(sep)
			n++
		}
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// MksquashfsVersion returns the first line of `mksquashfs -version`, part
// of the cache key because another version may lay out the same tree
// differently.
func MksquashfsVersion(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "mksquashfs", "-version").Output()
	if err != nil {
		return "", fmt.Errorf("fsimage: running mksquashfs -version (is squashfs-tools installed?): %w", err)
	}
	line, _, _ := strings.Cut(string(out), "\n")
	return strings.TrimSpace(line), nil
}

// Build returns the path of the spec's image under cacheDir, generating the
// tree and running mksquashfs when it is not cached yet. The image is
// written to a temporary name and renamed, so a crash never leaves a
// truncated image under the cached name.
func Build(ctx context.Context, s Spec, cacheDir string) (path string, cached bool, err error) {
	if err := s.Validate(); err != nil {
		return "", false, err
	}
	version, err := MksquashfsVersion(ctx)
	if err != nil {
		return "", false, err
	}
	if err := os.MkdirAll(cacheDir, 0o755); err != nil {
		return "", false, fmt.Errorf("fsimage: creating cache dir: %w", err)
	}
	path = filepath.Join(cacheDir, s.Key(version)+".sqfs")
	if _, err := os.Stat(path); err == nil {
		// The file's time is its last use: the cache evicts the least
		// recently used (images.Builder.Evict).
		now := time.Now()
		os.Chtimes(path, now, now)
		return path, true, nil
	}
	work, err := os.MkdirTemp(cacheDir, "build-*")
	if err != nil {
		return "", false, fmt.Errorf("fsimage: creating work dir: %w", err)
	}
	defer os.RemoveAll(work)
	tree := filepath.Join(work, "tree")
	if err := s.Generate(tree); err != nil {
		return "", false, err
	}
	tmp := filepath.Join(work, "image.sqfs")
	if err := Pack(ctx, s, tree, tmp); err != nil {
		return "", false, err
	}
	if err := os.Rename(tmp, path); err != nil {
		return "", false, fmt.Errorf("fsimage: storing image: %w", err)
	}
	return path, false, nil
}

// Pack runs mksquashfs on tree with the spec's compressor and block size and
// with every time, owner and attribute fixed, so that the output depends on
// the tree's names and contents only.
func Pack(ctx context.Context, s Spec, tree, out string) error {
	s = s.withDefaults()
	args := []string{tree, out,
		"-noappend", "-no-progress", "-quiet",
		"-comp", s.Compressor, "-b", fmt.Sprint(s.BlockSize),
		"-reproducible", "-mkfs-time", "0", "-all-time", "0",
		"-all-root", "-no-xattrs", "-root-mode", "0755",
	}
	if !*s.Fragments {
		args = append(args, "-no-fragments")
	}
	cmd := exec.CommandContext(ctx, "mksquashfs", args...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("fsimage: mksquashfs %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return nil
}
