//go:build !linux

package devpg

import "syscall"

// setPdeathsig does nothing: only Linux can signal a child when its parent dies.
func setPdeathsig(*syscall.SysProcAttr, syscall.Signal) {}
