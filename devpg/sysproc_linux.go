package devpg

import "syscall"

// setPdeathsig asks the kernel to send sig to the child when its parent thread dies. The Go
// runtime does not end threads, except those of goroutines that exit while locked to one.
func setPdeathsig(attr *syscall.SysProcAttr, sig syscall.Signal) {
	attr.Pdeathsig = sig
}
