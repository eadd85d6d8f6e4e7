package mailbox

import (
	"fmt"
	"strings"
)

// Command is a request to patchbot written in a reply, one per line:
//
//	#patchbot test [SUITE ...] [profile=P]
//	#patchbot help
//	#patchbot stop
type Command struct {
	Name    string   // "test", "help" or "stop"
	Suites  []string // for "test": the suites asked for, each once; empty means "choose by files"
	Profile string   // for "test": profile=P, empty for the default
	Line    string   // the line as written, for the answer
	Err     string   // set when the line could not be understood; the answer says why
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
	c := Command{Line: line}
	if len(args) == 0 {
		c.Err = "no command after #patchbot (try \"#patchbot help\")"
		return c
	}
	c.Name = strings.ToLower(args[0])
	switch c.Name {
	case "help":
		if len(args) > 1 {
			c.Err = fmt.Sprintf("help takes no arguments, got %q", strings.Join(args[1:], " "))
		}
	case "stop":
		if len(args) > 1 {
			c.Err = fmt.Sprintf("stop takes no arguments, got %q", strings.Join(args[1:], " "))
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
			if strings.Contains(a, "=") {
				c.Err = fmt.Sprintf("unknown option %q (only profile=P is known)", a)
				continue
			}
			if !seen[a] {
				seen[a] = true
				c.Suites = append(c.Suites, a)
			}
		}
	default:
		c.Err = fmt.Sprintf("unknown command %q (known: test, help, stop)", args[0])
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
	return c.Name + "\x00" + strings.Join(c.Suites, ",") + "\x00" + c.Profile
}
