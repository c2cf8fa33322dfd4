package sqlstore

import "testing"

func TestRenderReplacesJSONTokens(t *testing.T) {
	d := &Dialect{
		Table:    func(n string) string { return n },
		JSONTrue: func(col, key string) string { return "TRUE(" + col + "," + key + ")" },
		JSONInt:  func(col, key string) string { return "INT(" + col + "," + key + ")" },
		Numbered: true,
	}
	got := d.Render("SELECT {jsonint def history_limit} FROM {p}cron_tasks t WHERE name = ? AND NOT {jsontrue t.def paused}")
	want := "SELECT INT(def,history_limit) FROM cron_tasks t WHERE name = $1 AND NOT TRUE(t.def,paused)"
	if got != want {
		t.Fatalf("Render:\n got %s\nwant %s", got, want)
	}
	bare := &Dialect{Table: func(n string) string { return n }}
	if got := bare.Render("SELECT {jsontrue def paused}"); got != "SELECT {jsontrue def paused}" {
		t.Fatalf("a dialect without JSONTrue rendered %q; want the token kept, for the database to refuse", got)
	}
}
