// Command patchbot tests Linux kernel patch series posted to mailing lists
// and answers in the thread with measured evidence. This package only wires
// the stages together: each subcommand lives in its own file and registers
// itself; what a command does is the stage packages' code.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"sort"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/patchbot/patchbot/internal/buildinfo"
	"github.com/patchbot/patchbot/internal/inert"
)

// command is one subcommand, git-style: "patchbot NAME [flags] [args]".
type command struct {
	name    string // "run", or "suite run" for a command with a verb
	summary string // one line for the list of commands
	usage   string // the synopsis after "patchbot "
	desc    string // what it does, a paragraph or two
	example string // one or more example lines
	// positional says that the command takes arguments besides its
	// flags; otherwise a stray argument is a usage error.
	positional bool
	// flags declares the command's flags on fs and returns the function
	// that runs it with the positional arguments. Every flag is checked in
	// run before any work starts.
	flags func(fs *flag.FlagSet) func(ctx context.Context, args []string) error
}

var commands = map[string]*command{}

func register(c *command) {
	if _, dup := commands[c.name]; dup {
		panic("patchbot: duplicate command " + c.name)
	}
	commands[c.name] = c
}

// Exit statuses, the same for every command.
const (
	exitOK         = 0
	exitInfra      = 1 // patchbot or its machine failed
	exitUsage      = 2 // the command line is wrong
	exitPatchFault = 3 // run/build: the series does not apply, build or boot
)

// exitError lets a command choose its exit status (e.g. "model check"
// exits 1 when it finds a violation) without printing an extra error.
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

// usageError is a wrong command line: one line, exit status 2.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

// terminalLog is the log of a command run by hand: warnings and errors
// only. What a daemon logs at INFO (each VM's QEMU command line, its boot
// time) would fall between the progress lines a person reads.
func terminalLog(w io.Writer) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// version is the module version or VCS revision the binary was built from.
func version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "patchbot (unknown version)"
	}
	v := bi.Main.Version
	rev, modified := buildinfo.VCS()
	dirty := ""
	if modified {
		dirty = "+dirty"
	}
	if rev != "" {
		if len(rev) > 12 {
			rev = rev[:12]
		}
		v = rev + dirty
	}
	return fmt.Sprintf("patchbot %s (%s)", v, bi.GoVersion)
}

func main() {
	os.Exit(runMain(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}

// stdout and stderr are where commands write; tests replace them (through
// runMain). dataOut is stdout for data that must stay byte for byte (an
// mbox for git am): raw into a pipe or a file, escaped on a terminal.
var stdout, stderr, dataOut io.Writer = os.Stdout, os.Stderr, os.Stdout

// runMain is main without the process: tests call it.
func runMain(ctx context.Context, args []string, out, errOut io.Writer) int {
	// Everything a person reads is escaped (inert): progress, logs,
	// errors and stdout, into a terminal or not (a listing piped to less
	// -R, or kept in a file and read later, reaches a terminal too), since
	// subjects, file names, addresses and compiler lines come from
	// strangers. JSON is escaped so that it stays JSON (writeJSON). Only
	// an mbox written to stdout for git am (dataOut) is data, byte for
	// byte, when it goes into a pipe or a file.
	ew := inert.NewWriter(errOut)
	defer ew.Flush()
	ow := inert.NewWriter(out)
	defer ow.Flush()
	stdout, stderr, dataOut = ow, ew, out
	if isTerminal(out) {
		dataOut = ow
	}
	if len(args) == 0 {
		listCommands(stderr)
		return exitUsage
	}
	switch args[0] {
	case "-h", "--help":
		listCommands(stdout)
		return exitOK
	case "--version", "version":
		fmt.Fprintln(stdout, version())
		return exitOK
	case "help":
		if len(args) == 1 {
			listCommands(stdout)
			return exitOK
		}
		c := lookup(args[1:])
		if c == nil {
			fmt.Fprintf(stderr, "patchbot help: no command %q (see 'patchbot help')\n", strings.Join(args[1:], " "))
			return exitUsage
		}
		fs := flag.NewFlagSet(c.name, flag.ContinueOnError)
		c.flags(fs)
		writeHelp(stdout, c, fs)
		return exitOK
	}
	c := lookup(args)
	if c == nil {
		fmt.Fprintf(stderr, "patchbot: %q is not a command (see 'patchbot help')\n", strings.Join(args[:min(2, len(args))], " "))
		return exitUsage
	}
	args = args[len(strings.Fields(c.name)):]
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	return runCommand(ctx, c, args)
}

// lookup finds the command args name: "suite run" before "suite".
func lookup(args []string) *command {
	if len(args) >= 2 {
		if c, ok := commands[args[0]+" "+args[1]]; ok {
			return c
		}
	}
	if len(args) >= 1 {
		if c, ok := commands[args[0]]; ok {
			return c
		}
	}
	return nil
}

func runCommand(ctx context.Context, c *command, args []string) int {
	fs := flag.NewFlagSet(c.name, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are ours to print, in one line
	run := c.flags(fs)
	pos, err := parseInterspersed(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		writeHelp(stdout, c, fs)
		return exitOK
	}
	if err == nil && !c.positional && len(pos) > 0 {
		err = usagef("unexpected argument %q", pos[0])
	}
	if err == nil {
		err = run(ctx, pos)
	}
	var ue usageError
	var ee exitError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &ee):
		return ee.code
	case errors.As(err, &ue) || isFlagError(err):
		fmt.Fprintf(stderr, "patchbot %s: %v (see 'patchbot %s -h')\n", c.name, err, c.name)
		return exitUsage
	}
	fmt.Fprintf(stderr, "patchbot %s: %v\n", c.name, err)
	return exitInfra
}

// flagError marks an error from flag parsing: a usage error.
type flagError struct{ err error }

func (e flagError) Error() string { return e.err.Error() }
func (e flagError) Unwrap() error { return e.err }

func isFlagError(err error) bool {
	var fe flagError
	return errors.As(err, &fe)
}

// parseInterspersed parses flags that may come before, between or after
// the positional arguments ("compare a.json b.json --json"); "--" ends
// the flags.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, flagError{err}
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		if args[0] == "--" {
			return append(pos, args[1:]...), nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

func listCommands(w io.Writer) {
	fmt.Fprintln(w, "usage: patchbot COMMAND [flags]   (patchbot help COMMAND for one command)")
	fmt.Fprintln(w, "\npatchbot tests Linux kernel patch series posted to mailing lists and answers in\nthe thread with measured evidence.\n\ncommands:")
	names := make([]string, 0, len(commands))
	width := 0
	for n := range commands {
		names = append(names, n)
		width = max(width, len(n))
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-*s  %s\n", width, n, commands[n].summary)
	}
	fmt.Fprintln(w, "\nExit status: 0 done, 1 infrastructure failure, 2 usage error, 3 the patch's fault (run, build).")
}

func writeHelp(w io.Writer, c *command, fs *flag.FlagSet) {
	fmt.Fprintf(w, "usage: patchbot %s\n\n%s\n", c.usage, strings.TrimSpace(c.desc))
	var flags strings.Builder
	fs.SetOutput(&flags)
	fs.PrintDefaults()
	if flags.Len() > 0 {
		fmt.Fprintf(w, "\nflags:\n%s", flags.String())
	}
	if c.example != "" {
		fmt.Fprintf(w, "\nexample:\n")
		for _, l := range strings.Split(strings.TrimSpace(c.example), "\n") {
			fmt.Fprintf(w, "  %s\n", strings.TrimSpace(l))
		}
	}
}

// schemaVersion is the "schema" of every --json output. It changes only
// when a field changes meaning or goes away; new fields may appear.
const schemaVersion = 1

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}
