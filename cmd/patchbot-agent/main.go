// Command patchbot-agent is the guest's /init: a static binary that mounts
// what the suites need, loads the kernel modules packed beside it, tells the
// host it is ready over the virtio-serial port, and serves requests (info,
// exec, prepare-suite, run-suite, poweroff) until the host powers the VM off.
//
// Build it with CGO_ENABLED=0; images/initramfs does, and packs it.
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/patchbot/patchbot/suites"
	"github.com/patchbot/patchbot/vmrunner/agent"
	"github.com/patchbot/patchbot/vmrunner/proto"
)

func main() {
	// -exit and -head give tests of the exec op commands with known
	// output in a guest that has no other binaries.
	exit := flag.Int("exit", -1, "print the arguments and exit with this status (for testing exec)")
	head := flag.String("head", "", "with -exit: first print the text at the start of this file, up to a NUL byte")
	write := flag.String("write", "", "with -exit: first write the arguments to this file (e.g. /proc/sysrq-trigger)")
	flag.Parse()
	if *exit >= 0 {
		if *head != "" {
			printHead(*head)
		}
		if *write != "" {
			if err := os.WriteFile(*write, []byte(strings.Join(flag.Args(), " ")), 0o644); err != nil {
				fmt.Fprintln(os.Stderr, err)
			}
		}
		fmt.Println(flag.Args())
		os.Exit(*exit)
	}
	if os.Getpid() != 1 {
		fmt.Fprintln(os.Stderr, "patchbot-agent: runs as /init (PID 1) in a patchbot guest")
		os.Exit(2)
	}
	agent.Main(agent.Handler{RunSuite: runSuite, PrepareSuite: prepareSuite})
}

func runSuite(ctx context.Context, req proto.Request) (any, error) {
	return suites.RunRound(ctx, req)
}

func prepareSuite(ctx context.Context, req proto.Request) (any, error) {
	return suites.Prepare(ctx, req)
}

func printHead(path string) {
	f, err := os.Open(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return
	}
	defer f.Close()
	b := make([]byte, 256)
	n, _ := f.Read(b)
	b = b[:n]
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	fmt.Printf("%s\n", b)
}
