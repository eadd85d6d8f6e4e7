package images

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path"
	"regexp"
	"strings"
)

//go:embed configs/*.config
var configFS embed.FS

// Fragment is one kernel config fragment merged over tinyconfig.
type Fragment struct {
	Name string // file name, e.g. "vm.config"
	Data []byte
}

// Config is how a kernel is configured and built: tinyconfig plus
// fragments, and extra make variables. Everything here is part of the
// cache key.
type Config struct {
	Fragments []Fragment
	// MakeVars are passed to every make call, e.g. KCFLAGS.
	MakeVars []string
}

// DefaultKCFLAGS keeps tail calls as calls: the suites attribute wake-ups
// to their caller (squashfs_cache_put's tail call to wake_up must show its
// caller frame), and base and patched kernels must use the same flags.
// -g1 sets the level of the debug information health.config asks for:
// line tables and inlined calls, what decoding a trace to file:line
// needs, without the types and variables of -g (docs/images.md measures
// both).
const DefaultKCFLAGS = "-fno-optimize-sibling-calls -g1"

// DefaultConfig is the documented config of images/configs: a small kernel
// that boots fast under QEMU TCG and has what the guest agent and the
// suites need.
func DefaultConfig() Config {
	names, err := configFS.ReadDir("configs")
	if err != nil {
		panic(err) // embedded at build time
	}
	var c Config
	for _, n := range names {
		data, err := configFS.ReadFile(path.Join("configs", n.Name()))
		if err != nil {
			panic(err)
		}
		c.Fragments = append(c.Fragments, Fragment{Name: n.Name(), Data: data})
	}
	c.MakeVars = []string{"KCFLAGS=" + DefaultKCFLAGS}
	return c
}

// LoadFragment reads a fragment file, for a user's own config.
func LoadFragment(file string) (Fragment, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return Fragment{}, fmt.Errorf("reading config fragment: %w", err)
	}
	return Fragment{Name: path.Base(file), Data: data}, nil
}

// Hash identifies the config's inputs (fragments in order, make variables).
func (c Config) Hash() string {
	h := sha256.New()
	for _, f := range c.Fragments {
		fmt.Fprintf(h, "fragment %s %d\n", f.Name, len(f.Data))
		h.Write(f.Data)
	}
	for _, v := range c.MakeVars {
		fmt.Fprintf(h, "make %s\n", v)
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// option lines: "CONFIG_FOO=value" or "# CONFIG_FOO is not set".
var (
	setRe   = regexp.MustCompile(`^(CONFIG_[A-Za-z0-9_]+)=(.*)$`)
	unsetRe = regexp.MustCompile(`^# (CONFIG_[A-Za-z0-9_]+) is not set$`)
)

// parseOptions reads a .config or fragment into option -> value, with "n"
// for "is not set". Later lines win, as in merge_config.sh.
func parseOptions(r io.Reader) (map[string]string, []string) {
	opts := map[string]string{}
	var order []string
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		var name, val string
		if m := setRe.FindStringSubmatch(line); m != nil {
			name, val = m[1], m[2]
		} else if m := unsetRe.FindStringSubmatch(line); m != nil {
			name, val = m[1], "n"
		} else {
			continue
		}
		if _, seen := opts[name]; !seen {
			order = append(order, name)
		}
		opts[name] = val
	}
	return opts, order
}

// CheckConfig compares the options the fragments ask for with the final
// .config and lists those that did not survive, in fragment order.
func CheckConfig(fragments []Fragment, final []byte) []Dropped {
	got, _ := parseOptions(bytes.NewReader(final))
	want := map[string]string{}
	var order []string
	for _, f := range fragments {
		opts, o := parseOptions(bytes.NewReader(f.Data))
		for _, name := range o {
			if _, seen := want[name]; !seen {
				order = append(order, name)
			}
			want[name] = opts[name]
		}
	}
	var dropped []Dropped
	for _, name := range order {
		w, g := want[name], got[name]
		if w == "n" && g == "" {
			continue // an unset option may be absent altogether
		}
		if w != g {
			dropped = append(dropped, Dropped{Option: name, Want: w, Got: g})
		}
	}
	return dropped
}
