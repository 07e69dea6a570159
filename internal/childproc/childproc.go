// Package childproc ties the processes tqgo's launchers start (test
// helpers, the GRPO example's roles, redis-server) to their launcher: a
// launcher killed, SIGKILL included, leaves no orphan behind holding
// leases or ports.
package childproc

import "os/exec"

// Tie makes cmd, not yet started, die with the process that starts it.
// On Linux the kernel sends the child SIGKILL when its parent exits
// (PR_SET_PDEATHSIG; Go's exec makes the child kill itself should the
// parent be gone before that took effect). Strictly, the signal comes
// when the parent's thread that started cmd exits: Go keeps its threads
// for the process's life unless a goroutine that locked one exits
// locked, so a launcher must not start children from such a goroutine.
// Elsewhere Tie does nothing: the launcher stops its children itself.
// Tie keeps any other SysProcAttr field cmd has.
func Tie(cmd *exec.Cmd) { tie(cmd) }
