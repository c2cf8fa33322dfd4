package reconcile_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coordd/coordd/internal/benchutil"
	"github.com/coordd/coordd/reconcile"
	"github.com/coordd/coordd/spec"
)

// genSpec generates a spec of n objects (40% semaphores, 30% cron tasks,
// 30% queues) on one SQLite backend. Objects below changed get a different
// limit, schedule or partition count.
func genSpec(dbPath string, n, changed int) map[string][]byte {
	var b strings.Builder
	fmt.Fprintf(&b, "backends:\n  db: {type: sqlite, path: %q}\n", dbPath)
	nsem, ncron := n*4/10, n*3/10
	nq := n - nsem - ncron
	k := 0
	bump := func() int {
		k++
		if k <= changed {
			return 1
		}
		return 0
	}
	b.WriteString("semaphores:\n")
	for i := 0; i < nsem; i++ {
		fmt.Fprintf(&b, "  sem-%05d: {limit: %d, lease: 1m}\n", i, 2+bump())
	}
	b.WriteString("cron:\n")
	for i := 0; i < ncron; i++ {
		fmt.Fprintf(&b, "  task-%05d: {schedule: \"%d * * * *\", command: [\"/bin/true\"]}\n", i, i%59+bump())
	}
	b.WriteString("queues:\n")
	for i := 0; i < nq; i++ {
		fmt.Fprintf(&b, "  q-%05d: {partitions: %d}\n", i, 2+bump())
	}
	return map[string][]byte{"bench.yaml": []byte(b.String())}
}

func benchEngine(b *testing.B, files map[string][]byte, readOnly bool) *reconcile.Engine {
	b.Helper()
	s, err := spec.LoadFiles(files, spec.LoadOptions{DataDir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	e, err := reconcile.Open(context.Background(), s, reconcile.OpenOptions{ReadOnly: readOnly, Version: "0.1.0", Host: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { e.Close() })
	return e
}

// BenchmarkReconcile10k measures, on a generated spec of 10,000 objects on
// the embedded store: apply from empty, the no-op plan afterwards, and a
// plan after 100 changes. Targets: no-op plan <= 1 s, apply <= 10 s.
//
//	go test -run '^$' -bench Reconcile10k -benchtime 1x ./reconcile/
func BenchmarkReconcile10k(b *testing.B) {
	const n = 10000
	ctx := context.Background()
	for i := 0; i < b.N; i++ {
		dir := b.TempDir()
		dbPath := filepath.Join(dir, "bench.db")
		files := genSpec(dbPath, n, 0)

		e := benchEngine(b, files, false)
		start := time.Now()
		res, err := e.Apply(ctx, reconcile.Options{}, "")
		if err != nil {
			b.Fatal(err)
		}
		applyDur := time.Since(start)
		if res.Plan.Summary.Add != n {
			b.Fatalf("applied %d, want %d", res.Plan.Summary.Add, n)
		}
		rt := benchutil.RawRoundTrip(b, e.Backends["db"])

		ro := benchEngine(b, files, true)
		start = time.Now()
		p, err := ro.Plan(ctx, reconcile.Options{})
		if err != nil {
			b.Fatal(err)
		}
		noop := time.Since(start)
		if p.HasChanges() {
			b.Fatalf("no-op plan has changes: %s", p.SummaryLine())
		}

		changed := benchEngine(b, genSpec(dbPath, n, 100), true)
		start = time.Now()
		p, err = changed.Plan(ctx, reconcile.Options{})
		if err != nil {
			b.Fatal(err)
		}
		plan100 := time.Since(start)
		if p.Summary.Change != 100 {
			b.Fatalf("plan after 100 changes: %s", p.SummaryLine())
		}

		b.ReportMetric(applyDur.Seconds(), "apply-s")
		b.ReportMetric(noop.Seconds(), "noop-plan-s")
		b.ReportMetric(plan100.Seconds(), "plan-100-changes-s")
		b.ReportMetric(float64(rt.Microseconds()), "raw-roundtrip-us")
	}
}
