// Command fuseserve is the panel harness's FUSE server
// (scripts/panel-harness-suites.sh): go-fuse's passthrough of a directory,
// mounted directly (root, no fusermount), with options given but no
// timeouts (so entry and attribute timeouts of 0) and no locks, as a
// server that caches nothing in the kernel; "single" serves with one
// goroutine. It prints "mounted" when the mount is up and serves until it
// is unmounted. It shares no code with the suites.
//
//	fuseserve BACKING MOUNTPOINT [single]
package main

import (
	"fmt"
	"os"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

func main() {
	if len(os.Args) < 3 {
		fmt.Fprintln(os.Stderr, "usage: fuseserve BACKING MOUNTPOINT [single]")
		os.Exit(2)
	}
	root, err := fs.NewLoopbackRoot(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, "fuseserve:", err)
		os.Exit(1)
	}
	srv, err := fs.Mount(os.Args[2], root, &fs.Options{MountOptions: fuse.MountOptions{
		DirectMountStrict: true,
		SingleThreaded:    len(os.Args) > 3 && os.Args[3] == "single",
	}})
	if err != nil {
		fmt.Fprintln(os.Stderr, "fuseserve:", err)
		os.Exit(1)
	}
	fmt.Println("mounted")
	srv.Wait()
}
