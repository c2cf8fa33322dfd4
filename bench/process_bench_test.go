package bench

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/backends/sqlite"
	"github.com/coordd/coordd/internal/benchutil"
	"github.com/coordd/coordd/internal/proctest"
	"github.com/coordd/coordd/queue"
	"github.com/coordd/coordd/semaphore"
)

// Process-level benchmarks of the runtime. They build cmd/coordd, start real
// coordd processes on the embedded store (the implicit coordd.db in the
// test's COORDD_DATA_DIR) and measure from outside. Each iteration does a
// fixed amount of work, so run them with -benchtime 1x:
//
//	go test -run '^$' -bench . -benchtime 1x ./bench/
//
// Every benchmark reports rt-us, the store's raw round trip (one Now()
// query, averaged over 2,000 calls) measured by this process on the same
// file in the same run.

// clockTicks is the unit of utime and stime in /proc/PID/stat: USER_HZ,
// which is 100 on every Linux architecture Go supports.
const clockTicks = 100

func reportRT(b *testing.B, rt time.Duration) {
	b.ReportMetric(float64(rt.Nanoseconds())/1e3, "rt-us")
}

// setup builds coordd, writes spec into a temp dir and returns the env, the
// spec path and the path of the embedded store the processes share.
func setup(b *testing.B, spec string) (*proctest.Env, string, string) {
	b.Helper()
	env := proctest.NewEnv(b)
	specPath := filepath.Join(b.TempDir(), "coordd.yaml")
	if err := os.WriteFile(specPath, []byte(spec), 0o644); err != nil {
		b.Fatal(err)
	}
	return env, specPath, filepath.Join(env.DataDir, "coordd.db")
}

func apply(b *testing.B, env *proctest.Env, specPath string) {
	b.Helper()
	if out, code := env.Run(b, "apply", "-f", specPath, "--auto-approve"); code != 0 {
		b.Fatalf("apply exited %d:\n%s", code, out)
	}
}

// openStore opens the shared store from this process.
func openStore(b *testing.B, path string) *sqlite.Store {
	b.Helper()
	st, err := sqlite.Open(context.Background(), "embedded", path, backends.Options{Version: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = st.Close() })
	if err := st.Migrate(context.Background()); err != nil {
		b.Fatal(err)
	}
	return st
}

// leaderHost is the host id of the current leader ("" when none), read
// from the store's leader row (holder ids are host/pid/nonce).
func leaderHost(b *testing.B, st *sqlite.Store) string {
	b.Helper()
	t, err := st.CurrentLeader(context.Background())
	if err != nil {
		return ""
	}
	now, err := st.Now(context.Background())
	if err != nil || t.Holder == "" || !t.ExpiresAt.After(now) {
		return ""
	}
	return strings.SplitN(t.Holder, "/", 2)[0]
}

func eventually(b *testing.B, d time.Duration, what string, cond func() bool) {
	b.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			b.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// start is one line of the failover log: an occurrence started by host at
// the wall clock at.
type start struct {
	scheduled time.Time
	host      string
	at        time.Time
}

func readStarts(b *testing.B, path string) []start {
	b.Helper()
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	var out []start
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) != 3 {
			continue // a line being written
		}
		sch, err1 := time.Parse(time.RFC3339Nano, fs[0])
		ns, err2 := strconv.ParseInt(fs[2], 10, 64)
		if err1 != nil || err2 != nil {
			continue
		}
		out = append(out, start{scheduled: sch, host: fs[1], at: time.Unix(0, ns)})
	}
	return out
}

// BenchmarkFailover runs three `coordd run` daemons with the default
// leader_lease (4s) and an `@every 1s` task whose command appends
// "COORDD_SCHEDULED_AT host $(date +%s%N)" to a log. Each trial kills the
// leader with SIGKILL at a random point of its renewal cycle, then measures
// from the kill to the first start, by another host, of an occurrence
// scheduled after the kill (its `date` stamp in the log). The killed daemon
// is started again before the next trial. Target: <= 5 s.
func BenchmarkFailover(b *testing.B) {
	const trials = 5
	dir := b.TempDir()
	logPath := filepath.Join(dir, "starts.log")
	env, specPath, dbPath := setup(b, fmt.Sprintf(`
cron:
  tick:
    schedule: "@every 1s"
    command: 'echo "$COORDD_SCHEDULED_AT $COORDD_TEST_HOST $(date +%%s%%N)" >> %s'
`, logPath))
	startHost := func(h string) *proctest.Proc {
		return env.StartWith(b, h, []string{"COORDD_TEST_HOST=" + h}, "run", "-f", specPath, "--host-id", h, "--shutdown-grace", "2s")
	}
	procs := map[string]*proctest.Proc{}
	for _, h := range []string{"h1", "h2", "h3"} {
		procs[h] = startHost(h)
	}
	eventually(b, 30*time.Second, "three occurrences", func() bool { return len(readStarts(b, logPath)) >= 3 })
	st := openStore(b, dbPath)
	rt := benchutil.RawRoundTrip(b, st)
	b.ResetTimer()
	var fo []time.Duration
	for range b.N {
		for range trials {
			var leader string
			eventually(b, 20*time.Second, "a leader", func() bool { leader = leaderHost(b, st); return leader != "" })
			if procs[leader] == nil {
				b.Fatalf("leader %q is not one of the daemons", leader)
			}
			// Kill at a random point of the leader's 1.33 s renewal cycle.
			time.Sleep(time.Duration(rand.IntN(1500)) * time.Millisecond)
			killedAt := time.Now()
			procs[leader].Kill9()
			var first start
			eventually(b, 30*time.Second, "an occurrence started after the kill", func() bool {
				for _, s := range readStarts(b, logPath) {
					if s.host != leader && s.scheduled.After(killedAt) {
						first = s
						return true
					}
				}
				return false
			})
			d := first.at.Sub(killedAt)
			fo = append(fo, d)
			b.Logf("killed leader %s; %s started the occurrence of %s after %s", leader, first.host,
				first.scheduled.Format("15:04:05"), d.Round(time.Millisecond))
			procs[leader] = startHost(leader)
			time.Sleep(2 * time.Second) // let it join as a follower
		}
	}
	b.StopTimer()
	for _, p := range procs {
		p.Signal(syscall.SIGTERM)
	}
	for _, p := range procs {
		p.Wait(b, 30*time.Second)
	}
	b.ReportMetric(float64(len(fo)), "trials")
	b.ReportMetric(benchutil.Pct(fo, 1).Seconds(), "min-s")
	b.ReportMetric(benchutil.Pct(fo, 50).Seconds(), "median-s")
	b.ReportMetric(benchutil.Pct(fo, 100).Seconds(), "max-s")
	reportRT(b, rt)
}

// BenchmarkQueueWorkCLI pushes 1,000 jobs through the Go API, then times
// `coordd queue work q --drain --concurrency N -- true` from its start to
// its exit: one fork/exec of true(1) per job, plus the claim, lease and
// ack in the store, plus the start of coordd itself (included, once).
func BenchmarkQueueWorkCLI(b *testing.B) {
	const jobs = 1000
	for _, conc := range []int{1, 4} {
		b.Run(fmt.Sprintf("concurrency=%d", conc), func(b *testing.B) {
			env, specPath, dbPath := setup(b, "queues:\n  q: {}\n")
			apply(b, env, specPath)
			st := openStore(b, dbPath)
			rt := benchutil.RawRoundTrip(b, st)
			c, err := queue.New(st)
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			b.ResetTimer()
			var total time.Duration
			for range b.N {
				b.StopTimer()
				for i := range jobs {
					if _, err := c.Push(ctx, "q", []byte("x"), queue.PushOptions{Key: strconv.Itoa(i % 64)}); err != nil {
						b.Fatal(err)
					}
				}
				b.StartTimer()
				startAt := time.Now()
				p := env.Start(b, "work", "queue", "work", "q", "-f", specPath, "--drain", "--concurrency", strconv.Itoa(conc), "--", "true")
				if code := p.Wait(b, 5*time.Minute); code != 0 {
					b.Fatalf("queue work exited %d:\n%s", code, p.Output())
				}
				total += time.Since(startAt)
				m, err := st.ObserveQueues(ctx, []string{"q"})
				if err != nil {
					b.Fatal(err)
				}
				if q := m["q"]; q.Ready+q.InFlight+q.Dead != 0 {
					b.Fatalf("after the drain: %+v", *q)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(jobs*b.N)/total.Seconds(), "jobs/s")
			reportRT(b, rt)
		})
	}
}

// cpuTicks is utime+stime of pid from /proc/PID/stat, in clock ticks.
func cpuTicks(b *testing.B, pid int) int64 {
	b.Helper()
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatal(err)
	}
	// The command name (field 2) may hold spaces: count from its ')'.
	s := string(raw)
	fs := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	// fs[0] is field 3 (state); utime and stime are fields 14 and 15.
	ut, err1 := strconv.ParseInt(fs[11], 10, 64)
	stt, err2 := strconv.ParseInt(fs[12], 10, 64)
	if err1 != nil || err2 != nil {
		b.Fatalf("parse /proc/%d/stat: %q", pid, s)
	}
	return ut + stt
}

// BenchmarkIdleDaemon runs two `coordd run` daemons (default leader_lease
// 4s, resync 30s) with a spec of one semaphore, one queue and one cron task
// due once a day, and reads each one's CPU time (utime+stime from
// /proc/PID/stat) over 20 s once a leader is elected. Store round trips are
// not visible from outside; scheduler.BenchmarkIdleRoundTrips counts them
// for the same loop in-process.
func BenchmarkIdleDaemon(b *testing.B) {
	const window = 20 * time.Second
	env, specPath, dbPath := setup(b, `
semaphores:
  s: {limit: 2}
queues:
  q: {}
cron:
  nightly:
    schedule: "0 4 * * *"
    command: ["true"]
`)
	apply(b, env, specPath)
	st := openStore(b, dbPath)
	rt := benchutil.RawRoundTrip(b, st)
	b.ResetTimer()
	var leaderPct, followerPct float64
	for range b.N {
		procs := map[string]*proctest.Proc{}
		for _, h := range []string{"h1", "h2"} {
			procs[h] = env.Start(b, h, "run", "-f", specPath, "--host-id", h)
		}
		var leader string
		eventually(b, 20*time.Second, "a leader", func() bool {
			leader = leaderHost(b, st)
			return procs[leader] != nil
		})
		follower := "h1"
		if leader == "h1" {
			follower = "h2"
		}
		time.Sleep(3 * time.Second) // past start-up
		lp, fp := procs[leader].Cmd.Process.Pid, procs[follower].Cmd.Process.Pid
		l0, f0 := cpuTicks(b, lp), cpuTicks(b, fp)
		t0 := time.Now()
		time.Sleep(window)
		l1, f1 := cpuTicks(b, lp), cpuTicks(b, fp)
		el := time.Since(t0).Seconds()
		if leaderHost(b, st) != leader {
			b.Fatal("leadership moved during the window")
		}
		leaderPct += 100 * float64(l1-l0) / clockTicks / el
		followerPct += 100 * float64(f1-f0) / clockTicks / el
		for _, p := range procs {
			p.Signal(syscall.SIGTERM)
		}
		for _, p := range procs {
			p.Wait(b, 30*time.Second)
		}
	}
	b.StopTimer()
	b.ReportMetric(leaderPct/float64(b.N), "leader-cpu-%")
	b.ReportMetric(followerPct/float64(b.N), "follower-cpu-%")
	reportRT(b, rt)
}

// BenchmarkSemWakeCrossProcess measures the wake-up of a waiter in another
// process: this process holds the only slot of a limit-1 semaphore through
// semaphore.Client; `coordd sem run s -- date +%s%N` is started and waits
// (its waiter record is seen in the store), the slot stays held a random
// 200-500 ms more (so the waiter's SQLite poll has reached its steady
// interval), then it is released. The latency is from the call to Release
// to the child's `date` stamp: the waiter's poll, its acquire and the fork
// and exec of the child. exec-p50-ms is the cost of the last part alone:
// this process's own fork/exec of the same `date` to its stamp. Target:
// p99 <= 50 ms.
func BenchmarkSemWakeCrossProcess(b *testing.B) {
	const samples = 40
	env, specPath, dbPath := setup(b, "semaphores:\n  s: {limit: 1}\n")
	apply(b, env, specPath)
	st := openStore(b, dbPath)
	rt := benchutil.RawRoundTrip(b, st)
	c, err := semaphore.New(st, "bench")
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	stamp := func(out string) time.Time {
		fs := strings.Fields(out)
		for i := len(fs) - 1; i >= 0; i-- {
			if ns, err := strconv.ParseInt(fs[i], 10, 64); err == nil && ns > 1e18 {
				return time.Unix(0, ns)
			}
		}
		b.Fatalf("no date stamp in %q", out)
		return time.Time{}
	}
	b.ResetTimer()
	var lat, execLat []time.Duration
	for range b.N {
		for i := range samples {
			holder, err := c.Acquire(ctx, "s", semaphore.AcquireOptions{Lease: time.Minute, NoWait: true})
			if err != nil {
				b.Fatal(err)
			}
			p := env.Start(b, fmt.Sprintf("sem-run-%d", i), "sem", "run", "s", "-f", specPath, "--", "date", "+%s%N")
			eventually(b, 20*time.Second, "the waiter's record", func() bool {
				w, err := st.FirstWaiter(ctx, backends.SemRef{Name: "s"})
				return err == nil && w != ""
			})
			time.Sleep(time.Duration(200+rand.IntN(300)) * time.Millisecond)
			released := time.Now()
			if err := holder.Release(ctx); err != nil {
				b.Fatal(err)
			}
			if code := p.Wait(b, 30*time.Second); code != 0 {
				b.Fatalf("sem run exited %d:\n%s", code, p.Output())
			}
			lat = append(lat, stamp(p.Output()).Sub(released))

			// The exec part alone, from this process.
			cmd := exec.Command("date", "+%s%N")
			var out strings.Builder
			cmd.Stdout = &out
			forked := time.Now()
			if err := cmd.Run(); err != nil {
				b.Fatal(err)
			}
			execLat = append(execLat, stamp(out.String()).Sub(forked))
		}
	}
	b.StopTimer()
	b.ReportMetric(benchutil.Ms(benchutil.Pct(lat, 50)), "p50-ms")
	b.ReportMetric(benchutil.Ms(benchutil.Pct(lat, 99)), "p99-ms")
	b.ReportMetric(benchutil.Ms(benchutil.Pct(lat, 100)), "max-ms")
	b.ReportMetric(benchutil.Ms(benchutil.Pct(execLat, 50)), "exec-p50-ms")
	reportRT(b, rt)
}
