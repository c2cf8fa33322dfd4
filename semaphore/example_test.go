package semaphore_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/backends/sqlite"
	"github.com/coordd/coordd/semaphore"
)

// Acquire a slot, keep it alive while the work runs, stop when it is lost,
// and pass the fencing number to whatever the work writes.
func Example() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "coordd-example")
	defer os.RemoveAll(dir)
	st, _ := sqlite.Open(ctx, "db", filepath.Join(dir, "coordd.db"), backends.Options{})
	defer st.Close()
	_ = st.Migrate(ctx)
	// coordd apply creates semaphores; the example does it by hand.
	_ = st.PutSemaphore(ctx, backends.SemaphoreConfig{Name: "reindex", Limit: 1, Lease: time.Minute, Mode: "lease", MaxWaiting: -1})

	c, _ := semaphore.New(st, "web1")
	l, err := c.Acquire(ctx, "reindex", semaphore.AcquireOptions{Lease: 30 * time.Second, Wait: time.Minute})
	if err != nil {
		fmt.Println("reindex:", err) // "reindex: not acquired: ..."
		return
	}
	work, stop := context.WithCancel(ctx)
	go l.KeepAlive(work, nil)
	select {
	case <-l.Lost():
		fmt.Println("lost the slot: stop writing")
	default:
		fmt.Printf("slot %d, fencing token > 0: %v\n", l.Slot, l.Fencing > 0)
	}
	stop()
	_ = l.Release(ctx)
	// Output: slot 0, fencing token > 0: true
}

// Fail at once when every slot is taken, as `coordd sem run --no-wait` does.
func ExampleClient_Acquire_noWait() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "coordd-example")
	defer os.RemoveAll(dir)
	st, _ := sqlite.Open(ctx, "db", filepath.Join(dir, "coordd.db"), backends.Options{})
	defer st.Close()
	_ = st.Migrate(ctx)
	_ = st.PutSemaphore(ctx, backends.SemaphoreConfig{Name: "nightly", Limit: 1, Lease: time.Minute, Mode: "lease", MaxWaiting: -1})

	c, _ := semaphore.New(st, "web1")
	first, _ := c.Acquire(ctx, "nightly", semaphore.AcquireOptions{Lease: time.Minute, NoWait: true})
	_, err := c.Acquire(ctx, "nightly", semaphore.AcquireOptions{Lease: time.Minute, NoWait: true})
	fmt.Println(err)
	_ = first.Release(ctx)
	// Output: not acquired: no free slot
}

// Coalesce per data key (one runs, one waits, the rest are dropped): a keyed semaphore with limit 1 and
// max_waiting 1 lets one run and one wait per user id; a third caller of
// the same key is dropped at once, and another key is independent.
func ExampleClient_Acquire_keyed() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "coordd-example")
	defer os.RemoveAll(dir)
	st, _ := sqlite.Open(ctx, "db", filepath.Join(dir, "coordd.db"), backends.Options{})
	defer st.Close()
	_ = st.Migrate(ctx)
	_ = st.PutSemaphore(ctx, backends.SemaphoreConfig{Name: "reindex", Limit: 1, Lease: time.Minute, Mode: "lease", MaxWaiting: 1, Keyed: true})

	c, _ := semaphore.New(st, "web1")
	running, _ := c.Acquire(ctx, "reindex", semaphore.AcquireOptions{Lease: time.Minute, Key: "user-7"})
	// A second caller of user-7 waits in line (here in the backend
	// directly, so that the example does not block).
	w := backends.Waiters(st)
	_ = w.EnterWait(ctx, backends.SemRef{Name: "reindex", Key: "user-7"}, backends.AcquireRequest{Owner: "second-caller", Lease: time.Minute})
	_, err := c.Acquire(ctx, "reindex", semaphore.AcquireOptions{Lease: time.Minute, Key: "user-7"})
	fmt.Println("third caller of user-7:", errors.Is(err, backends.ErrTooManyWaiters))
	other, err := c.Acquire(ctx, "reindex", semaphore.AcquireOptions{Lease: time.Minute, NoWait: true, Key: "user-8"})
	fmt.Println("first caller of user-8:", err == nil, other.Key)
	_ = other.Release(ctx)
	_ = w.LeaveWait(ctx, backends.SemRef{Name: "reindex", Key: "user-7"}, "second-caller")
	_ = running.Release(ctx)
	// Output:
	// third caller of user-7: true
	// first caller of user-8: true user-8
}
