package child

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// DisableDumps makes the calling process non-dumpable
// (prctl(PR_SET_DUMPABLE, 0)). coordd's processes hold the backends'
// secrets in their environment and memory, and the commands they start run
// as the same user: without this, a command could walk $PPID and read
// /proc/PID/environ, /proc/PID/mem or attach with ptrace to any coordd
// process above it. A non-dumpable process's /proc files that need ptrace
// access belong to root, only a process with CAP_SYS_PTRACE can read them,
// and the kernel writes no core dump of it. A fork keeps the setting and
// execve of the command resets it, so the commands themselves are dumpable
// as usual. coordd's main calls it first thing, and so do the shim and the
// guard (MaybeRunShim), whichever program they were started from.
func DisableDumps() error {
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("prctl(PR_SET_DUMPABLE, 0): %w", err)
	}
	return nil
}
