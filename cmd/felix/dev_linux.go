package main

import "syscall"

// devSysProcAttr puts each member in its own process group, so the
// terminal's Ctrl-C reaches felix dev alone and it stops the members in
// order (members, then etcd); and has Linux send a member SIGTERM should
// felix dev die without stopping it, so no broker is left behind.
func devSysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
}
