package reconcile_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/backends/mysql"
	"github.com/coordd/coordd/internal/testenv"
	"github.com/coordd/coordd/reconcile"
)

// TestMaxPayloadOverServerLimit: on MySQL a queue whose max_payload is more
// than the server can store (16 MiB with MariaDB's default
// max_allowed_packet of 16 MiB, which holds about 8 MB of payload) is a
// plan error naming the queue and both numbers; apply refuses and creates
// nothing, not even the queue that fits. With max_payload lowered, apply
// goes through.
func TestMaxPayloadOverServerLimit(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	dsn := testenv.MySQLDSN(t)
	specText := func(big string) string {
		return fmt.Sprintf("backends:\n  db: {type: mysql, dsn: %q}\ncluster: {backend: db}\n"+
			"queues:\n  small: {backend: db, max_payload: 1MiB}\n  big: {backend: db, max_payload: %s}\n", dsn, big)
	}
	f.write(specText("16MiB"))

	st, err := mysql.Open(ctx, "probe", dsn, "coordd_", backends.Options{ReadOnly: true, Version: "0.1.0"})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	bound, err := st.MaxPayload(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if bound >= 16<<20 {
		t.Fatalf("the server stores payloads of %d bytes; the test needs max_allowed_packet below 32 MiB", bound)
	}

	p := f.plan(reconcile.Options{})
	want := fmt.Sprintf("queue.big: max_payload %d exceeds the %d bytes", 16<<20, bound)
	if len(p.Blocked) != 1 || !strings.Contains(p.Blocked[0], want) {
		t.Fatalf("plan blocked = %q, want one entry containing %q", p.Blocked, want)
	}
	res, err := f.engine(false).Apply(ctx, reconcile.Options{}, "")
	if !errors.Is(err, reconcile.ErrBlocked) {
		t.Fatalf("apply = %v, want ErrBlocked", err)
	}
	if res.Applied != 0 {
		t.Fatalf("apply applied %d changes, want none", res.Applied)
	}
	qs, err := st.ObserveQueues(ctx, []string{"small", "big"})
	if err != nil || len(qs) != 0 {
		t.Fatalf("queues after a refused apply: %v, %v; want none", qs, err)
	}

	f.write(specText(fmt.Sprint(bound)))
	if p := f.plan(reconcile.Options{}); len(p.Blocked) != 0 {
		t.Fatalf("max_payload at the bound: blocked %q", p.Blocked)
	}
	f.apply(reconcile.Options{})
	if qs, err := st.ObserveQueues(ctx, []string{"big"}); err != nil || qs["big"] == nil || qs["big"].Config.MaxPayload != bound {
		t.Fatalf("queue big after apply: %+v, %v; want max_payload %d", qs["big"], err, bound)
	}
}
