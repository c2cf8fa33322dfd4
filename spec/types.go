// Package spec loads and validates coordd's declarative YAML.
//
// A spec is one file or a directory of *.yaml/*.yml files, merged. Loading is
// strict (unknown keys are errors), every error carries FILE:LINE:COL and the
// address of the field, and all errors are reported at once. The loaded Spec is
// normalized: defaults are filled in, every object has a resolved backend, and
// durations are parsed. The rest of coordd works only with this normalized form.
package spec

import (
	"fmt"
	"strings"
	"time"

	"github.com/coordd/coordd/internal/safetext"
)

// Kind is one of the four kinds of managed object.
type Kind string

const (
	KindSemaphore Kind = "semaphore"
	KindCron      Kind = "cron"
	KindQueue     Kind = "queue"
	KindRateLimit Kind = "rate_limit"
)

// Kinds lists the kinds in the order plans print them and apply creates
// them: a kind comes after the kinds it names (a queue or a cron task names
// a semaphore or a rate limit), so that apply creates those first and
// deletes them last.
var Kinds = []Kind{KindSemaphore, KindRateLimit, KindCron, KindQueue}

// Address names one managed object, e.g. "semaphore.reindex".
type Address struct {
	Kind Kind   `json:"kind"`
	Name string `json:"name"`
}

func (a Address) String() string { return string(a.Kind) + "." + a.Name }

// Pos is a position in a spec file. Line and Col are 1-based.
type Pos struct {
	File string `json:"file"`
	Line int    `json:"line"`
	Col  int    `json:"col"`
}

// String formats the position as FILE:LINE:COL for messages and logs,
// the file name escaped and quoted when it holds a control character, a
// quote or a backslash (safetext.Line): a spec file named with a newline
// and a terminal escape must not forge a line of validate's output or of
// the daemon's log.
func (p Pos) String() string {
	return fmt.Sprintf("%s:%d:%d", safetext.Line(p.File), p.Line, p.Col)
}

// Backend types.
const (
	TypeSQLite    = "sqlite"
	TypeMySQL     = "mysql"
	TypePostgres  = "postgres"
	TypeRedis     = "redis"
	TypeMemcached = "memcached"
)

// DefaultBackendName is the name given to the implicit embedded store used
// when a spec declares no backend at all.
const DefaultBackendName = "embedded"

// Backend is one declared connection. Connection fields have had ${VAR}
// expansion applied (unless the loader ran with SkipEnv).
type Backend struct {
	Name string `json:"name"`
	Type string `json:"type"`

	// sqlite
	Path string `json:"path,omitempty"` // absolute after load
	// mysql, postgres
	DSN         string `json:"-"` // may hold a password: never printed; see RedactedDSN
	TablePrefix string `json:"table_prefix,omitempty"`
	// postgres: the schema that holds coordd's tables.
	Schema string `json:"schema,omitempty"`
	// postgres: how idle queue workers learn of new jobs: WakeNotify
	// (LISTEN/NOTIFY) or WakePoll (behind PgBouncer in transaction mode).
	Wake string `json:"wake,omitempty"`
	// redis
	URL string `json:"-"` // may hold a password: never printed; see RedactedURL
	// Sentinel, instead of URL, finds the primary through Redis Sentinel.
	Sentinel *RedisSentinel `json:"sentinel,omitempty"`
	// redis: durable: true states that no acknowledged write is lost across
	// a restart or failover, so a restart holds no semaphore.
	Durable bool `json:"durable,omitempty"`
	// redis, memcached
	KeyPrefix string   `json:"key_prefix,omitempty"`
	Servers   []string `json:"servers,omitempty"`

	// Implicit is true for the embedded store added when no backend is declared.
	Implicit bool `json:"implicit,omitempty"`
	Pos      Pos  `json:"-"`
}

// Cluster holds cluster-wide settings.
type Cluster struct {
	// Backend holds the leader lease, the inventory and the apply records.
	Backend     string        `json:"backend"`
	LeaderLease time.Duration `json:"leader_lease"`
	// InheritEnv is cluster.child_env: inherit: the commands coordd starts
	// keep the variables that backend connection fields reference (see
	// Spec.ChildEnvUnset). Omitted when false, so that the default leaves
	// Hash as it was before the field existed.
	InheritEnv bool `json:"inherit_env,omitempty"`
	Pos        Pos  `json:"-"`
}

// Semaphore modes, wake strategies, claim strategies and other enums.
const (
	ModeLease   = "lease"
	ModeSession = "session"
	ModeCounter = "counter"

	WakePoll   = "poll"
	WakeKill   = "kill"
	WakeNotify = "notify"

	CatchUpNone = "none"
	CatchUpOnce = "once"
	CatchUpAll  = "all"

	OverlapForbid  = "forbid"
	OverlapAllow   = "allow"
	OverlapReplace = "replace"

	HostLossRetry = "retry"
	HostLossFail  = "fail"

	UniqueNone             = "none"
	UniquePending          = "pending"
	UniquePendingOrRunning = "pending_or_running"

	ClaimPartition  = "partition"
	ClaimSkipLocked = "skip_locked"
)

// DefaultPartitions is a queue's partition count when the spec sets none:
// on mysql the number of claims that may run at once (claim partition);
// the claim order does not depend on it (backends.Queues.Claim).
const DefaultPartitions = 4

// Semaphore admits at most Limit holders across all servers.
type Semaphore struct {
	Name    string        `json:"-"`
	Backend string        `json:"backend"`
	Limit   int           `json:"limit"`
	Lease   time.Duration `json:"lease"`
	Mode    string        `json:"mode"`
	Wake    string        `json:"wake,omitempty"`
	// MaxWaiting is nil for "no bound"; 0 means nobody may wait.
	MaxWaiting *int          `json:"max_waiting,omitempty"`
	MaxHold    time.Duration `json:"max_hold,omitempty"`
	// Keyed: each key given at run time (sem run --key) is an instance of
	// its own with this limit and max_waiting.
	Keyed          bool `json:"keyed,omitempty"`
	PreventDestroy bool `json:"prevent_destroy,omitempty"`
	Pos            Pos  `json:"-"`
}

// Command is what a cron task runs. Exactly one of Argv and Shell is set:
// a YAML list runs directly, a YAML string runs with /bin/sh -c.
type Command struct {
	Argv  []string `json:"argv,omitempty"`
	Shell string   `json:"shell,omitempty"`
}

// CronTask runs Command on exactly one server per scheduled time.
type CronTask struct {
	Name    string `json:"-"`
	Backend string `json:"backend"`
	// Schedule is the cron expression; empty for a task that runs After
	// other tasks instead.
	Schedule string `json:"schedule,omitempty"`
	// After names the tasks (on the same backend) whose successes trigger
	// this one: it runs once each time every one of them has succeeded
	// since its previous trigger. Exclusive with Schedule.
	After    []string `json:"after,omitempty"`
	Timezone string   `json:"timezone"`
	// Jitter moves every scheduled time by a fixed offset in [0, Jitter)
	// taken from the task's name (JitterOffset).
	Jitter  time.Duration `json:"jitter,omitempty"`
	Command Command       `json:"command"`
	// Push, when set, replaces the command: each run pushes one job to a
	// queue, once per scheduled time.
	Push         *CronPush         `json:"push,omitempty"`
	Workdir      string            `json:"workdir,omitempty"`
	Env          map[string]string `json:"env,omitempty"`
	Timeout      time.Duration     `json:"timeout,omitempty"`
	KillGrace    time.Duration     `json:"kill_grace"`
	CatchUp      string            `json:"catch_up"`
	CatchUpLimit int               `json:"catch_up_limit"`
	// StartingDeadline: a scheduled time not started within this long is
	// recorded missed (a skip) instead of starting late; 0: none.
	StartingDeadline time.Duration `json:"starting_deadline,omitempty"`
	Overlap          string        `json:"overlap"`
	MaxAttempts      int           `json:"max_attempts"`
	RetryBackoff     time.Duration `json:"retry_backoff"`
	OnHostLoss       string        `json:"on_host_loss"`
	Semaphore        string        `json:"semaphore,omitempty"`
	// RateLimit names a rate limit whose permit each run takes before its
	// command starts (after its semaphore's slot); empty: none.
	RateLimit   string `json:"rate_limit,omitempty"`
	RunOnCreate bool   `json:"run_on_create,omitempty"`
	// Paused: no occurrence is scheduled (declared in git; an operator
	// may also pause a task with coordd cron pause, kept beside the
	// definition). The task is paused while either says so.
	Paused       bool `json:"paused,omitempty"`
	HistoryLimit int  `json:"history_limit"`
	// RunLease is the run lease of an occurrence: the host running it
	// renews it every RunLease/3; when it stops, the occurrence is lost
	// after RunLease.
	RunLease time.Duration `json:"run_lease"`
	// OnFailure runs once per failed, timed-out, lost or missed run; nil:
	// none.
	OnFailure      *Hook `json:"on_failure,omitempty"`
	PreventDestroy bool  `json:"prevent_destroy,omitempty"`
	Pos            Pos   `json:"-"`

	// Sched is the parsed schedule; never nil after a successful load.
	Sched Schedule `json:"-"`
}

// When is how a task's times come: its schedule, or "after a, b" for a
// task that runs after others.
func (t *CronTask) When() string {
	if len(t.After) > 0 {
		return "after " + strings.Join(t.After, ", ")
	}
	return t.Schedule
}

// CronPush is a cron task's push: one job to Queue per scheduled time,
// with Payload and Key, in which {task} stands for the task's name and
// {scheduled_at} for the occurrence's scheduled time (RFC 3339 in UTC with
// six fractional digits, as COORDD_SCHEDULED_AT).
type CronPush struct {
	Queue   string `json:"queue"`
	Payload string `json:"payload,omitempty"`
	Key     string `json:"key,omitempty"`
}

// ScheduledAtLayout is how {scheduled_at} and COORDD_SCHEDULED_AT write a
// scheduled time.
const ScheduledAtLayout = "2006-01-02T15:04:05.000000Z07:00"

// Expand writes out the placeholders of a push's text for task's
// occurrence scheduled at at.
func (p *CronPush) Expand(text, task string, at time.Time) string {
	if !strings.Contains(text, "{") {
		return text
	}
	return strings.NewReplacer("{task}", task, "{scheduled_at}", at.UTC().Format(ScheduledAtLayout)).Replace(text)
}

// Queue holds jobs that any server may take.
type Queue struct {
	Name              string        `json:"-"`
	Backend           string        `json:"backend"`
	Partitions        int           `json:"partitions"`
	VisibilityTimeout time.Duration `json:"visibility_timeout"`
	MaxAttempts       int           `json:"max_attempts"`
	RetryBackoff      time.Duration `json:"retry_backoff"`
	Timeout           time.Duration `json:"timeout,omitempty"`
	Unique            string        `json:"unique"`
	MaxPayload        int64         `json:"max_payload"`
	Claim             string        `json:"claim"`
	// RateLimit names a rate limit on the queue's backend: workers take
	// a permit for each job before they claim it; empty: none.
	RateLimit string `json:"rate_limit,omitempty"`
	// OnFailure runs once per job moved to the dead set; nil: none.
	OnFailure      *Hook `json:"on_failure,omitempty"`
	PreventDestroy bool  `json:"prevent_destroy,omitempty"`
	Pos            Pos   `json:"-"`
}

// RateLimit grants at most Burst permits at once and, on average, Count
// permits per Per across all servers: the generic cell rate algorithm
// (GCRA), one permit every Interval() with a tolerance of Burst-1
// intervals.
type RateLimit struct {
	Name    string `json:"-"`
	Backend string `json:"backend"`
	// Count permits per Per: rate "100/1m" is Count 100, Per 1m.
	Count int           `json:"count"`
	Per   time.Duration `json:"per"`
	// Burst is how many permits an idle limit grants at once (>= 1).
	Burst int `json:"burst"`
	// Keyed: each key given at run time (rate run --key) has a limit of
	// its own with this rate and burst.
	Keyed          bool `json:"keyed,omitempty"`
	PreventDestroy bool `json:"prevent_destroy,omitempty"`
	Pos            Pos  `json:"-"`
}

// Interval is the emission interval: the time one permit stands for.
func (r *RateLimit) Interval() time.Duration { return r.Per / time.Duration(r.Count) }

// Rate is the rate as the spec writes it: "100/1m", "10/1s", "3/1m30s".
func (r *RateLimit) Rate() string {
	p := r.Per.String()
	if q, ok := strings.CutSuffix(p, "m0s"); ok {
		p = q + "m"
	}
	if q, ok := strings.CutSuffix(p, "h0m"); ok {
		p = q + "h"
	}
	return fmt.Sprintf("%d/%s", r.Count, p)
}

// Spec is a loaded, validated and normalized spec.
type Spec struct {
	Backends   map[string]*Backend   `json:"backends"`
	Cluster    Cluster               `json:"cluster"`
	Semaphores map[string]*Semaphore `json:"semaphores"`
	Cron       map[string]*CronTask  `json:"cron"`
	Queues     map[string]*Queue     `json:"queues"`
	RateLimits map[string]*RateLimit `json:"rate_limits"`

	// Files are the files that were read, in merge order.
	Files []string `json:"-"`

	// backendEnv: see BackendEnv.
	backendEnv []string
}

// Schedule yields the occurrences of a cron schedule.
type Schedule interface {
	// Next returns the first occurrence strictly after t, in t's location
	// converted to the task's timezone. It returns the zero time when there
	// is none.
	Next(t time.Time) time.Time
	// String returns the schedule as written.
	String() string
}

// RedisSentinel names a Redis primary by the Sentinels that watch it; the
// client asks them for the primary's address and follows a failover.
type RedisSentinel struct {
	Master string   `json:"master"`
	Addrs  []string `json:"addrs"`
	DB     int      `json:"db,omitempty"`
	// Username and Password authenticate to the Redis servers,
	// SentinelPassword to the Sentinels. Passwords are never printed nor
	// hashed.
	Username         string `json:"username,omitempty"`
	Password         string `json:"-"`
	SentinelPassword string `json:"-"`
}

// Retryable reports whether an attempt of a scheduled time of t that
// ended failed or timed out (lost false), or lost (its host vanished or
// stopped renewing), gets another attempt.
//
// A failed or timed-out attempt is retried while attempt < max_attempts.
// A lost one (nothing says the command failed) is retried under
// on_host_loss retry while attempt <= max_attempts: a host loss earns one
// attempt beyond max_attempts, so that the default max_attempts 1
// survives a kill -9, and a command that kills its host every time still
// runs at most max_attempts+1 times per scheduled time. The bound needs
// only the attempt number, not a count of earlier losses that
// history_limit might have trimmed.
func (t *CronTask) Retryable(lost bool, attempt int) bool {
	attempts := max(t.MaxAttempts, 1)
	if lost {
		return t.OnHostLoss != HostLossFail && attempt <= attempts
	}
	return attempt < attempts
}
