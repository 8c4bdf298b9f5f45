// Package procstat reads the CPU time a process has used, for the
// benchmark tools that charge a server (by its pid) and themselves for
// the work they measure. Linux only: it reads /proc.
package procstat

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Sample is the CPU time the server process (when its pid was given) and
// this process had used at one moment.
type Sample struct {
	Server, Self time.Duration
	// ServerOK says Server was read.
	ServerOK bool
}

// Take reads the server's utime+stime from /proc/PID/stat (in clock
// ticks of clkTck a second) and this process's from getrusage. pid 0: no
// server sample.
func Take(pid, clkTck int) Sample {
	var s Sample
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		s.Self = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	if pid > 0 {
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
			if ticks, err := statTicks(string(b)); err == nil {
				s.Server, s.ServerOK = time.Duration(ticks)*time.Second/time.Duration(clkTck), true
			}
		}
	}
	return s
}

// statTicks is utime+stime (fields 14 and 15) of a /proc/PID/stat line.
func statTicks(s string) (int64, error) {
	// The command name is in parentheses and may hold spaces and
	// parentheses: the fields are counted after its last closing one
	// (state is field 3, utime 14).
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("stat: no command name")
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("stat: %d fields after the name", len(f))
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("stat: utime %q, stime %q", f[11], f[12])
	}
	return utime + stime, nil
}
