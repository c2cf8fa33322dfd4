package sqlstore

import (
	"context"
	"database/sql"
	"regexp"
	"strconv"
	"strings"
	"sync"
)

// Flavor is the family of SQL a store speaks where the SQL stores differ in
// syntax rather than in meaning: upserts, RETURNING, row locks.
type Flavor int

const (
	// Standard is INSERT ... ON CONFLICT ... DO UPDATE ... WHERE and
	// RETURNING: SQLite (3.35 and later) and PostgreSQL.
	Standard Flavor = iota
	// MySQL is INSERT ... ON DUPLICATE KEY UPDATE, without RETURNING:
	// MySQL and MariaDB.
	MySQL
)

// Query is one named statement of the shared code: written once where the
// stores agree, and once more for MySQL where its syntax differs. A text
// may hold these tokens, which Dialect.Text replaces:
//
//	{p}name  the table name, with the store's prefix or schema, quoted
//	{now}    the store's clock: integer microseconds since the Unix epoch,
//	         one instant for the whole statement
//	{next:c} the next value of counter column c (a fencing number, a
//	         term): one above it and, with Dialect.ClockCounters, at least
//	         the store's clock in µs, so that a counter never repeats after
//	         a failover to a replica that missed its last bumps (the new
//	         server's clock is past every number handed out before)
//	{lock}   " FOR UPDATE" where a write transaction locks the rows it
//	         reads first; nothing on SQLite, whose write transaction holds
//	         the whole file
//	{share}  the same in share mode (" FOR SHARE", " LOCK IN SHARE MODE"):
//	         other readers in share mode go on, writers of the row wait
//	{skiplocked}
//	         {lock} that passes over rows another transaction holds
//	         (" FOR UPDATE SKIP LOCKED"); nothing on SQLite
//	{index name}
//	         after a table (and its alias): the index to read it by, where
//	         the store names one (" INDEXED BY name", " FORCE INDEX
//	         (name)"); nothing where the planner picks
//	{held}   a claimed job's owner still holds it: "queue = ? AND owner =
//	         ? AND state = 'running'" (two parameters), after a condition
//	         on its id; written so that only the id can be an index
//	         condition where Dialect.HeldByID says so
//	?        a bound parameter ($1, $2, ... on PostgreSQL)
//	{in}     a list of values after a column: "x {in}" is true when x is
//	         one of them (Dialect.In)
//	`name`   an identifier the database reserves (partition), quoted as
//	         the dialect quotes identifiers
//	{jsontrue col key}  true when member key of the JSON object in column
//	         col is true, false otherwise, never NULL (Dialect.JSONTrue)
//	{jsonint col key}   the integer member key of the JSON object in
//	         column col, NULL when absent or not an integer
//	         (Dialect.JSONInt)
//
// Values are always bound parameters; only validated identifiers are
// spliced into the text.
type Query struct {
	// SQL is the text for every flavor, or for Standard where MySQL is set.
	SQL string
	// MySQL is the MySQL flavor's text where it differs from SQL.
	MySQL string
}

// Dialect is what a SQL store tells the shared code about its SQL.
type Dialect struct {
	// Flavor picks a Query's text.
	Flavor Flavor
	// Now is the clock expression {now} stands for.
	Now string
	// Lock is what {lock} stands for.
	Lock string
	// Share is what {share} stands for.
	Share string
	// Index renders {index name}; nil renders nothing.
	Index func(name string) string
	// Table turns a table's base name into the name to write in SQL
	// ({p}name): prefixed, schema-qualified and quoted as the store needs.
	Table func(name string) string
	// HeldByID renders {held} so that the planner cannot use it to pick
	// an index (IS NOT DISTINCT FROM rather than =): PostgreSQL's
	// statistics of a queue table, gathered while it was nearly empty,
	// make a scan of every running job of the queue (queue_jobs_expiry,
	// queue_jobs_state) look as cheap as the primary key, and a statement
	// for one job then reads them all.
	HeldByID bool
	// ClockCounters: {next:c} is at least the store's clock in µs (a
	// server with replicas that a failover may put behind); without it,
	// c + 1 (SQLite: one file, no replica).
	ClockCounters bool
	// Numbered: parameters are $1, $2, ... instead of ?.
	Numbered bool
	// DoubleQuoted: identifiers are quoted "so" rather than `so`.
	DoubleQuoted bool
	// List binds a whole list of values as one parameter, for a store
	// whose SQL can expand one (SQLite's json_each, PostgreSQL's arrays):
	// it returns what {in} stands for and the argument. Nil: {in} is
	// IN (?, ?, ...), one parameter per value, at most ListChunk values
	// per statement.
	List func(values any) (text string, arg any, err error)
	// ListChunk bounds the values of one {in} without List.
	ListChunk int
	// IsDuplicate reports a duplicate-key error of the driver.
	IsDuplicate func(error) bool
	// IsNoSuchTable reports an error naming a table the store lacks (a
	// store migrated by an older binary).
	IsNoSuchTable func(error) bool
	// JSONTrue is what {jsontrue col key} stands for: SQL that is true
	// when member key of the JSON object in column col is true, and false
	// (never NULL) when it is anything else or absent. The JSON functions
	// are the database's own, even within a flavor. Neither may use a ?
	// operator: Render numbers every ? outside quotes.
	JSONTrue func(col, key string) string
	// JSONInt is what {jsonint col key} stands for: SQL for the integer
	// member key of the JSON object in column col, NULL when it is absent
	// or not an integer.
	JSONInt func(col, key string) string
	// StorableText turns a text the store writes as given (a run's error,
	// a skip reason) into one its text columns accept, where the database
	// refuses some strings (invalid UTF-8, NUL). Nil: stored as is.
	StorableText func(string) string
	// BoolAsInt sends a bound bool as the integer 0 or 1: the shared code
	// binds bools to integer columns (flags), which SQLite and MySQL
	// convert and PostgreSQL's strict types refuse.
	BoolAsInt bool

	texts sync.Map // template -> rendered text
}

// Args returns the arguments of a statement as the database takes them
// (BoolAsInt); args itself when nothing changes.
func (d *Dialect) Args(args []any) []any {
	if !d.BoolAsInt {
		return args
	}
	var out []any
	for i, a := range args {
		b, ok := a.(bool)
		if !ok {
			continue
		}
		if out == nil {
			out = append([]any(nil), args...)
		}
		out[i] = int64(0)
		if b {
			out[i] = int64(1)
		}
	}
	if out == nil {
		return args
	}
	return out
}

// maxCachedText bounds the templates Text caches: the constants, not the
// multi-row statements built for one batch size.
const maxCachedText = 4096

// Text returns q's text for this dialect with its tokens replaced.
func (d *Dialect) Text(q Query) string { return d.Render(d.Pick(q)) }

// Pick returns q's template for this dialect's flavor, tokens in place: to
// build a longer statement (a multi-row VALUES) that is rendered once.
func (d *Dialect) Pick(q Query) string {
	if d.Flavor == MySQL && q.MySQL != "" {
		return q.MySQL
	}
	return q.SQL
}

// tableToken matches {p}name, indexToken {index name}.
var (
	tableToken = regexp.MustCompile(`\{p\}([A-Za-z0-9_]+)`)
	indexToken = regexp.MustCompile(`\{index ([A-Za-z0-9_]+)\}`)
)

// Render replaces the tokens of a template (see Query), caching the result
// for templates of constant size.
func (d *Dialect) Render(t string) string {
	if v, ok := d.texts.Load(t); ok {
		return v.(string)
	}
	out := tableToken.ReplaceAllStringFunc(t, func(m string) string { return d.Table(m[len("{p}"):]) })
	if strings.Contains(out, "{next:") {
		out = nextToken.ReplaceAllStringFunc(out, func(m string) string {
			col := m[len("{next:") : len(m)-1]
			if !d.ClockCounters {
				return col + " + 1"
			}
			return "GREATEST(" + col + " + 1, {now})"
		})
	}
	if strings.Contains(out, "{held}") {
		held := heldText
		if d.HeldByID {
			held = heldByIDText
		}
		out = strings.ReplaceAll(out, "{held}", held)
	}
	out = strings.ReplaceAll(out, "{now}", d.Now)
	out = strings.ReplaceAll(out, "{lock}", d.Lock)
	if strings.Contains(out, "{json") {
		out = d.renderJSON(out)
	}
	out = strings.ReplaceAll(out, "{share}", d.Share)
	if strings.Contains(out, "{skiplocked}") {
		skip := ""
		if d.Lock != "" {
			skip = d.Lock + " SKIP LOCKED"
		}
		out = strings.ReplaceAll(out, "{skiplocked}", skip)
	}
	out = indexToken.ReplaceAllStringFunc(out, func(m string) string {
		if d.Index == nil {
			return ""
		}
		return d.Index(m[len("{index ") : len(m)-1])
	})
	if d.Numbered || d.DoubleQuoted {
		out = d.rewrite(out)
	}
	if len(t) <= maxCachedText {
		d.texts.Store(t, out)
	}
	return out
}

// NextCounter is {next:c} computed in Go, for a counter read under its
// row lock with the store's clock now: last + 1, and at least now with
// ClockCounters.
func (d *Dialect) NextCounter(last, now int64) int64 {
	if d.ClockCounters {
		return max(last+1, now)
	}
	return last + 1
}

// {held} rendered, with and without Dialect.HeldByID. Both take the
// queue and the owner, in that order; neither is ever NULL for a job a
// claim returned, so the two say the same.
const (
	heldText     = `queue = ? AND owner = ? AND state = 'running'`
	heldByIDText = `(queue, owner, state) IS NOT DISTINCT FROM (?, ?, 'running')`
)

// nextToken matches {next:col}.
var nextToken = regexp.MustCompile(`\{next:[A-Za-z0-9_.@]+\}`)

// jsonToken matches {jsontrue col key} and {jsonint col key}.
var jsonToken = regexp.MustCompile(`\{json(true|int) ([A-Za-z0-9_.]+) ([A-Za-z0-9_]+)\}`)

// renderJSON replaces the JSON tokens; one the dialect cannot render stays,
// and the database refuses the statement.
func (d *Dialect) renderJSON(t string) string {
	return jsonToken.ReplaceAllStringFunc(t, func(m string) string {
		p := jsonToken.FindStringSubmatch(m)
		switch {
		case p[1] == "true" && d.JSONTrue != nil:
			return d.JSONTrue(p[2], p[3])
		case p[1] == "int" && d.JSONInt != nil:
			return d.JSONInt(p[2], p[3])
		}
		return m
	})
}

// rewrite numbers each ? outside quotes and comments as $1, $2, ... in
// order (Numbered), and turns `ident` into "ident" (DoubleQuoted).
func (d *Dialect) rewrite(s string) string {
	var b strings.Builder
	b.Grow(len(s) + 16)
	n := 0
	var quote byte // the open quote, 0 outside one
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quote != 0:
			if c == quote {
				quote = 0
				if c == '`' && d.DoubleQuoted {
					c = '"'
				}
			}
		case c == '\'' || c == '"' || c == '`':
			quote = c
			if c == '`' && d.DoubleQuoted {
				c = '"'
			}
		case c == '-' && i+1 < len(s) && s[i+1] == '-':
			j := strings.IndexByte(s[i:], '\n')
			if j < 0 {
				j = len(s) - i
			}
			b.WriteString(s[i : i+j])
			i += j - 1
			continue
		case c == '?' && d.Numbered:
			n++
			b.WriteByte('$')
			b.WriteString(strconv.Itoa(n))
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}

// In renders a template holding one {in} for the values vals, and returns
// the text and the arguments: pre, the list, then post. A dialect without
// List binds each value ("IN (?, ?)"); callers split longer lists with
// ListChunks.
func In[T any](d *Dialect, t string, vals []T, pre []any, post ...any) (string, []any, error) {
	args := append([]any(nil), pre...)
	var in string
	if d.List != nil {
		if vals == nil {
			vals = []T{}
		}
		text, arg, err := d.List(vals)
		if err != nil {
			return "", nil, err
		}
		in, args = text, append(args, arg)
	} else {
		in = "IN (" + Placeholders(len(vals)) + ")"
		for _, v := range vals {
			args = append(args, v)
		}
	}
	return d.Render(strings.Replace(t, "{in}", in, 1)), append(args, post...), nil
}

// QueryIn runs q, whose text holds one {in}, for the values vals (In),
// with no other argument.
func QueryIn[T any](ctx context.Context, c Conn, d *Dialect, q Query, vals []T) (*sql.Rows, error) {
	text, args, err := In(d, d.Pick(q), vals, nil)
	if err != nil {
		return nil, err
	}
	return c.Query(ctx, text, args...)
}

// ListChunks splits vals into the lists one {in} takes: all at once with
// List, ListChunk at a time without.
func ListChunks[T any](d *Dialect, vals []T) [][]T {
	if d.List != nil || d.ListChunk <= 0 || len(vals) <= d.ListChunk {
		return [][]T{vals}
	}
	return Chunks(vals, d.ListChunk)
}
