//go:build unix

package clustertest

import (
	"os"
	"syscall"
)

func freeze(p *os.Process) error { return p.Signal(syscall.SIGSTOP) }
func thaw(p *os.Process) error   { return p.Signal(syscall.SIGCONT) }
func stop(p *os.Process) error   { return p.Signal(syscall.SIGTERM) }
