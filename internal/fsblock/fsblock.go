// Package fsblock makes opening a file block, for tests of code that must
// not hang when a file system stops answering (a hung NFS or FUSE mount,
// a file whose reads never end). It uses fanotify permission events: the
// kernel holds every open of a marked file until the listener answers, and
// this listener answers only when released. The file is an ordinary file
// on an ordinary file system; stat works, open blocks in the kernel,
// beyond the reach of signals that the process catches.
//
// fanotify needs CAP_SYS_ADMIN: Block fails the test when it cannot mark
// the file (never skips it), so a test that relies on it fails unless it
// runs as root, as CI does.
package fsblock

import (
	"errors"
	"sync"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Blocker holds the opens of one file.
type Blocker struct {
	path string
	mu   sync.Mutex
	fd   int // -1 once released
}

// Block marks path, which must exist, so that every open of it, by any
// process, blocks until Release (called at the end of the test at the
// latest).
func Block(t testing.TB, path string) *Blocker {
	t.Helper()
	fd, err := unix.FanotifyInit(unix.FAN_CLASS_CONTENT|unix.FAN_CLOEXEC|unix.FAN_NONBLOCK, unix.O_RDONLY|unix.O_CLOEXEC)
	if err != nil {
		t.Fatalf("fsblock: fanotify_init: %v (this test needs root: it makes a file whose open blocks)", err)
	}
	if err := unix.FanotifyMark(fd, unix.FAN_MARK_ADD, unix.FAN_OPEN_PERM, unix.AT_FDCWD, path); err != nil {
		unix.Close(fd)
		t.Fatalf("fsblock: fanotify_mark %s: %v", path, err)
	}
	b := &Blocker{path: path, fd: fd}
	t.Cleanup(b.Release)
	return b
}

// Opened waits up to timeout for the next open of the file, which then
// blocks, and returns the pid of the process that opens it. The wait is
// a bound for a test that would otherwise hang, not a measurement.
func (b *Blocker) Opened(t testing.TB, timeout time.Duration) int {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		b.mu.Lock()
		fd := b.fd
		b.mu.Unlock()
		if fd < 0 {
			t.Fatalf("fsblock: %s released", b.path)
		}
		left := time.Until(deadline)
		if left <= 0 {
			t.Fatalf("fsblock: nothing opened %s within %s", b.path, timeout)
		}
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		if _, err := unix.Poll(fds, int(min(left, time.Second)/time.Millisecond)+1); err != nil && !errors.Is(err, unix.EINTR) {
			t.Fatalf("fsblock: poll: %v", err)
		}
		buf := make([]byte, 4096)
		n, err := unix.Read(fd, buf)
		if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			t.Fatalf("fsblock: read: %v", err)
		}
		pid := 0
		for off := 0; off+int(unsafe.Sizeof(unix.FanotifyEventMetadata{})) <= n; {
			m := (*unix.FanotifyEventMetadata)(unsafe.Pointer(&buf[off]))
			if m.Event_len == 0 {
				break
			}
			if m.Fd >= 0 {
				// The kernel opened the file for the listener: not
				// needed. The event itself stays unanswered.
				unix.Close(int(m.Fd))
			}
			if m.Mask&unix.FAN_OPEN_PERM != 0 && pid == 0 {
				pid = int(m.Pid)
			}
			off += int(m.Event_len)
		}
		if pid != 0 {
			return pid
		}
	}
}

// Release lets every open of the file through, those held now included.
func (b *Blocker) Release() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.fd >= 0 {
		// Closing the group allows every event it has not answered.
		unix.Close(b.fd)
		b.fd = -1
	}
}
