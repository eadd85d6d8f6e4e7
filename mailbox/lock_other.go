//go:build !linux

package mailbox

import "os"

// writeLocked cannot look at fcntl locks here; the dot-lock and the
// quiet period still apply.
func writeLocked(*os.File) bool { return false }
