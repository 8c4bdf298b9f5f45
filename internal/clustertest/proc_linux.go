package clustertest

import "syscall"

// sysProcAttr has Linux kill a member when the test process dies without
// its cleanups (a -timeout panic, a SIGKILL), so no broker outlives the
// test on a shared machine. Pdeathsig follows the thread that started the
// child; the Go runtime ends threads only for goroutines that exit while
// locked to one, which nothing here does.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
