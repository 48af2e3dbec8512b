package compare

import (
	"os/exec"
	"syscall"
)

// dieWithParent makes the kernel kill redis-server if this program dies
// without stopping it (a panic, SIGKILL), so no server is left behind.
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
