package compare

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// DieWithParent makes the kernel kill the process cmd starts (redis-server,
// rpr) if this program dies without stopping it (a panic, SIGKILL), so no
// server is left behind.
func DieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// userHZ is the unit of the CPU times in /proc/<pid>/stat: USER_HZ, which
// the kernel fixes at 100 on every architecture Go runs on.
const userHZ = 100

// PidCPU returns the user + system CPU time process pid has used, all its
// threads together (utime + stime of /proc/<pid>/stat, in 10 ms ticks).
func PidCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name, field 2, is in parentheses and may hold spaces:
	// the fields that follow start after the last ')'.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no ')' in %q", pid, b)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields after the name, want at least 13", pid, len(f))
	}
	// f[0] is field 3 (state): utime and stime are fields 14 and 15.
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: utime %q, stime %q are not numbers", pid, f[11], f[12])
	}
	return time.Duration(utime+stime) * (time.Second / userHZ), nil
}
