package redisserver

import (
	"os/exec"
	"syscall"
)

// setDeathSignal makes the kernel kill the server when the process that
// started it dies, so a test binary killed by a timeout leaves no
// redis-server behind.
func setDeathSignal(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
