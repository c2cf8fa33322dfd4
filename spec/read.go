package spec

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"runtime"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// DefaultReadTimeout bounds the reading of a spec's files, and of the
// secret files it names, when LoadOptions.ReadTimeout is zero. A spec on a
// local disk reads in milliseconds; the bound is for a file whose reads
// never end and a network file system that stopped answering.
const DefaultReadTimeout = 10 * time.Second

// ErrReadTimeout: the file system did not answer within the read timeout.
var ErrReadTimeout = errors.New("the file system did not answer")

// maxPendingReads bounds the file system calls of spec loads in flight in
// this process. A call that the kernel never finishes (a hung NFS or FUSE
// mount) cannot be interrupted: its load returns at the deadline and
// leaves it behind, holding a thread. Once this many are left behind, a
// load fails at once instead of leaving one more (a daemon reloading on
// every SIGHUP would otherwise pile them up).
const maxPendingReads = 8

var pendingReads = make(chan struct{}, maxPendingReads)

// errTooManyPending is the error of a read refused because earlier ones
// are still stuck.
var errTooManyPending = fmt.Errorf("%w: %d earlier reads are still waiting for it", ErrReadTimeout, maxPendingReads)

// reader does a load's file system calls, each on a goroutine of its own,
// and gives up on them when ctx ends: at the load's deadline, or when the
// caller is interrupted (SIGTERM).
type reader struct {
	ctx      context.Context
	parent   context.Context // the caller's: its end is an interruption
	timeout  time.Duration
	deadline time.Time
}

// newReader returns a reader whose calls end by timeout from now, or
// when parent ends; call cancel when the load is over.
func newReader(parent context.Context, timeout time.Duration) (r *reader, cancel context.CancelFunc) {
	if timeout <= 0 {
		timeout = DefaultReadTimeout
	}
	ctx, cancel := context.WithTimeout(parent, timeout)
	dl, _ := ctx.Deadline()
	return &reader{ctx: ctx, parent: parent, timeout: timeout, deadline: dl}, cancel
}

// stopped is the error of a call given up on: the caller's context error
// when it was interrupted, else ErrReadTimeout.
func (r *reader) stopped() error {
	if err := r.parent.Err(); err != nil {
		return fmt.Errorf("interrupted: %w", err)
	}
	return fmt.Errorf("%w within %s (a file whose reads block, or a hung network file system)", ErrReadTimeout, r.timeout)
}

// call runs op on a goroutine and waits for it until the reader's context
// ends. An op left behind finishes, or stays stuck, on its own.
func call[T any](r *reader, op func() (T, error)) (T, error) {
	var zero T
	if r.ctx.Err() != nil {
		return zero, r.stopped()
	}
	select {
	case pendingReads <- struct{}{}:
	default:
		return zero, errTooManyPending
	}
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	go func() {
		defer func() { <-pendingReads }()
		v, err := withSignalsBlocked(op)
		done <- result{v, err}
	}()
	select {
	case res := <-done:
		return res.v, res.err
	case <-r.ctx.Done():
		select {
		case res := <-done:
			return res.v, res.err
		default:
		}
		return zero, r.stopped()
	}
}

// withSignalsBlocked runs op on a thread of its own that blocks every
// signal. The kernel hands a process-directed signal (TERM, INT) to any
// thread that does not block it; given to a thread held in an open that
// only a fatal signal ends (a hung NFS or FUSE mount, a fanotify
// permission wait), it stayed pending there until some other thread next
// entered the kernel, which for an idle process was the read deadline.
// With the mask set, the signal goes to a thread that can take it at once.
func withSignalsBlocked[T any](op func() (T, error)) (T, error) {
	runtime.LockOSThread()
	var all, old unix.Sigset_t
	for i := range all.Val {
		all.Val[i] = ^all.Val[i]
	}
	if err := unix.PthreadSigmask(unix.SIG_SETMASK, &all, &old); err != nil {
		runtime.UnlockOSThread()
		return op()
	}
	defer func() {
		_ = unix.PthreadSigmask(unix.SIG_SETMASK, &old, nil)
		runtime.UnlockOSThread()
	}()
	return op()
}

// stat is os.Stat, bounded.
func (r *reader) stat(path string) (fs.FileInfo, error) {
	return call(r, func() (fs.FileInfo, error) { return os.Stat(path) })
}

// readDir is os.ReadDir, bounded.
func (r *reader) readDir(path string) ([]os.DirEntry, error) {
	return call(r, func() ([]os.DirEntry, error) { return os.ReadDir(path) })
}

// readFile reads a regular file of at most limit bytes (readRegular),
// bounded.
func (r *reader) readFile(path string, limit int) ([]byte, error) {
	data, err := call(r, func() ([]byte, error) { return readRegular(path, limit, r.deadline) })
	if err != nil {
		var pe *fs.PathError
		if !errors.As(err, &pe) {
			err = &fs.PathError{Op: "read", Path: path, Err: err}
		}
	}
	return data, err
}

// readRegular reads the file at path, which must be a regular file (or
// resolve to one) of at most limit bytes, outside the kernel's own file
// systems. A FIFO's open would block until a writer comes, a device such
// as /dev/zero never ends, and a file of /proc or /sys may block for ever
// (/proc/kmsg) or be consumed by the read, so the name is checked with
// stat and statfs first (refused without being opened), then opened
// without blocking, and the open descriptor is checked again with fstat
// and fstatfs, so that a name swapped in between changes nothing. A read
// that would wait on a pollable file ends at deadline. The read stops at
// limit+1 bytes whatever the size said.
func readRegular(path string, limit int, deadline time.Time) ([]byte, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if err := checkSpecFile(path, fi, limit); err != nil {
		return nil, err
	}
	var sfs unix.Statfs_t
	if err := unix.Statfs(path, &sfs); err != nil {
		return nil, &fs.PathError{Op: "statfs", Path: path, Err: err}
	}
	if err := checkFS(path, &sfs); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if fi, err = f.Stat(); err != nil {
		return nil, err
	}
	if err := checkSpecFile(path, fi, limit); err != nil {
		return nil, err
	}
	if err := unix.Fstatfs(int(f.Fd()), &sfs); err != nil {
		return nil, &fs.PathError{Op: "fstatfs", Path: path, Err: err}
	}
	if err := checkFS(path, &sfs); err != nil {
		return nil, err
	}
	// Only a pollable file takes a deadline; a disk file's reads do not
	// wait for anyone.
	_ = f.SetReadDeadline(deadline)
	data, err := io.ReadAll(io.LimitReader(f, int64(limit)+1))
	if err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return nil, &fs.PathError{Op: "read", Path: path, Err: fmt.Errorf("%w (its reads block)", ErrNotRegular)}
		}
		return nil, err
	}
	if len(data) > limit {
		return nil, &fs.PathError{Op: "read", Path: path, Err: fmt.Errorf("%w: larger than %s", ErrTooLarge, sizeString(limit))}
	}
	return data, nil
}

// kernelFS names the kernel's own file systems, whose files stat as
// regular but are views of the kernel: reading one may block for ever
// (/proc/kmsg, tracefs's trace_pipe), consume what another reader is owed
// (the kernel log), or change under the reader. No spec or secret lives
// there.
var kernelFS = map[int64]string{
	unix.PROC_SUPER_MAGIC:    "procfs",
	unix.SYSFS_MAGIC:         "sysfs",
	unix.DEBUGFS_MAGIC:       "debugfs",
	unix.TRACEFS_MAGIC:       "tracefs",
	unix.SECURITYFS_MAGIC:    "securityfs",
	unix.CGROUP_SUPER_MAGIC:  "cgroupfs",
	unix.CGROUP2_SUPER_MAGIC: "cgroup2fs",
	unix.BPF_FS_MAGIC:        "bpffs",
	unix.PSTOREFS_MAGIC:      "pstore",
	unix.EFIVARFS_MAGIC:      "efivarfs",
	unix.BINFMTFS_MAGIC:      "binfmt_misc",
	unix.SELINUX_MAGIC:       "selinuxfs",
	unix.SMACK_MAGIC:         "smackfs",
	unix.NSFS_MAGIC:          "nsfs",
	unix.DEVPTS_SUPER_MAGIC:  "devpts",
	0x62656570:               "configfs",
	0x65735543:               "fusectl",
}

// checkFS refuses a file of one of the kernel's own file systems.
func checkFS(path string, sfs *unix.Statfs_t) error {
	if name, ok := kernelFS[int64(sfs.Type)]; ok {
		return &fs.PathError{Op: "open", Path: path, Err: fmt.Errorf("%w (%s, a kernel file system)", ErrNotRegular, name)}
	}
	return nil
}
