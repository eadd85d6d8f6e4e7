package mailbox

import (
	"fmt"
	"strings"
)

// Command is a request to patchbot written in a reply, one per line:
//
//	#patchbot test [SUITE ...] [profile=P]
//	#patchbot help
type Command struct {
	Name    string   // "test" or "help"
	Suites  []string // for "test": the suites asked for; empty means "choose by files"
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
	case "test":
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
			c.Suites = append(c.Suites, a)
		}
	default:
		c.Err = fmt.Sprintf("unknown command %q (known: test, help)", args[0])
	}
	return c
}
