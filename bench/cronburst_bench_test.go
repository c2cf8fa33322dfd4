package bench

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coordd/coordd/internal/benchutil"
	"github.com/coordd/coordd/internal/testenv"
)

// burstTasks is how many cron tasks fall due in the same second
// (COORDD_BENCH_BURST overrides it). Target: 1,000 tasks, every
// child started at most 1.5 s after its scheduled time, on sqlite, mysql
// and redis.
func burstTasks() int {
	if v := os.Getenv("COORDD_BENCH_BURST"); v != "" {
		if n, err := strconv.Atoi(v); err == nil && n > 0 {
			return n
		}
	}
	return 1000
}

// burstScript is every child's command, and the floor's: one line with the
// task, its scheduled time and the start instant, read from bash's own
// clock so that measuring costs no extra process.
const burstScript = `echo "$COORDD_TASK $COORDD_SCHEDULED_AT $EPOCHREALTIME" >> "$BURST_LOG"`

// BenchmarkCronBurst runs two `coordd run` daemons on a spec of
// burstTasks() tasks that all fall due at the same minute boundary, and
// reports how late each child started (its own clock reading against its
// scheduled time): p50, p99 and max in ms. In the same run, before the
// daemons start, it measures the floor: burstTasks() concurrent `bash -c`
// spawns of the same command from Go, timed from the instant they are
// released to each child's own reading (floor-max-ms).
//
//	go test -run '^$' -bench CronBurst -benchtime 1x -timeout 30m ./bench/
func BenchmarkCronBurst(b *testing.B) {
	b.Run("backend=sqlite", func(b *testing.B) { cronBurst(b, "") })
	b.Run("backend=mysql", func(b *testing.B) {
		cronBurst(b, fmt.Sprintf("backends:\n  db: {type: mysql, dsn: %q}\n", testenv.MySQLDSN(b)))
	})
	b.Run("backend=postgres", func(b *testing.B) {
		cronBurst(b, fmt.Sprintf("backends:\n  db: {type: postgres, dsn: %q}\n", testenv.PostgresDSN(b)))
	})
	b.Run("backend=redis", func(b *testing.B) {
		url, prefix := testenv.RedisURL(b)
		cronBurst(b, fmt.Sprintf("backends:\n  db: {type: redis, url: %q, key_prefix: %q}\n", url, prefix))
	})
}

func cronBurst(b *testing.B, header string) {
	n := burstTasks()
	dir := b.TempDir()
	floorLog := filepath.Join(dir, "floor.log")
	floor := burstFloor(b, n, floorLog)

	var sb strings.Builder
	sb.WriteString(header)
	sb.WriteString("cron:\n")
	for i := range n {
		// catch_up none: only the burst counts, not a first run of a
		// task applied after its time.
		fmt.Fprintf(&sb, "  t%04d: {schedule: \"* * * * *\", catch_up: none, command: [bash, -c, %q]}\n", i, burstScript)
	}
	env, specPath, _ := setup(b, sb.String())
	apply(b, env, specPath)
	log := filepath.Join(dir, "burst.log")
	for _, h := range []string{"a", "b"} {
		env.StartWith(b, h, []string{"BURST_LOG=" + log}, "run", "-f", specPath, "--host-id", h, "--shutdown-grace", "5s")
	}
	// The burst is the first minute boundary at least 15 s away, so that
	// both daemons have started, elected a leader and settled.
	due := time.Now().Add(15 * time.Second).Truncate(time.Minute).Add(time.Minute)
	b.ResetTimer()
	var late []time.Duration
	eventually(b, time.Until(due)+2*time.Minute, fmt.Sprintf("%d starts of the burst at %s", n, due.Format(time.RFC3339)), func() bool {
		late = burstLateness(b, log, due)
		return len(late) >= n
	})
	b.StopTimer()
	if len(late) != n {
		b.Fatalf("%d starts for %d tasks: a task started twice", len(late), n)
	}
	b.ReportMetric(benchutil.Ms(benchutil.Pct(late, 50)), "p50-ms")
	b.ReportMetric(benchutil.Ms(benchutil.Pct(late, 99)), "p99-ms")
	b.ReportMetric(benchutil.Ms(benchutil.Pct(late, 100)), "max-ms")
	b.ReportMetric(benchutil.Ms(benchutil.Pct(floor, 50)), "floor-p50-ms")
	b.ReportMetric(benchutil.Ms(benchutil.Pct(floor, 100)), "floor-max-ms")
	b.ReportMetric(float64(n), "tasks")
}

// burstFloor spawns n `bash -c burstScript` at once and returns each
// child's start against the release instant.
func burstFloor(b *testing.B, n int, log string) []time.Duration {
	b.Helper()
	release := make(chan struct{})
	var wg sync.WaitGroup
	var failed error
	var mu sync.Mutex
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-release
			cmd := exec.Command("bash", "-c", burstScript)
			cmd.Env = append(os.Environ(), "BURST_LOG="+log, fmt.Sprintf("COORDD_TASK=f%04d", i), "COORDD_SCHEDULED_AT=floor")
			if err := cmd.Run(); err != nil {
				mu.Lock()
				failed = err
				mu.Unlock()
			}
		}()
	}
	time.Sleep(100 * time.Millisecond) // every goroutine parked on release
	at := time.Now()
	close(release)
	wg.Wait()
	if failed != nil {
		b.Fatal(failed)
	}
	var out []time.Duration
	for _, l := range readBurst(b, log) {
		out = append(out, l.at.Sub(at))
	}
	if len(out) != n {
		b.Fatalf("floor: %d lines for %d spawns", len(out), n)
	}
	return out
}

// burstLine is one line of a burst log.
type burstLine struct {
	task, scheduled string
	at              time.Time
}

func readBurst(b *testing.B, path string) []burstLine {
	b.Helper()
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	var out []burstLine
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) != 3 {
			continue
		}
		sec, frac, _ := strings.Cut(fs[2], ".")
		s, err1 := strconv.ParseInt(sec, 10, 64)
		us, err2 := strconv.ParseInt((frac + "000000")[:6], 10, 64)
		if err1 != nil || err2 != nil {
			continue
		}
		out = append(out, burstLine{task: fs[0], scheduled: fs[1], at: time.Unix(s, us*1000)})
	}
	return out
}

// burstLateness is the lateness of every start of the occurrence due at
// due (other occurrences, later minutes, are ignored).
func burstLateness(b *testing.B, path string, due time.Time) []time.Duration {
	b.Helper()
	var out []time.Duration
	for _, l := range readBurst(b, path) {
		t, err := time.Parse(time.RFC3339Nano, l.scheduled)
		if err != nil || !t.Equal(due) {
			continue
		}
		out = append(out, l.at.Sub(due))
	}
	return out
}
