// Package buildinfo reads what the Go toolchain recorded about the build
// of the running binary: the VCS revision of the tree it was built from,
// and whether that tree had uncommitted changes. It imports nothing of
// patchbot's, so any package may use it.
package buildinfo

import "runtime/debug"

// VCS returns the revision the running binary was built from ("" when the
// build recorded none: go test, go run, -buildvcs=false) and whether the
// tree held uncommitted changes then.
func VCS() (revision string, modified bool) {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "", false
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			revision = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	return revision, modified
}
