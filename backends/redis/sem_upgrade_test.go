package redis

import (
	_ "embed"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/coordd/coordd/backends"
)

// semAcquireV01 is the acquire script of the binaries before the one-slot
// mode (commit f77a00d), as Redis received it: what an older coordd sends
// during a rolling upgrade. `diff testdata/sem_acquire_v0.1.lua
// lua/sem_acquire.lua` shows what changed since (the old text has the
// library written out where the file has its include lines).
//
//go:embed testdata/sem_acquire_v0.1.lua
var semAcquireV01 string

// TestSemOneSlotOlderBinary: while a limit-1 semaphore's slot is held in
// the one-slot lock, an older binary's acquire, which knows only the token
// list, finds the slot held and grants nothing; after the release, the
// newer binary's next acquire still works (docs/design.md, "N = 1 keeps
// its slot in one key").
func TestSemOneSlotOlderBinary(t *testing.T) {
	s := openSemStores(t, 1)[0]
	ctx := t.Context()
	if err := s.PutSemaphore(ctx, semCfg("up", 1, 0)); err != nil {
		t.Fatal(err)
	}
	g, err := s.TryAcquire(ctx, backends.SemRef{Name: "up"}, backends.AcquireRequest{Owner: "new-holder", Host: "h1", PID: 1, Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	old := goredis.NewScript(semAcquireV01)
	keys := s.semKeys("up")[:8]
	for range 3 {
		v, err := old.Run(ctx, s.rdb, keys, "old-binary", "h2", 2, time.Minute.Microseconds()).Int64Slice()
		if err != nil {
			t.Fatal(err)
		}
		if v[0] >= 0 {
			t.Fatalf("an older binary's acquire got slot %d (fencing %d) while %d holds it", v[0], v[1], g.Fencing)
		}
	}
	if err := s.Release(ctx, backends.SemRef{Name: "up"}, "new-holder"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.TryAcquire(ctx, backends.SemRef{Name: "up"}, backends.AcquireRequest{Owner: "next", Host: "h1", PID: 1, Lease: time.Minute}); err != nil {
		t.Fatalf("acquire after the release: %v", err)
	}
	hs, err := s.Holders(ctx, backends.SemRef{Name: "up"})
	if err != nil {
		t.Fatal(err)
	}
	if len(hs) != 1 {
		t.Fatalf("%d holders of a limit-1 semaphore: %+v", len(hs), hs)
	}
}
