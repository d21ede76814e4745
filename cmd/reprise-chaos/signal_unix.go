//go:build unix

package main

import "syscall"

// signalNATS stops (SIGSTOP) or continues (SIGCONT) process pid; signal 0
// checks that it exists.
func signalNATS(pid int, stop bool) error {
	sig := syscall.SIGCONT
	if stop {
		sig = syscall.SIGSTOP
	}
	return syscall.Kill(pid, sig)
}

// natsAlive reports whether process pid exists (and may be signalled).
func natsAlive(pid int) error { return syscall.Kill(pid, 0) }
