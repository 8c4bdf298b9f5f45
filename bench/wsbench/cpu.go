package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// cpuSample is the CPU time the server process (when its pid was given)
// and this process had used at one moment.
type cpuSample struct {
	server, self time.Duration
	serverOK     bool
}

// sampleCPU reads the server's utime+stime from /proc/PID/stat (fields 14
// and 15, in clock ticks of clkTck a second) and this process's from
// getrusage. pid 0: no server sample.
func sampleCPU(pid, clkTck int) cpuSample {
	var s cpuSample
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		s.self = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	if pid > 0 {
		if ticks, err := procTicks(pid); err == nil {
			s.server, s.serverOK = time.Duration(ticks)*time.Second/time.Duration(clkTck), true
		}
	}
	return s
}

// procTicks is a process's utime+stime in clock ticks.
func procTicks(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name is in parentheses and may hold spaces: the fields
	// are counted after its closing one (state is field 3, utime 14).
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields after the name", pid, len(f))
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: utime %q, stime %q", pid, f[11], f[12])
	}
	return utime + stime, nil
}

// perMillion is d in seconds per million deliveries (n > 0).
func perMillion(d time.Duration, n int64) *float64 {
	v := d.Seconds() / float64(n) * 1e6
	return &v
}
