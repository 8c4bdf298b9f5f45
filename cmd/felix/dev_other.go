//go:build !linux

package main

import "syscall"

// devSysProcAttr leaves the members in felix dev's process group: only
// Linux can stop a child when its parent dies, so elsewhere the
// terminal's Ctrl-C must reach them directly.
func devSysProcAttr() *syscall.SysProcAttr { return nil }
