package mailbox

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/patchbot/patchbot/internal/inert"
)

// Command is a request to patchbot written in a reply, one per line:
//
//	#patchbot test [SUITE ...] [profile=P] [base=TREE|COMMIT] [patches=M-N] [series=MESSAGE-ID]
//	#patchbot help
//	#patchbot stop
//
// What the sender wrote is kept short: Line is cut at MaxLine bytes, and
// an error quotes at most MaxEcho bytes of it.
type Command struct {
	Name    string   // "test", "help" or "stop"
	Suites  []string // for "test": the suites asked for, each once; empty means "choose by files"
	Profile string   // for "test": profile=P, empty for the default
	Line    string   // the line as written, for the answer
	Err     string   // set when the line could not be understood; the answer says why

	// Base is base=TREE|COMMIT for "test": the tree or commit to test on,
	// empty to let patchbot choose.
	Base string
	// First and Last are patches=M-N (or patches=M) for "test": measure
	// only those patches, on top of the ones before; 0 for the whole series.
	First, Last int
	// Series is series=MESSAGE-ID for "test": the series holding that mail
	// (a patch or the cover letter), when it is not the thread author's
	// newest; without angle brackets.
	Series string
}

const (
	// MaxLine is how much of a command line is kept, for the answer and
	// the log.
	MaxLine = 256
	// MaxEcho is how much of what a sender wrote an error quotes.
	MaxEcho = 64
)

// seriesIDRe is a Message-ID as series= takes it.
var seriesIDRe = regexp.MustCompile(`^<?[!-;=?-~]{1,250}>?$`)

// baseRe is a tree's name or a commit id as base= takes it: no option, no
// revision syntax.
var baseRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// ParsePatchRange reads "2-3" or "2" (1-based, at most 10000 as a counter),
// the patches= of a test command and patchbot run --patches.
func ParsePatchRange(v string) (first, last int, ok bool) {
	a, b, isRange := strings.Cut(v, "-")
	if !isRange {
		b = a
	}
	m, err1 := strconv.Atoi(a)
	n, err2 := strconv.Atoi(b)
	if err1 != nil || err2 != nil || m < 1 || n < m || n > 10000 {
		return 0, 0, false
	}
	return m, n, true
}

// commandPrefix starts a command line.
const commandPrefix = "#patchbot"

// ParseCommands finds the command lines in a mail's own text. Quoted lines
// ("> #patchbot test") are someone else's earlier request and are ignored,
// as is anything after the diff of a patch.
func ParseCommands(m *Message) []Command {
	var cmds []Command
	body := m.Body
	if m.Diff != "" && !m.DiffAttached {
		if i := strings.Index(body, m.Diff); i >= 0 {
			body = body[:i]
		}
	}
	for line := range strings.Lines(body) {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, commandPrefix) {
			continue
		}
		rest := line[len(commandPrefix):]
		if rest != "" && rest[0] != ' ' && rest[0] != '\t' {
			continue // "#patchbotty" is not for us
		}
		cmds = append(cmds, parseCommand(line, strings.Fields(rest)))
	}
	return cmds
}

func parseCommand(line string, args []string) Command {
	c := Command{Line: inert.Clip(line, MaxLine)}
	q := func(s string) string { return fmt.Sprintf("%q", inert.Clip(s, MaxEcho)) }
	if len(args) == 0 {
		c.Err = "no command after #patchbot (try \"#patchbot help\")"
		return c
	}
	c.Name = strings.ToLower(args[0])
	switch c.Name {
	case "help":
		if len(args) > 1 {
			c.Err = "help takes no arguments, got " + q(strings.Join(args[1:], " "))
		}
	case "stop":
		if len(args) > 1 {
			c.Err = "stop takes no arguments, got " + q(strings.Join(args[1:], " "))
		}
	case "test":
		seen := map[string]bool{}
		for _, a := range args[1:] {
			if v, ok := strings.CutPrefix(a, "profile="); ok {
				if v == "" {
					c.Err = "profile= needs a name"
				}
				c.Profile = v
				continue
			}
			if v, ok := strings.CutPrefix(a, "base="); ok {
				if !baseRe.MatchString(v) || strings.Contains(v, "..") {
					c.Err = "base=" + q(v) + ": want a tree's name or a commit id"
				}
				c.Base = v
				continue
			}
			if v, ok := strings.CutPrefix(a, "patches="); ok {
				if c.First, c.Last, ok = ParsePatchRange(v); !ok {
					c.Err = "patches=" + q(v) + ": want M-N or M, e.g. patches=2-3"
				}
				continue
			}
			if v, ok := strings.CutPrefix(a, "series="); ok {
				if !seriesIDRe.MatchString(v) {
					c.Err = "series=" + q(v) + ": want the Message-ID of a patch or cover letter of the series"
				}
				c.Series = strings.Trim(v, "<>")
				continue
			}
			if strings.Contains(a, "=") {
				c.Err = "unknown option " + q(a) + " (known: profile=P, base=TREE|COMMIT, patches=M-N, series=MESSAGE-ID)"
				continue
			}
			if !seen[a] {
				seen[a] = true
				c.Suites = append(c.Suites, a)
			}
		}
	default:
		c.Err = "unknown command " + q(args[0]) + " (known: test, help, stop)"
	}
	return c
}

// MaxCommands is how many commands patchbot reads from one mail, as
// syzbot does; the rest are ignored.
const MaxCommands = 3

// FoldCommands keeps the first max distinct commands (the same request
// written twice is one), and says how many it left out.
func FoldCommands(cmds []Command, max int) (kept []Command, ignored int) {
	seen := map[string]bool{}
	for _, c := range cmds {
		key := c.key()
		if seen[key] {
			ignored++
			continue
		}
		seen[key] = true
		if len(kept) == max {
			ignored++
			continue
		}
		kept = append(kept, c)
	}
	return kept, ignored
}

// key is what makes two commands the same request.
func (c Command) key() string {
	if c.Err != "" {
		return "err\x00" + c.Err
	}
	return strings.Join([]string{c.Name, strings.Join(c.Suites, ","), c.Profile, c.Base,
		strconv.Itoa(c.First), strconv.Itoa(c.Last), c.Series}, "\x00")
}
