package daemon

import (
	"os"
	"syscall"
)

// inode identifies a file across renames: a file renamed over another keeps
// its name but not its inode.
func inode(fi os.FileInfo) uint64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Ino
	}
	return 0
}
