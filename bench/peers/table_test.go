package peers

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/reconcile"
	"github.com/coordd/coordd/spec"
)

// rounds is how many chunks each row alternates between the peer and
// coordd (COORDD_PEERS_ROUNDS overrides it).
func rounds() int {
	if v := os.Getenv("COORDD_PEERS_ROUNDS"); v != "" {
		var n int
		if _, err := fmt.Sscan(v, &n); err == nil && n > 0 {
			return n
		}
	}
	return 4
}

// scale divides every row's work (COORDD_PEERS_SCALE=10 runs a tenth), for
// a quick check that the harness works.
func scale(n int) int {
	if v := os.Getenv("COORDD_PEERS_SCALE"); v != "" {
		var d int
		if _, err := fmt.Sscan(v, &d); err == nil && d > 1 {
			return max(n/d, 1)
		}
	}
	return n
}

// side is one contender of a row: its name and the work it did.
type side struct {
	name string
	ops  int           // operations done (pairs, jobs)
	took time.Duration // their total time
}

func (s side) rate() float64 {
	if s.took <= 0 {
		return 0
	}
	return float64(s.ops) / s.took.Seconds()
}

// row is one line of the table.
type row struct {
	measure string
	unit    string
	peers   []side // the first is the one the target names
	coordd  side
	target  float64 // coordd/peers[0] to reach
	note    string
	// latency rows compare one delay per side (side.took, ops 1): the
	// table prints milliseconds, the ratio is peer/coordd (above 1 when
	// coordd is quicker), and the target is coordd's own bound, limit.
	latency bool
	limit   time.Duration
}

// result collects the rows as they finish.
var (
	resultMu sync.Mutex
	results  []row
)

func record(r row) {
	resultMu.Lock()
	defer resultMu.Unlock()
	results = append(results, r)
}

// printTable writes the table in Markdown, as docs/benchmarks.md shows it.
func printTable() {
	resultMu.Lock()
	defer resultMu.Unlock()
	if len(results) == 0 {
		return
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\n| measure | peer | peer rate | coordd | coordd/peer | target | met |\n|---|---|---|---|---|---|---|\n")
	for _, r := range results {
		if r.latency {
			fmt.Fprint(&b, latencyLine(r))
			continue
		}
		first := r.peers[0]
		var others []string
		for _, p := range r.peers[1:] {
			others = append(others, fmt.Sprintf("%s %s", p.name, human(p.rate())))
		}
		peer := fmt.Sprintf("%s %s", human(first.rate()), r.unit)
		if len(others) > 0 {
			peer += " (" + strings.Join(others, "; ") + ")"
		}
		ratio := r.coordd.rate() / first.rate()
		met := "yes"
		if ratio < r.target {
			met = "**no**"
		}
		name := r.coordd.name
		if r.note != "" {
			name += ", " + r.note
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s: %s | %.2fx | >= %.1fx | %s |\n",
			r.measure, first.name, peer, name, human(r.coordd.rate()), ratio, r.target, met)
	}
	fmt.Print(b.String())
}

// latencyLine is a latency row of the table.
func latencyLine(r row) string {
	ms := func(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond)) }
	var peers []string
	for _, p := range r.peers {
		peers = append(peers, fmt.Sprintf("%s %s", p.name, ms(p.took)))
	}
	met := "yes"
	if r.coordd.took > r.limit {
		met = "**no**"
	}
	first := r.peers[0]
	return fmt.Sprintf("| %s | %s | %s | %s: %s | %.2fx | <= %s | %s |\n",
		r.measure, first.name, strings.Join(peers, "; "), r.coordd.name, ms(r.coordd.took),
		float64(first.took)/float64(max(r.coordd.took, 1)), ms(r.limit), met)
}

// human prints a rate with thousands separators.
func human(v float64) string {
	s := fmt.Sprintf("%.0f", v)
	var out []byte
	for i := range len(s) {
		if i > 0 && (len(s)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, s[i])
	}
	return string(out)
}

// alternate runs each contender's chunk once per round, rotating who goes
// first, and adds up their times. chunk runs one chunk and returns the
// operations it did and the time they took (setup excluded).
func alternate(b *testing.B, names []string, chunk func(i, round int) (int, time.Duration)) []side {
	b.Helper()
	out := make([]side, len(names))
	for i, n := range names {
		out[i].name = n
	}
	for r := range rounds() {
		for k := range names {
			i := (k + r) % len(names)
			ops, took := chunk(i, r)
			out[i].ops += ops
			out[i].took += took
		}
	}
	return out
}

// coorddEngine loads specText (one file), applies it and returns the
// applied engine; the backends stay open until the benchmark ends.
func coorddEngine(b *testing.B, specText string) *reconcile.Engine {
	b.Helper()
	dir := b.TempDir()
	path := filepath.Join(dir, "coordd.yaml")
	if err := os.WriteFile(path, []byte(specText), 0o600); err != nil {
		b.Fatal(err)
	}
	s, err := spec.Load(path, spec.LoadOptions{DataDir: dir})
	if err != nil {
		b.Fatalf("spec: %v", err)
	}
	ctx := context.Background()
	e, err := reconcile.Open(ctx, s, reconcile.OpenOptions{Version: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { e.Close() })
	if _, err := e.Apply(ctx, reconcile.Options{}, ""); err != nil {
		b.Fatalf("apply: %v", err)
	}
	return e
}

// backendOf is the engine's only backend.
func backendOf(b *testing.B, e *reconcile.Engine) backends.Backend {
	b.Helper()
	for _, be := range e.Backends {
		return be
	}
	b.Fatal("no backend")
	return nil
}

// TestMain prints the table once every benchmark has run.
func TestMain(m *testing.M) {
	code := m.Run()
	printTable()
	os.Exit(code)
}
