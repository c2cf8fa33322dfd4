package sqlstore

import "testing"

// TestRenderLockAndIndexTokens: {share}, {skiplocked} and {index name}
// render as each store's SQL says, and as nothing where a store has no row
// locks or lets the planner pick.
func TestRenderLockAndIndexTokens(t *testing.T) {
	const tmpl = "SELECT id FROM {p}jobs j{index jobs_ready} WHERE q = ?{share}; SELECT id FROM {p}jobs LIMIT ?{skiplocked}"
	name := func(n string) string { return n }
	for _, c := range []struct {
		what string
		d    *Dialect
		want string
	}{
		{"sqlite", &Dialect{Table: name, Index: func(n string) string { return " INDEXED BY " + n }},
			"SELECT id FROM jobs j INDEXED BY jobs_ready WHERE q = ?; SELECT id FROM jobs LIMIT ?"},
		{"mysql", &Dialect{Flavor: MySQL, Table: func(n string) string { return "p_" + n }, Lock: " FOR UPDATE", Share: " LOCK IN SHARE MODE",
			Index: func(n string) string { return " FORCE INDEX (" + n + ")" }},
			"SELECT id FROM p_jobs j FORCE INDEX (jobs_ready) WHERE q = ? LOCK IN SHARE MODE; SELECT id FROM p_jobs LIMIT ? FOR UPDATE SKIP LOCKED"},
		{"postgres", &Dialect{Table: name, Lock: " FOR UPDATE", Share: " FOR SHARE", Numbered: true},
			"SELECT id FROM jobs j WHERE q = $1 FOR SHARE; SELECT id FROM jobs LIMIT $2 FOR UPDATE SKIP LOCKED"},
	} {
		if got := c.d.Render(tmpl); got != c.want {
			t.Errorf("%s:\n got %q\nwant %q", c.what, got, c.want)
		}
	}
}

// TestRenderHeldToken: {held} takes the queue and the owner as its two
// parameters in both forms, in that order, after the id's.
func TestRenderHeldToken(t *testing.T) {
	const tmpl = "DELETE FROM {p}jobs WHERE id = ? AND {held}"
	name := func(n string) string { return n }
	for _, c := range []struct {
		what string
		d    *Dialect
		want string
	}{
		{"plain", &Dialect{Table: name}, "DELETE FROM jobs WHERE id = ? AND queue = ? AND owner = ? AND state = 'running'"},
		{"by id", &Dialect{Table: name, HeldByID: true, Numbered: true},
			"DELETE FROM jobs WHERE id = $1 AND (queue, owner, state) IS NOT DISTINCT FROM ($2, $3, 'running')"},
	} {
		if got := c.d.Render(tmpl); got != c.want {
			t.Errorf("%s:\n got %q\nwant %q", c.what, got, c.want)
		}
	}
}
