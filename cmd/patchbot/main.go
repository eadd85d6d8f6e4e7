// Command patchbot tests Linux kernel patch series posted to mailing lists
// and answers in the thread with measured evidence. This file is wiring
// only: each subcommand lives in its own file and registers itself.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"sort"
	"syscall"
)

// command is one subcommand. run gets the arguments after its name.
type command struct {
	name  string
	usage string
	run   func(ctx context.Context, args []string) error
}

var commands = map[string]command{}

func register(c command) {
	if _, dup := commands[c.name]; dup {
		panic("patchbot: duplicate command " + c.name)
	}
	commands[c.name] = c
}

// exitError lets a command choose its exit status (e.g. "model check"
// exits 1 when it finds a violation) without printing an extra error.
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

func usage() {
	fmt.Fprintln(os.Stderr, "usage: patchbot COMMAND [flags]\n\ncommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(os.Stderr, "  %-8s %s\n", n, commands[n].usage)
	}
}

func main() {
	if len(os.Args) < 2 || os.Args[1] == "-h" || os.Args[1] == "--help" || os.Args[1] == "help" {
		usage()
		os.Exit(2)
	}
	c, ok := commands[os.Args[1]]
	if !ok {
		fmt.Fprintf(os.Stderr, "patchbot: unknown command %q\n", os.Args[1])
		usage()
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := c.run(ctx, os.Args[2:]); err != nil {
		if e, ok := err.(exitError); ok {
			os.Exit(e.code)
		}
		fmt.Fprintf(os.Stderr, "patchbot %s: %v\n", c.name, err)
		os.Exit(1)
	}
}
