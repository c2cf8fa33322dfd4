package chaos

import (
	"fmt"
	"strings"
	"text/tabwriter"
)

// Table renders results as the table `make chaos` prints: one row per
// backend, with the faults injected and the verdict on each guarantee (the
// cron columns sum both tasks).
func Table(results []Result) string {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "backend\tscenario\tfaults\tmid-op\tdaemon kills\tstops\tclient/worker kills\tbackend restarts/failovers\tnet: partition/latency/slow/reset/one-way\toccurrences\tretries\tduplicate starts\tmisses\tmax holders\tstale fencing\tjobs pushed\tredeliveries\tjobs lost\tlost writes: reruns/jobs lost\tverdict\t")
	for _, r := range results {
		n, mid := r.Count("")
		dk, _ := r.Count(DaemonKill)
		ds, _ := r.Count(DaemonStop)
		ck, _ := r.Count(ClientKill)
		wk, _ := r.Count(WorkerKill)
		br, _ := r.Count(BackendRestart)
		for _, k := range []FaultKind{SentinelFailover, RedisFailover} {
			n, _ := r.Count(k)
			br += n
		}
		net := "-"
		if r.Backend != "sqlite" && r.Backend != "redis-sentinel" {
			var ns []string
			for _, k := range NetKinds {
				n, _ := r.Count(k)
				ns = append(ns, fmt.Sprint(n))
			}
			net = strings.Join(ns, "/")
		}
		cr := r.Cron.Add(r.Defaults)
		verdict := "ok"
		if len(r.Violations) > 0 {
			verdict = fmt.Sprintf("%d VIOLATIONS", len(r.Violations))
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%d/%d\t%d\t%s\t%d\t%d\t%d\t%d\t%d/%d\t%d\t%d\t%d\t%d\t%d/%d\t%s\t\n",
			r.Backend, r.Scenario, n, mid, dk, ds, ck, wk, br, net,
			cr.Occurrences, cr.Retries, cr.DuplicateStarts, cr.Misses,
			r.MaxHolders, r.Limit, r.StaleFencing, r.Queue.Pushed, r.Queue.Redeliveries, r.Queue.Lost, cr.RerunAfterLostWrite+r.Queue.RerunAfterLostWrite, r.Queue.LostToFailover, verdict)
	}
	_ = tw.Flush()
	return b.String()
}
