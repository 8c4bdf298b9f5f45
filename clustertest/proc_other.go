//go:build !linux

package clustertest

import "syscall"

// sysProcAttr: only Linux can tie a child's life to its parent's; on other
// systems a test process that dies without its cleanups leaves its members
// running.
func sysProcAttr() *syscall.SysProcAttr { return nil }

// waitStopped has nothing to wait on without /proc.
func waitStopped(int) error { return nil }
