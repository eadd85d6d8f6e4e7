package mailbox

import (
	"os"
	"syscall"
)

// writeLocked says whether a writer holds a lock on f: an fcntl write
// lock (Postfix's local(8), procmail and mutt take one) or an exclusive
// flock.
func writeLocked(f *os.File) bool {
	lk := syscall.Flock_t{Type: syscall.F_RDLCK, Whence: 0, Start: 0, Len: 0}
	if err := syscall.FcntlFlock(f.Fd(), syscall.F_GETLK, &lk); err == nil && lk.Type != syscall.F_UNLCK {
		return true
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_SH|syscall.LOCK_NB); err != nil {
		return err == syscall.EWOULDBLOCK
	}
	syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	return false
}

// lockExclusive takes an flock on f without waiting; closing f (or the
// process's end, kill -9 included) releases it.
func lockExclusive(f *os.File) error {
	return syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
}

// childProcAttr makes a child (git) die with patchbot, so that a kill -9
// of the daemon leaves no fetch running into its mirror.
func childProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
