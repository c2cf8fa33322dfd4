package bench

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	driver "github.com/go-sql-driver/mysql"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/backends/mysql"
	"github.com/coordd/coordd/internal/benchutil"
	"github.com/coordd/coordd/internal/proctest"
	"github.com/coordd/coordd/internal/testenv"
)

// Process-level benchmarks on MariaDB. They start real `coordd
// run` processes against a private mariadbd (testenv.StartMariaDB) that
// nothing else uses:
//
//	go test -run '^$' -bench IdleDaemonMySQL -benchtime 1x ./bench/

// countingProxy forwards TCP connections to a MySQL server and counts what
// the clients send: each client packet with sequence id 0 is a command
// (COM_QUERY, COM_PING, COM_QUIT, ...), one request and one round trip; the
// handshake's client packets have sequence ids from 1. A script of several
// statements sent as one COM_QUERY counts once here (and once per statement
// in the server's Questions). It also keeps the first words of each query,
// to show what an idle daemon sends.
type countingProxy struct {
	ln     net.Listener
	target string

	conns    atomic.Int64 // connections opened
	commands atomic.Int64 // client commands, all kinds

	mu    sync.Mutex
	texts map[string]int // query prefix -> count
	wg    sync.WaitGroup
}

func startProxy(b *testing.B, target string) *countingProxy {
	b.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	p := &countingProxy{ln: ln, target: target, texts: map[string]int{}}
	p.wg.Add(1)
	go p.accept()
	b.Cleanup(func() { _ = ln.Close(); p.wg.Wait() })
	return p
}

func (p *countingProxy) addr() string { return p.ln.Addr().String() }

func (p *countingProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.conns.Add(1)
		p.wg.Add(2)
		go func() { defer p.wg.Done(); _, _ = io.Copy(c, s); _ = c.Close(); _ = s.Close() }()
		go func() { defer p.wg.Done(); p.forward(c, s); _ = c.Close(); _ = s.Close() }()
	}
}

// forward copies client packets to the server, counting commands.
func (p *countingProxy) forward(c, s net.Conn) {
	var h [4]byte
	buf := make([]byte, 0, 4096)
	for {
		if _, err := io.ReadFull(c, h[:]); err != nil {
			return
		}
		n := int(h[0]) | int(h[1])<<8 | int(h[2])<<16
		if cap(buf) < n {
			buf = make([]byte, n)
		}
		buf = buf[:n]
		if _, err := io.ReadFull(c, buf); err != nil {
			return
		}
		if h[3] == 0 && n > 0 {
			p.commands.Add(1)
			key := fmt.Sprintf("command 0x%02x", buf[0])
			if buf[0] == 0x03 { // COM_QUERY
				key = queryKey(string(buf[1:]))
			}
			p.mu.Lock()
			p.texts[key]++
			p.mu.Unlock()
		}
		if _, err := s.Write(h[:]); err != nil {
			return
		}
		if _, err := s.Write(buf); err != nil {
			return
		}
	}
}

// queryKey is the first words of a query, enough to tell statements apart.
func queryKey(q string) string {
	q = strings.Join(strings.Fields(q), " ")
	if len(q) > 70 {
		q = q[:70]
	}
	return q
}

// snapshot returns the command count and a copy of the texts.
func (p *countingProxy) snapshot() (int64, int64, map[string]int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	m := make(map[string]int, len(p.texts))
	for k, v := range p.texts {
		m[k] = v
	}
	return p.commands.Load(), p.conns.Load(), m
}

// diffTexts returns after-before, largest first, as lines.
func diffTexts(before, after map[string]int) []string {
	type kv struct {
		k string
		v int
	}
	var out []kv
	for k, v := range after {
		if d := v - before[k]; d > 0 {
			out = append(out, kv{k, d})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].v > out[j].v || out[i].v == out[j].v && out[i].k < out[j].k })
	lines := make([]string, len(out))
	for i, e := range out {
		lines[i] = fmt.Sprintf("%5d  %s", e.v, e.k)
	}
	return lines
}

// questions reads the server's Questions counter (statements executed,
// every statement of a script counted).
func questions(b *testing.B, db *sql.DB) int64 {
	b.Helper()
	var name string
	var n int64
	if err := db.QueryRow("SHOW GLOBAL STATUS LIKE 'Questions'").Scan(&name, &n); err != nil {
		b.Fatal(err)
	}
	return n
}

// idleSpec is the spec of BenchmarkIdleDaemonMySQL: a few semaphores, a
// queue and a cron task due far in the future (at 04:00 UTC: at least
// minutes away, since the benchmark refuses to run near it).
const idleSpec = `backends:
  db: {type: mysql, dsn: %q, table_prefix: "idle_"}
cluster: {backend: db}
semaphores:
  image-import: {limit: 5}
  nightly-report: {limit: 1}
  reindex: {limit: 2, max_waiting: 4}
queues:
  thumbnails: {partitions: 4}
cron:
  nightly:
    schedule: "0 4 * * *"
    timezone: UTC
    command: ["true"]
`

// BenchmarkIdleDaemonMySQL runs three `coordd run` daemons (host ids h1,
// h2, h3; default leader_lease 4s) on one database of a
// private mariadbd, with idleSpec, and counts what each one sends while
// idle: each daemon reaches the server through its own countingProxy, so
// its commands (round trips) are counted per host; the server's Questions
// counter, which nothing else increments (the benchmark's own reads are
// subtracted), gives the total in statements. The window starts 15 s after
// the leader applied the spec (start-up done) and lasts 60 s, two resyncs.
// Target: <= 1 query/s per host. The sub-benchmarks run the
// daemons with the default resync interval and with --resync 60s.
func BenchmarkIdleDaemonMySQL(b *testing.B) {
	for _, resync := range []string{"30s", "60s"} {
		b.Run("resync="+resync, func(b *testing.B) { idleDaemonMySQL(b, resync) })
	}
}

func idleDaemonMySQL(b *testing.B, resync string) {
	const (
		settle = 15 * time.Second
		window = 60 * time.Second
	)
	if now := time.Now().UTC(); now.Hour() == 3 && now.Minute() >= 55 || now.Hour() == 4 && now.Minute() < 5 {
		b.Fatal("the idle spec's cron task is due at 04:00 UTC; run this benchmark at another time")
	}
	m := testenv.StartMariaDB(b)
	dsn := m.CreateDatabase(b)
	cfg, err := driver.ParseDSN(dsn)
	if err != nil {
		b.Fatal(err)
	}
	admin, err := sql.Open("mysql", dsn)
	if err != nil {
		b.Fatal(err)
	}
	admin.SetMaxOpenConns(1)
	b.Cleanup(func() { _ = admin.Close() })
	ctx := context.Background()
	st, err := mysql.Open(ctx, "db", dsn, "idle_", backends.Options{Version: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = st.Close() })
	if err := st.Migrate(ctx); err != nil {
		b.Fatal(err)
	}
	rt := benchutil.RawRoundTrip(b, st)

	env := proctest.NewEnv(b)
	dir := b.TempDir()
	hosts := []string{"h1", "h2", "h3"}
	proxies := map[string]*countingProxy{}
	specs := map[string]string{}
	for _, h := range hosts {
		proxies[h] = startProxy(b, cfg.Addr)
		c := cfg.Clone()
		c.Addr = proxies[h].addr()
		specs[h] = filepath.Join(dir, h+".yaml")
		if err := os.WriteFile(specs[h], fmt.Appendf(nil, idleSpec, c.FormatDSN()), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	leaderOf := func() string {
		t, err := st.CurrentLeader(ctx)
		if err != nil {
			return ""
		}
		return strings.SplitN(t.Holder, "/", 2)[0]
	}
	applied := func() bool {
		s, err := st.LoadState(ctx)
		return err == nil && s.Last != nil && len(s.Entries) == 5
	}

	b.ResetTimer()
	var leaderRate, followerRate, maxRate, questionRate float64
	for range b.N {
		procs := map[string]*proctest.Proc{}
		for _, h := range hosts {
			procs[h] = env.Start(b, h, "run", "-f", specs[h], "--host-id", h, "--resync", resync)
		}
		var leader string
		eventually(b, 30*time.Second, "a leader that applied the spec", func() bool {
			leader = leaderOf()
			return procs[leader] != nil && applied()
		})
		time.Sleep(settle)
		type snap struct {
			cmds, conns int64
			texts       map[string]int
		}
		before := map[string]snap{}
		for _, h := range hosts {
			c, n, t := proxies[h].snapshot()
			before[h] = snap{c, n, t}
		}
		q0 := questions(b, admin)
		t0 := time.Now()
		time.Sleep(window)
		q1 := questions(b, admin)
		el := time.Since(t0).Seconds()
		after := map[string]snap{}
		for _, h := range hosts {
			c, n, t := proxies[h].snapshot()
			after[h] = snap{c, n, t}
		}
		if now := leaderOf(); now != leader {
			b.Fatalf("leadership moved from %s to %s during the window", leader, now)
		}
		for _, h := range hosts {
			rate := float64(after[h].cmds-before[h].cmds) / el
			role := "follower"
			if h == leader {
				role = "leader"
				leaderRate += rate
			} else {
				followerRate += rate / float64(len(hosts)-1)
			}
			maxRate = max(maxRate, rate)
			// To stderr: the testing package truncates a benchmark's log.
			fmt.Fprintf(os.Stderr, "%s (%s): %.3f commands/s, %d commands and %d new connections in %.0f s; by statement:\n  %s\n",
				h, role, rate, after[h].cmds-before[h].cmds, after[h].conns-before[h].conns, el,
				strings.Join(diffTexts(before[h].texts, after[h].texts), "\n  "))
		}
		// The benchmark's own reads of the window: the second SHOW (the
		// first is counted before it runs or not at all, depending on the
		// server), and the leader check through st.
		questionRate += float64(q1-q0-2) / el / float64(len(hosts))
		for _, p := range procs {
			p.Signal(syscall.SIGTERM)
		}
		for _, h := range hosts {
			if code := procs[h].Wait(b, 30*time.Second); code != 0 {
				b.Errorf("%s exited %d:\n%s", h, code, procs[h].Output())
			}
		}
	}
	b.StopTimer()
	n := float64(b.N)
	b.ReportMetric(leaderRate/n, "leader-q/s")
	b.ReportMetric(followerRate/n, "follower-q/s")
	b.ReportMetric(maxRate, "max-host-q/s")
	b.ReportMetric(questionRate/n, "server-questions/s/host")
	reportRT(b, rt)
}
