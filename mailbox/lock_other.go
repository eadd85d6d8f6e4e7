//go:build !linux

package mailbox

import (
	"os"
	"syscall"
)

// writeLocked cannot look at fcntl locks here; the dot-lock and the
// quiet period still apply.
func writeLocked(*os.File) bool { return false }

// lockExclusive cannot take a lock here: one process per mirror is the
// operator's to ensure.
func lockExclusive(*os.File) error { return nil }

func childProcAttr() *syscall.SysProcAttr { return nil }
