package redis

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/spec"
)

// ErrReadOnly is returned by every write on a store opened with
// Options.ReadOnly.
var ErrReadOnly = errors.New("store is opened read-only")

var (
	_ backends.Backend        = (*Store)(nil)
	_ backends.LossGuard      = (*Store)(nil)
	_ backends.PayloadLimiter = (*Store)(nil)
)

// Store is one handle on a Redis database under one key prefix. It is safe
// for concurrent use; several Stores (in one process or several) may share
// one prefix, as the hosts of a cluster do.
type Store struct {
	name   string
	opts   backends.Options
	keys   keys
	rdb    *goredis.Client
	trips  atomic.Uint64
	closed atomic.Bool
	// sems and queues hold what the semaphore and queue code keep per
	// handle (semaphore.go, queue.go).
	sems   semState
	queues queueState
	// loss is the hold after a restart or failover (marker.go).
	loss lossHold
}

// Open connects to the Redis server named by url (redis:// or rediss://,
// with an optional ACL user and password and a database number) and checks
// it answers. Every key the store writes starts with keyPrefix.
func Open(ctx context.Context, name, url, keyPrefix string, opts backends.Options) (*Store, error) {
	o, err := goredis.ParseURL(url)
	if err != nil {
		// url.Parse's error quotes the whole URL, password included.
		return nil, fmt.Errorf("redis %q: parse url %s: %s", name, spec.RedactURL(url), spec.RedactSecrets(spec.URLError(err), url))
	}
	// The pool's own retries would send a script twice after a timeout;
	// every caller here decides itself whether a call may be repeated.
	o.MaxRetries = -1
	// Blocking calls (BLPOP) carry their own timeout, and the context ends
	// the others.
	o.ContextTimeoutEnabled = true
	s := newStore(name, keyPrefix, opts)
	// Every new connection checks the server against the data-loss marker
	// before it serves anything: a restart or failover is handled there.
	o.OnConnect = s.checkServer
	return s.open(ctx, o.Addr, goredis.NewClient(o))
}

// OpenSentinel connects to the primary that the Sentinels of sn name, and
// follows it through failovers: the client asks the Sentinels where the
// primary is whenever it connects, and drops its connections to the old
// one when a Sentinel announces a switch. Each new connection checks the
// server against the data-loss marker, as with Open, so a failover to a
// replica that missed writes is noticed on the first connection to it.
func OpenSentinel(ctx context.Context, name string, sn *spec.RedisSentinel, keyPrefix string, opts backends.Options) (*Store, error) {
	if sn == nil || sn.Master == "" || len(sn.Addrs) == 0 {
		return nil, fmt.Errorf("redis %q: sentinel: a master name and at least one address are needed", name)
	}
	s := newStore(name, keyPrefix, opts)
	c := goredis.NewFailoverClient(&goredis.FailoverOptions{
		MasterName:       sn.Master,
		SentinelAddrs:    sn.Addrs,
		SentinelPassword: sn.SentinelPassword,
		Username:         sn.Username,
		Password:         sn.Password,
		DB:               sn.DB,
		// As in Open.
		MaxRetries:            -1,
		ContextTimeoutEnabled: true,
	})
	// Not FailoverOptions.OnConnect: go-redis runs that one on the
	// Sentinels' connections too. The client reads its own options' hook
	// when it sets up each new connection to the primary.
	c.Options().OnConnect = s.checkServer
	return s.open(ctx, fmt.Sprintf("master %s of sentinels %s", sn.Master, strings.Join(sn.Addrs, ",")), c)
}

func newStore(name, keyPrefix string, opts backends.Options) *Store {
	return &Store{name: name, opts: opts, keys: keys{prefix: keyPrefix}}
}

// open takes the client and checks that its server answers; where names
// the server in errors.
func (s *Store) open(ctx context.Context, where string, c *goredis.Client) (*Store, error) {
	s.rdb = c
	name := s.name
	s.queues.claims.Limit = queueMaxClaimGroup
	s.queues.acks.Limit, s.queues.acks.Timeout = queueMaxAckBatch, queueAckTimeout
	s.rdb.AddHook(tripCounter{&s.trips})
	if err := s.rdb.Ping(ctx).Err(); err != nil {
		s.rdb.Close()
		return nil, fmt.Errorf("redis %q: connect to %s: %w", name, where, err)
	}
	return s, nil
}

// Name is the backend's name in the spec.
func (s *Store) Name() string { return s.name }

// Type is spec.TypeRedis.
func (s *Store) Type() string { return spec.TypeRedis }

// RoundTrips counts requests sent: one per command, one per pipeline.
func (s *Store) RoundTrips() uint64 { return s.trips.Load() }

// Client is the underlying go-redis client (tests and benchmarks use it to
// reach behind coordd's back).
func (s *Store) Client() *goredis.Client { return s.rdb }

// Prefix is the key prefix.
func (s *Store) Prefix() string { return s.keys.prefix }

// Close closes the connections. It is idempotent.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	// The blocking clients of waiters and idle workers first.
	return errors.Join(s.sems.close(), s.queues.close(), s.rdb.Close())
}

// Now reads the server's clock (TIME).
func (s *Store) Now(ctx context.Context) (time.Time, error) {
	t, err := s.rdb.Time(ctx).Result()
	if err != nil {
		return time.Time{}, fmt.Errorf("redis %q: time: %w", s.name, err)
	}
	return t.UTC(), nil
}

// writable refuses writes on a read-only store.
func (s *Store) writable() error {
	if s.opts.ReadOnly {
		return ErrReadOnly
	}
	return nil
}

// tripCounter is a go-redis hook that counts round trips.
type tripCounter struct{ n *atomic.Uint64 }

func (h tripCounter) DialHook(next goredis.DialHook) goredis.DialHook { return next }

func (h tripCounter) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmd)
	}
}

func (h tripCounter) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmds)
	}
}

// The areas the store holds (backends.Backend): all of them. Each return
// checks at compile time that the store implements its area.
func (s *Store) Cluster() backends.Cluster       { return s }
func (s *Store) Semaphores() backends.Semaphores { return s }
func (s *Store) Crons() backends.Crons           { return s }
func (s *Store) Queues() backends.Queues         { return s }

// Waiters is the store's lines of waiters (backends.Semaphores).
func (s *Store) Waiters() backends.Waiters { return s }
