//go:build !linux

package redisserver

import "os/exec"

// setDeathSignal has no portable equivalent outside Linux: Stop (or a
// test's Cleanup) is what stops the server there.
func setDeathSignal(*exec.Cmd) {}
