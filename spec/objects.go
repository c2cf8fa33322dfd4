package spec

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Defaults, documented in docs/spec.md.
const (
	defaultTablePrefix = "coordd_"
	defaultKeyPrefix   = "coordd:"
	defaultLeaderLease = 4 * time.Second
	minLeaderLease     = time.Second

	defaultSemLease = 60 * time.Second
	// maxLimit bounds a semaphore's slots: backends keep one row or key per
	// slot, and a typo such as 1000000 must not create a million of them.
	maxLimit = 10000

	defaultKillGrace       = 10 * time.Second
	defaultCatchUpLimit    = 100
	defaultCronBackoff     = 30 * time.Second
	defaultHistoryLimit    = 100
	defaultRunLease        = 30 * time.Second
	minRunLease            = time.Second
	defaultPartitions      = DefaultPartitions
	maxPartitions          = 1024
	defaultVisibility      = 5 * time.Minute
	defaultQueueAttempts   = 5
	defaultQueueBackoff    = 10 * time.Second
	defaultMaxPayload      = 1 << 20
	maxMaxPayload          = MaxPayloadCap
	positive               = time.Nanosecond // duration lower bound for "> 0"
	implicitStoreFile      = "coordd.db"
	memcachedClusterAdvice = "memcached cannot hold cluster state (inventory, leader lease); use sqlite, mysql, postgres or redis"
)

func (l *loader) decodeCluster(s *Spec) {
	s.Cluster.LeaderLease = defaultLeaderLease
	explicit, explicitOK := "", false
	var fs *fieldSet
	if d := l.cluster; d != nil {
		s.Cluster.Pos = d.file.posOf(d.key)
		fs = l.fields(d.file, "cluster", d.key, d.val, []string{"backend", "leader_lease", "child_env"}, nil)
		if fs != nil {
			s.Cluster.LeaderLease, _ = fs.duration("leader_lease", defaultLeaderLease, minLeaderLease)
			childEnv, _ := fs.enum("child_env", ChildEnvScrub, ChildEnvScrub, ChildEnvInherit)
			s.Cluster.InheritEnv = childEnv == ChildEnvInherit
			if fs.has("backend") {
				explicit, explicitOK = fs.str("backend", false)
				if !explicitOK {
					// Already reported; keep objects from repeating it.
					l.def, l.defOK = "", false
					return
				}
			}
		}
	}
	declared := l.sortedNames("backends")
	if len(declared) == 0 {
		// Nothing declared: everything lives in the embedded store.
		b := &Backend{
			Name:     DefaultBackendName,
			Type:     TypeSQLite,
			Path:     filepath.Join(l.dataDir, implicitStoreFile),
			Implicit: true,
		}
		s.Backends[b.Name] = b
		l.known[b.Name] = TypeSQLite
	}
	switch {
	case explicitOK:
		s.Cluster.Backend = explicit
		l.def = explicit
		typ, ok := l.known[explicit]
		switch {
		case !ok:
			fs.errf("backend", "backend %s is not declared%s%s", quote(explicit), didYouMean(explicit, declared), declaredList(declared))
		case typ == TypeMemcached:
			fs.errf("backend", "%s", memcachedClusterAdvice)
		default:
			l.defOK = typ != ""
		}
	case len(declared) == 0:
		s.Cluster.Backend = DefaultBackendName
		l.def, l.defOK = DefaultBackendName, true
	case len(declared) == 1:
		name := declared[0]
		s.Cluster.Backend = name
		l.def = name
		if l.known[name] == TypeMemcached {
			if l.cluster != nil {
				l.errAt(l.cluster.file, l.cluster.key, "cluster.backend", "%s", memcachedClusterAdvice)
			} else {
				d := l.named["backends"][name]
				l.errAt(d.file, d.key, "cluster.backend", "%s", memcachedClusterAdvice)
			}
		}
		l.defOK = l.known[name] != ""
	default:
		l.ambiguous = true
		msg := fmt.Sprintf("%d backends are declared (%s) and cluster.backend is not set; set cluster.backend to the one that holds cluster state", len(declared), strings.Join(declared, ", "))
		if l.cluster != nil {
			l.errAt(l.cluster.file, l.cluster.key, "cluster.backend", "%s", msg)
		} else {
			l.errAt(l.firstBackends.file, l.firstBackends.key, "cluster.backend", "%s", msg)
		}
	}
}

func declaredList(names []string) string {
	if len(names) == 0 {
		return "; no backend is declared"
	}
	return "; declared: " + strings.Join(names, ", ")
}

// objectBackend resolves an object's backend: its own backend field, or
// the default. typ is "" when checks against the type must be skipped
// because the problem was already reported.
func (l *loader) objectBackend(fs *fieldSet) (name, typ string) {
	if fs.has("backend") {
		v, ok := fs.str("backend", false)
		if !ok {
			return "", ""
		}
		t, known := l.known[v]
		if !known {
			declared := l.sortedNames("backends")
			fs.errf("backend", "backend %s is not declared%s%s", quote(v), didYouMean(v, declared), declaredList(declared))
			return v, ""
		}
		return v, t
	}
	if l.ambiguous {
		declared := l.sortedNames("backends")
		fs.errf("backend", "%d backends are declared (%s) and cluster.backend is not set; set backend or cluster.backend", len(declared), strings.Join(declared, ", "))
		return "", ""
	}
	if !l.defOK {
		return l.def, ""
	}
	return l.def, l.known[l.def]
}

// notOnMemcached reports an object of a kind memcached cannot hold.
func notOnMemcached(fs *fieldSet, name, typ, what string) {
	if typ == TypeMemcached {
		fs.errf("backend", "backend %s is memcached, which holds semaphores only; put %s on a sqlite, mysql, postgres or redis backend", quote(name), what)
	}
}

var semaphoreFields = []string{"backend", "limit", "lease", "mode", "wake", "max_waiting", "max_hold", "keyed", "prevent_destroy"}

func (l *loader) decodeSemaphores(s *Spec) {
	for _, name := range l.sortedNames("semaphores") {
		d := l.named["semaphores"][name]
		fs := l.fields(d.file, "semaphore."+name, d.key, d.val, semaphoreFields, nil)
		if fs == nil {
			continue
		}
		o := &Semaphore{Name: name, Pos: d.file.posOf(d.key)}
		var typ string
		o.Backend, typ = l.objectBackend(fs)

		limitOK := false
		if !fs.has("limit") {
			fs.missing("limit", " (how many holders at once, at least 1)")
		} else {
			o.Limit, limitOK = fs.intRange("limit", 0, 1, maxLimit)
		}
		o.Lease, _ = fs.duration("lease", defaultSemLease, positive)
		modeOK := false
		o.Mode, modeOK = fs.enum("mode", ModeLease, ModeLease, ModeSession, ModeCounter)
		if modeOK && fs.has("mode") {
			switch {
			case o.Mode == ModeSession && typ != "" && typ != TypeMySQL && typ != TypePostgres:
				fs.errf("mode", "mode session needs a mysql or postgres backend; backend %s is %s", quote(o.Backend), typ)
			case o.Mode == ModeCounter && typ != "" && typ != TypeMemcached:
				fs.errf("mode", "mode counter needs a memcached backend; backend %s is %s", quote(o.Backend), typ)
			}
			if o.Mode == ModeCounter && limitOK && o.Limit != 1 {
				fs.errf("limit", "mode counter allows only limit 1, got %d", o.Limit)
			}
		}
		if fs.has("wake") {
			w, ok := fs.enum("wake", "", WakePoll, WakeKill)
			switch {
			case ok && modeOK && o.Mode != ModeSession:
				fs.errf("wake", "wake applies only to mode session (on mysql); mode is %s", o.Mode)
			case ok && modeOK && typ == TypePostgres:
				// PostgreSQL has one way that needs no choice: waiters
				// block in the server on the line's advisory lock, and
				// the head is woken by the NOTIFY of a release.
				fs.errf("wake", "wake applies only to mode session on mysql; on postgres, session-mode waiters queue in the server and are woken by NOTIFY, with nothing to choose (drop wake)")
			}
			o.Wake = w
		} else if o.Mode == ModeSession && typ != TypePostgres {
			o.Wake = WakePoll
		}
		if fs.has("max_waiting") {
			if v, ok := fs.intRange("max_waiting", 0, 0, 0); ok {
				o.MaxWaiting = &v
				if typ == TypeMemcached {
					fs.errf("max_waiting", "memcached keeps no line of waiters, so it cannot bound them; backend %s is memcached (drop max_waiting, or put the semaphore on sqlite, mysql, postgres or redis)", quote(o.Backend))
				}
			}
		}
		o.MaxHold, _ = fs.duration("max_hold", 0, 0)
		if o.Keyed = fs.boolean("keyed"); o.Keyed {
			switch {
			case typ == TypeMemcached:
				fs.errf("keyed", "memcached cannot hold keyed semaphores: it cannot list a semaphore's instances (to drain them) and keeps no line of waiters; backend %s is memcached (put the semaphore on sqlite, mysql, postgres or redis)", quote(o.Backend))
			case modeOK && o.Mode == ModeSession:
				fs.errf("keyed", "keyed needs mode lease: in mode session a slot is a lock of the holder's connection (a MySQL named lock, a PostgreSQL advisory lock) that no row records, so an instance's holders could not be listed or drained")
			}
		}
		o.PreventDestroy = fs.boolean("prevent_destroy")
		s.Semaphores[name] = o
	}
}

var cronFields = []string{
	"backend", "schedule", "after", "timezone", "jitter", "command", "push", "workdir", "env", "timeout", "kill_grace",
	"catch_up", "catch_up_limit", "starting_deadline", "overlap", "max_attempts", "retry_backoff", "on_host_loss",
	"semaphore", "rate_limit", "run_on_create", "history_limit", "prevent_destroy", "run_lease", "paused", "on_failure",
}

func (l *loader) decodeCron(s *Spec) {
	for _, name := range l.sortedNames("cron") {
		d := l.named["cron"][name]
		fs := l.fields(d.file, "cron."+name, d.key, d.val, cronFields, nil)
		if fs == nil {
			continue
		}
		o := &CronTask{Name: name, Pos: d.file.posOf(d.key)}
		var typ string
		o.Backend, typ = l.objectBackend(fs)
		notOnMemcached(fs, o.Backend, typ, "cron tasks")

		loc, locOK := time.UTC, true
		o.Timezone = "UTC"
		if fs.has("timezone") {
			tz, ok := fs.str("timezone", false)
			locOK = ok
			if ok {
				if lc, err := loadLocation(tz); err != nil {
					fs.errf("timezone", "%v", err)
					locOK = false
				} else {
					loc, o.Timezone = lc, tz
					if tz == "" {
						o.Timezone = "UTC"
					}
				}
			}
		}
		o.Jitter, _ = fs.duration("jitter", 0, 0)
		switch {
		case fs.has("after") && fs.has("schedule"):
			fs.errf("after", "a task runs on a schedule or after other tasks, not both: remove schedule or after")
		case fs.has("after"):
			o.After = l.cronAfter(fs, name)
			o.Sched = Never
			if fs.has("jitter") {
				fs.errf("jitter", "a task that runs after other tasks has no schedule to move: remove jitter")
			}
		case !fs.has("schedule"):
			fs.missing("schedule", ", e.g. \"0 4 * * *\" (or after: the tasks it follows)")
		default:
			l.cronSchedule(fs, o, loc, locOK)
		}
		switch {
		case fs.has("push") && fs.has("command"):
			fs.errf("push", "a task runs a command or pushes a job, not both: remove command or push")
		case fs.has("push"):
			o.Push = l.cronPush(s, fs)
		case !fs.has("command"):
			fs.missing("command", ": a list [program, args...] or a shell string (or push: a job to a queue)")
		default:
			o.Command = l.command(fs)
		}
		if fs.has("workdir") {
			if w, ok := fs.str("workdir", false); ok {
				if !filepath.IsAbs(w) {
					fs.errf("workdir", "must be an absolute path, got %s", quote(w))
				}
				o.Workdir = w
			}
		}
		o.Env = l.env(fs)
		o.Timeout, _ = fs.duration("timeout", 0, 0)
		o.KillGrace, _ = fs.duration("kill_grace", defaultKillGrace, 0)
		o.CatchUp, _ = fs.enum("catch_up", CatchUpOnce, CatchUpNone, CatchUpOnce, CatchUpAll)
		o.CatchUpLimit, _ = fs.intRange("catch_up_limit", defaultCatchUpLimit, 1, 0)
		o.StartingDeadline, _ = fs.duration("starting_deadline", 0, 0)
		o.Overlap, _ = fs.enum("overlap", OverlapForbid, OverlapForbid, OverlapAllow, OverlapReplace)
		o.MaxAttempts, _ = fs.intRange("max_attempts", 1, 1, 0)
		o.RetryBackoff, _ = fs.duration("retry_backoff", defaultCronBackoff, 0)
		o.OnHostLoss, _ = fs.enum("on_host_loss", HostLossRetry, HostLossRetry, HostLossFail)
		if fs.has("semaphore") {
			if sem, ok := fs.str("semaphore", false); ok {
				o.Semaphore = sem
				if _, declared := l.named["semaphores"][sem]; !declared {
					names := l.sortedNames("semaphores")
					fs.errf("semaphore", "semaphore %s is not declared%s", quote(sem), didYouMean(sem, names))
				} else if so := s.Semaphores[sem]; so != nil && so.Keyed {
					fs.errf("semaphore", "semaphore %s is keyed, and a cron task has no key to give it; name a semaphore without keyed", quote(sem))
				}
			}
		}
		o.RateLimit = l.cronRateLimit(s, fs)
		o.RunOnCreate = fs.boolean("run_on_create")
		o.Paused = fs.boolean("paused")
		o.HistoryLimit, _ = fs.intRange("history_limit", defaultHistoryLimit, 0, 0)
		o.RunLease, _ = fs.duration("run_lease", defaultRunLease, minRunLease)
		o.OnFailure = l.hook(fs, true)
		if o.OnFailure != nil && o.HistoryLimit == 0 && fs.has("history_limit") {
			fs.errf("history_limit", "must be at least 1 with on_failure: the hook finds failed runs in the history")
		}
		if len(o.After) > 0 && o.HistoryLimit == 0 && fs.has("history_limit") {
			fs.errf("history_limit", "must be at least 1 with after: the task's last run in its history marks the successes it has answered")
		}
		o.PreventDestroy = fs.boolean("prevent_destroy")
		s.Cron[name] = o
	}
}

// cronSchedule reads a cron task's schedule in loc (locOK: the timezone
// was read) and checks its jitter against it.
func (l *loader) cronSchedule(fs *fieldSet, o *CronTask, loc *time.Location, locOK bool) {
	expr, ok := fs.str("schedule", false)
	if !ok {
		return
	}
	o.Schedule = strings.Join(strings.Fields(expr), " ")
	sched, err := parseScheduleIn(o.Schedule, loc)
	if err != nil {
		fs.errf("schedule", "%v", err)
	} else if msg := secondsField(o.Schedule); msg != "" {
		fs.errf("schedule", "%s", msg)
	} else if err := checkJitter(sched, o.Jitter); err != nil {
		fs.errf("jitter", "%v", err)
	} else if locOK {
		o.Sched = Jittered(sched, JitterOffset(o.Name, o.Jitter))
	}
}

// cronAfter reads a cron task's after: a non-empty list of declared cron
// tasks, each named once, not the task itself. That they share the
// task's backend and form no circle is checked once every task is read
// (checkAfter).
func (l *loader) cronAfter(fs *fieldSet, name string) []string {
	n, ok := fs.scalar("after")
	if !ok {
		return nil
	}
	if n.Kind != yaml.SequenceNode {
		fs.errf("after", "must be a list of cron task names, got %s", describe(n, false))
		return nil
	}
	if len(n.Content) == 0 {
		fs.errf("after", "must name at least one cron task")
		return nil
	}
	var out []string
	seen := map[string]bool{}
	for i, e := range n.Content {
		if e.Kind == yaml.AliasNode {
			continue
		}
		addr := fmt.Sprintf("%s.after[%d]", fs.addr, i)
		v := e.Value
		switch {
		case e.Kind != yaml.ScalarNode || e.ShortTag() != tagStr:
			l.errAt(fs.file, e, addr, "must be the name of a cron task, got %s", describe(e, false))
		case v == name:
			l.errAt(fs.file, e, addr, "a task cannot run after itself")
		case seen[v]:
			l.errAt(fs.file, e, addr, "task %s is named twice", quote(v))
		default:
			seen[v] = true
			if _, declared := l.named["cron"][v]; !declared {
				l.errAt(fs.file, e, addr, "cron task %s is not declared%s", quote(v), didYouMean(v, l.sortedNames("cron")))
				continue
			}
			out = append(out, v)
		}
	}
	return out
}

// checkAfter checks what cronAfter cannot see alone: each task named in
// after is on the same backend as the task that follows it (the
// scheduler reads the parents' history in the store where it arms the
// task), and no task follows itself through others.
func (l *loader) checkAfter(s *Spec) {
	for _, name := range l.sortedNames("cron") {
		o := s.Cron[name]
		if o == nil {
			continue
		}
		for _, p := range o.After {
			if po := s.Cron[p]; po != nil && po.Backend != o.Backend {
				l.errs.add(&Error{Pos: o.Pos, Address: "cron." + name + ".after",
					Msg: fmt.Sprintf("task %s is on backend %s and this one on %s: a task runs after tasks of its own backend", quote(p), quote(po.Backend), quote(o.Backend))})
			}
		}
	}
	if circle := afterCircle(s.Cron); circle != nil {
		l.errs.add(&Error{Pos: s.Cron[circle[0]].Pos, Address: "cron." + circle[0] + ".after",
			Msg: fmt.Sprintf("tasks run after each other in a circle (%s): none of them would ever run", strings.Join(circle, " -> "))})
	}
}

// afterCircle returns one circle of after (its tasks, the first repeated
// at the end), or nil when there is none: a depth-first walk in name
// order, so that one spec always reports the same circle.
func afterCircle(tasks map[string]*CronTask) []string {
	const (
		unseen = iota
		onPath
		done
	)
	state := map[string]int{}
	var path []string
	var walk func(n string) []string
	walk = func(n string) []string {
		state[n] = onPath
		path = append(path, n)
		if t := tasks[n]; t != nil {
			for _, p := range t.After {
				switch state[p] {
				case onPath:
					i := slices.Index(path, p)
					return append(slices.Clone(path[i:]), p)
				case unseen:
					if c := walk(p); c != nil {
						return c
					}
				}
			}
		}
		path = path[:len(path)-1]
		state[n] = done
		return nil
	}
	names := make([]string, 0, len(tasks))
	for n := range tasks {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		if state[n] == unseen {
			if c := walk(n); c != nil {
				return c
			}
		}
	}
	return nil
}

// command reads a cron command: a list runs directly, a string with
// /bin/sh -c.
func (l *loader) command(fs *fieldSet) Command {
	n, ok := fs.scalar("command")
	if !ok {
		return Command{}
	}
	switch {
	case n.Kind == yaml.SequenceNode:
		if len(n.Content) == 0 {
			fs.errf("command", "must not be empty: give [program, args...]")
			return Command{}
		}
		argv := make([]string, 0, len(n.Content))
		for i, e := range n.Content {
			if e.Kind == yaml.AliasNode {
				continue
			}
			v, ok := stringish(e)
			if !ok {
				l.errAt(fs.file, e, fmt.Sprintf("%s.command[%d]", fs.addr, i), "must be a string, got %s", describe(e, false))
				continue
			}
			if i == 0 && v == "" {
				l.errAt(fs.file, e, fs.addr+".command[0]", "the program must not be empty")
			}
			argv = append(argv, v)
		}
		return Command{Argv: argv}
	case n.Kind == yaml.ScalarNode && n.ShortTag() == tagStr:
		if strings.TrimSpace(n.Value) == "" {
			fs.errf("command", "must not be empty")
		}
		return Command{Shell: n.Value}
	}
	fs.errf("command", "must be a list [program, args...] or a shell string, got %s", describe(n, false))
	return Command{}
}

// env reads a cron task's environment. Values are passed as written:
// ${...} in them is not expanded.
func (l *loader) env(fs *fieldSet) map[string]string {
	n, ok := fs.scalar("env")
	if !ok || isNull(n) {
		return nil
	}
	if n.Kind != yaml.MappingNode {
		fs.errf("env", "must be a mapping of NAME: value, got %s", describe(n, false))
		return nil
	}
	out := map[string]string{}
	keys := map[string]*yaml.Node{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind == yaml.AliasNode {
			continue
		}
		if k.Kind != yaml.ScalarNode {
			l.errAt(fs.file, k, fs.addr+".env", "keys must be variable names, got %s", describe(k, false))
			continue
		}
		addr := fs.addr + ".env." + k.Value
		if prev, dup := keys[k.Value]; dup {
			l.errAt(fs.file, k, fs.addr+".env", "duplicate key %s; first at %s", quote(k.Value), fs.file.pos(prev))
			continue
		}
		keys[k.Value] = k
		if !validEnvName(k.Value) {
			l.errAt(fs.file, k, fs.addr+".env", "invalid variable name %s: it starts with a letter or \"_\" and holds only letters, digits and \"_\"", quote(k.Value))
			continue
		}
		if v.Kind == yaml.AliasNode {
			continue
		}
		val, ok := stringish(v)
		if !ok {
			l.errAt(fs.file, v, addr, "must be a string, got %s", describe(v, false))
			continue
		}
		out[k.Value] = val
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

var queueFields = []string{
	"backend", "partitions", "visibility_timeout", "max_attempts", "retry_backoff", "timeout",
	"unique", "max_payload", "claim", "rate_limit", "prevent_destroy", "on_failure",
}

func (l *loader) decodeQueues(s *Spec) {
	for _, name := range l.sortedNames("queues") {
		d := l.named["queues"][name]
		fs := l.fields(d.file, "queue."+name, d.key, d.val, queueFields, nil)
		if fs == nil {
			continue
		}
		o := &Queue{Name: name, Pos: d.file.posOf(d.key)}
		var typ string
		o.Backend, typ = l.objectBackend(fs)
		notOnMemcached(fs, o.Backend, typ, "queues")
		o.Partitions, _ = fs.intRange("partitions", defaultPartitions, 1, maxPartitions)
		o.VisibilityTimeout, _ = fs.duration("visibility_timeout", defaultVisibility, positive)
		o.MaxAttempts, _ = fs.intRange("max_attempts", defaultQueueAttempts, 1, 0)
		o.RetryBackoff, _ = fs.duration("retry_backoff", defaultQueueBackoff, 0)
		o.Timeout, _ = fs.duration("timeout", 0, 0)
		o.Unique, _ = fs.enum("unique", UniqueNone, UniqueNone, UniquePending, UniquePendingOrRunning)
		o.MaxPayload = l.maxPayload(fs)
		var ok bool
		o.Claim, ok = fs.enum("claim", ClaimPartition, ClaimPartition, ClaimSkipLocked)
		if ok && o.Claim == ClaimSkipLocked && typ != "" && typ != TypeMySQL {
			fs.errf("claim", "claim skip_locked needs a mysql backend; backend %s is %s", quote(o.Backend), typ)
		}
		o.RateLimit = l.queueRateLimit(s, fs, o.Backend)
		o.OnFailure = l.hook(fs, false)
		o.PreventDestroy = fs.boolean("prevent_destroy")
		s.Queues[name] = o
	}
}

// pushFields are the fields of a cron task's push.
var pushFields = []string{"queue", "payload", "key"}

// pushRefuses are the cron fields that belong to a command, which a task
// that pushes has none of.
var pushRefuses = []string{"workdir", "env", "timeout", "semaphore", "rate_limit"}

// cronPush reads a cron task's push: a declared queue (on any backend:
// the daemon opens every backend), a payload within the queue's
// max_payload and a key within the key rule, placeholders written out as
// long as they can be.
func (l *loader) cronPush(s *Spec, fs *fieldSet) *CronPush {
	n, ok := fs.scalar("push")
	if !ok {
		return nil
	}
	pf := l.fields(fs.file, fs.addr+".push", fs.keys["push"], n, pushFields, nil)
	if pf == nil {
		return nil
	}
	for _, f := range pushRefuses {
		if fs.has(f) {
			fs.errf(f, "a task that pushes a job runs no command: remove %s (or push)", f)
		}
	}
	p := &CronPush{}
	if !pf.has("queue") {
		pf.missing("queue", " (the queue the job goes to)")
	} else if q, ok := pf.str("queue", false); ok {
		p.Queue = q
		if _, declared := l.named["queues"][q]; !declared {
			pf.errf("queue", "queue %s is not declared%s", quote(q), didYouMean(q, l.sortedNames("queues")))
		}
	}
	if pf.has("payload") {
		p.Payload, _ = pf.str("payload", false)
	}
	if pf.has("key") {
		if k, ok := pf.str("key", false); ok {
			p.Key = k
			// The longest a placeholder writes out: a name, a time.
			long := p.Expand(k, strings.Repeat("x", MaxNameLen), time.Date(9999, 12, 31, 23, 59, 59, 999999000, time.UTC))
			if err := CheckKey(long); err != nil {
				pf.errf("key", "%v", err)
			}
		}
	}
	return p
}

// cronRateLimit reads a cron task's rate_limit: a declared rate limit,
// unkeyed (a run has no key to give it), on any backend (the daemon opens
// every backend).
func (l *loader) cronRateLimit(s *Spec, fs *fieldSet) string {
	if !fs.has("rate_limit") {
		return ""
	}
	name, ok := fs.str("rate_limit", false)
	if !ok {
		return ""
	}
	if r := s.RateLimits[name]; r != nil && r.Keyed {
		fs.errf("rate_limit", "rate limit %s is keyed, and a cron task has no key to give it; name a rate limit without keyed", quote(name))
	} else if _, declared := l.named["rate_limits"][name]; !declared {
		fs.errf("rate_limit", "rate limit %s is not declared%s", quote(name), didYouMean(name, l.sortedNames("rate_limits")))
	}
	return name
}

// queueRateLimit reads a queue's rate_limit: a declared rate limit,
// unkeyed (a claim takes permits before it knows its jobs' keys) and on
// the queue's backend (its workers take permits from the store they
// claim from).
func (l *loader) queueRateLimit(s *Spec, fs *fieldSet, backend string) string {
	if !fs.has("rate_limit") {
		return ""
	}
	name, ok := fs.str("rate_limit", false)
	if !ok {
		return ""
	}
	r := s.RateLimits[name]
	switch {
	case r == nil:
		if _, declared := l.named["rate_limits"][name]; !declared {
			fs.errf("rate_limit", "rate limit %s is not declared%s", quote(name), didYouMean(name, l.sortedNames("rate_limits")))
		}
	case r.Keyed:
		fs.errf("rate_limit", "rate limit %s is keyed, and a queue's claims take permits before they know their jobs' keys; name a rate limit without keyed", quote(name))
	case backend != "" && r.Backend != backend:
		fs.errf("rate_limit", "rate limit %s is on backend %s and the queue on %s: a queue's workers take permits from the store they claim from, so put both on one backend", quote(name), quote(r.Backend), quote(backend))
	}
	return name
}

// maxPayload reads a size in bytes: an integer or a string like "64KiB".
func (l *loader) maxPayload(fs *fieldSet) int64 {
	n, ok := fs.scalar("max_payload")
	if !ok {
		return defaultMaxPayload
	}
	var v int64
	switch {
	case n.Kind == yaml.ScalarNode && n.ShortTag() == tagInt:
		if err := n.Decode(&v); err != nil {
			fs.errf("max_payload", "must be a size like 1048576 or \"1MiB\", got %s", describe(n, false))
			return defaultMaxPayload
		}
	case n.Kind == yaml.ScalarNode && n.ShortTag() == tagStr:
		if v, ok = parseSize(n.Value); !ok {
			fs.errf("max_payload", "must be a size like 1048576, \"64KiB\", \"1MiB\", \"512KB\" or \"2MB\", got %s", describe(n, false))
			return defaultMaxPayload
		}
	default:
		fs.errf("max_payload", "must be a size like 1048576 or \"1MiB\", got %s", describe(n, false))
		return defaultMaxPayload
	}
	if v <= 0 {
		fs.errf("max_payload", "must be greater than 0")
		return defaultMaxPayload
	}
	if v > maxMaxPayload {
		fs.errf("max_payload", "must be at most 64MiB (%d bytes), got %d", maxMaxPayload, v)
		return defaultMaxPayload
	}
	return v
}
