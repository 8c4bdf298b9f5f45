package clustertest

import (
	"bytes"
	"fmt"
	"os"
	"syscall"
	"time"
)

// sysProcAttr has Linux kill a member when the test process dies without
// its cleanups (a -timeout panic, a SIGKILL), so no broker outlives the
// test on a shared machine. Pdeathsig follows the thread that started the
// child; the Go runtime ends threads only for goroutines that exit while
// locked to one, which nothing here does.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// waitStopped waits, up to 5 s, until the kernel shows process pid
// stopped ("T" in /proc/<pid>/stat): SIGSTOP is delivered asynchronously,
// and a process still running for a moment after kill returned answered
// a request the test meant for a frozen one.
func waitStopped(pid int) error {
	path := fmt.Sprintf("/proc/%d/stat", pid)
	deadline := time.Now().Add(5 * time.Second)
	for {
		raw, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		// The state follows the command's closing parenthesis.
		if i := bytes.LastIndexByte(raw, ')'); i >= 0 && i+2 < len(raw) && raw[i+2] == 'T' {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("process %d not stopped 5 s after SIGSTOP", pid)
		}
		time.Sleep(time.Millisecond)
	}
}
