package sqlstore

import "testing"

func TestRenderReplacesTokens(t *testing.T) {
	d := &Dialect{
		Now:      "NOW_US",
		Lock:     " FOR UPDATE",
		Table:    func(n string) string { return `"s"."x_` + n + `"` },
		Numbered: true, DoubleQuoted: true,
	}
	got := d.Render("SELECT a, `partition` FROM {p}leader WHERE b = ? AND c > {now}{lock} -- what? 'not ?'\nAND d = '?' AND e = ?")
	want := `SELECT a, "partition" FROM "s"."x_leader" WHERE b = $1 AND c > NOW_US FOR UPDATE -- what? 'not ?'
AND d = '?' AND e = $2`
	if got != want {
		t.Fatalf("Render:\n got %s\nwant %s", got, want)
	}
}

func TestTextPicksTheFlavor(t *testing.T) {
	q := Query{SQL: "standard ?", MySQL: "mysql ?"}
	for _, tc := range []struct {
		d    *Dialect
		want string
	}{
		{&Dialect{Flavor: Standard, Table: func(n string) string { return n }}, "standard ?"},
		{&Dialect{Flavor: Standard, Table: func(n string) string { return n }, Numbered: true}, "standard $1"},
		{&Dialect{Flavor: MySQL, Table: func(n string) string { return n }}, "mysql ?"},
	} {
		if got := tc.d.Text(q); got != tc.want {
			t.Errorf("Text = %q, want %q", got, tc.want)
		}
	}
	if got := (&Dialect{Flavor: MySQL, Table: func(n string) string { return n }}).Text(Query{SQL: "only"}); got != "only" {
		t.Errorf("a query without a MySQL text: %q", got)
	}
}

func TestNextCounter(t *testing.T) {
	tab := func(n string) string { return n }
	plain := &Dialect{Now: "NOW_US", Table: tab}
	if got := plain.Render("SET fencing = {next:fencing}"); got != "SET fencing = fencing + 1" {
		t.Errorf("without clock counters: %q", got)
	}
	clock := &Dialect{Now: "NOW_US", Table: tab, ClockCounters: true}
	if got := clock.Render("SET term = {next:l.term}"); got != "SET term = GREATEST(l.term + 1, NOW_US)" {
		t.Errorf("with clock counters: %q", got)
	}
}
