//go:build unix

package durable

import "syscall"

// openFileLimit is the process's soft limit on open files (RLIMIT_NOFILE;
// Go raises it to the hard limit at start).
func openFileLimit() (int, bool) {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil || rl.Cur > 1<<30 {
		return 0, false
	}
	return int(rl.Cur), true
}
