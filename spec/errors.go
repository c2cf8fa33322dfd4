package spec

import (
	"errors"
	"fmt"
	"sort"
	"strings"
)

// Sentinels for the limits Load enforces; errors.Is finds them in the
// Errors that Load returns.
var (
	// ErrNotRegular: a spec file is a FIFO, a device, a socket, or a
	// symlink to one. Reading such a file can hang or never end.
	ErrNotRegular = errors.New("not a regular file")
	// ErrTooLarge: a spec file, or all of them together, exceed
	// MaxFileSize or MaxTotalSize.
	ErrTooLarge = errors.New("spec too large")
	// ErrTooManyObjects: the spec declares more than MaxObjects objects.
	ErrTooManyObjects = errors.New("too many objects")
	// ErrTooManyErrors: more than MaxErrors problems were found; the last
	// entry of the Errors says how many more.
	ErrTooManyErrors = errors.New("too many errors")
)

// Error is one problem in a spec, located at the YAML node that caused it so
// that editors and CI logs can jump straight to it.
type Error struct {
	Pos Pos
	// Address names what is wrong, e.g. "semaphore.reindex.limit",
	// "backends.db.dsn" or "cluster.backend". It is empty for problems that
	// belong to no field, such as invalid YAML.
	Address string
	Msg     string
	// Err is a sentinel for the limits above, for a file that could not
	// be read in time (ErrReadTimeout, or the caller's context error) or
	// does not exist (fs.ErrNotExist); nil for other problems.
	Err error
	// more is the number of errors the summary entry stands for.
	more int
}

// Unwrap returns the sentinel, if any.
func (e *Error) Unwrap() error { return e.Err }

// Error formats the problem as "FILE:LINE:COL: ADDRESS: MSG".
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.Pos.String())
	b.WriteString(": ")
	if e.Address != "" {
		b.WriteString(e.Address)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Errors lists every problem found in a spec, sorted by file, line and
// column, so that one run of validate shows them all.
type Errors []*Error

// Error prints one problem per line.
func (e Errors) Error() string {
	lines := make([]string, len(e))
	for i, err := range e {
		lines[i] = err.Error()
	}
	return strings.Join(lines, "\n")
}

// Count is the number of problems found: the entries, plus those that the
// closing "... and N more errors" entry stands for.
func (e Errors) Count() int {
	n := len(e)
	for _, err := range e {
		if err.more > 0 {
			n += err.more - 1
		}
	}
	return n
}

// Unwrap lets errors.As find the individual *Error values.
func (e Errors) Unwrap() []error {
	out := make([]error, len(e))
	for i, err := range e {
		out[i] = err
	}
	return out
}

// posLess orders positions by file, line and column.
func posLess(a, b Pos) bool {
	if a.File != b.File {
		return a.File < b.File
	}
	if a.Line != b.Line {
		return a.Line < b.Line
	}
	return a.Col < b.Col
}

// sortErrors orders errors by position and drops exact duplicates, which
// can arise when one bad node is reachable from two checks.
func sortErrors(errs Errors) Errors {
	sort.SliceStable(errs, func(i, j int) bool { return posLess(errs[i].Pos, errs[j].Pos) })
	out := errs[:0]
	for i, e := range errs {
		if i > 0 && *e == *errs[i-1] {
			continue
		}
		out = append(out, e)
	}
	return out
}

// errorList collects a load's errors and keeps only the MaxErrors first by
// position, so that a file with a million mistakes costs neither a million
// errors in memory nor a million lines of output. It sorts and trims
// whenever it holds four times that many, which keeps exactly the first
// ones at a cost linear in the number added.
type errorList struct {
	errs    Errors
	dropped int
	// next is the position of the first error dropped, where the closing
	// summary entry points.
	next Pos
}

func (l *errorList) add(e *Error) {
	l.errs = append(l.errs, e)
	if len(l.errs) >= 4*MaxErrors {
		l.trim()
	}
}

func (l *errorList) trim() {
	l.errs = sortErrors(l.errs)
	if len(l.errs) <= MaxErrors {
		return
	}
	if first := l.errs[MaxErrors].Pos; l.dropped == 0 || posLess(first, l.next) {
		l.next = first
	}
	l.dropped += len(l.errs) - MaxErrors
	l.errs = append(Errors(nil), l.errs[:MaxErrors]...)
}

// result returns the sorted errors, ending with a summary entry when some
// were dropped; nil when there are none.
func (l *errorList) result() Errors {
	if len(l.errs) == 0 {
		return nil
	}
	l.trim()
	out := l.errs
	if l.dropped > 0 {
		out = append(out, &Error{Pos: l.next, Err: ErrTooManyErrors, more: l.dropped,
			Msg: fmt.Sprintf("... and %d more errors (only the first %d are shown; the next is here)", l.dropped, MaxErrors)})
	}
	return out
}

// suggest returns the candidate closest to word when it is close enough to
// be a likely typo, or "".
func suggest(word string, candidates []string) string {
	best, bestD := "", -1
	lw := strings.ToLower(word)
	for _, c := range candidates {
		d := levenshtein(lw, strings.ToLower(c))
		if bestD < 0 || d < bestD {
			best, bestD = c, d
		}
	}
	if bestD < 0 {
		return ""
	}
	limit := 2
	if len(word) <= 3 {
		limit = 1
	}
	if bestD > limit || bestD >= len(word) {
		return ""
	}
	return best
}

// didYouMean formats a suggestion as a message suffix.
func didYouMean(word string, candidates []string) string {
	if s := suggest(word, candidates); s != "" {
		return fmt.Sprintf(" (did you mean %q?)", s)
	}
	return ""
}

func levenshtein(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	if len(ra) > 64 || len(rb) > 64 {
		// Too long to be a typo of a field name; avoid quadratic work.
		return 1 << 20
	}
	prev := make([]int, len(rb)+1)
	cur := make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ra); i++ {
		cur[0] = i
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(rb)]
}

// quote quotes a user-supplied value for a message, shortened so that a
// pasted blob cannot flood the output.
func quote(s string) string {
	const max = 60
	r := []rune(s)
	if len(r) > max {
		return fmt.Sprintf("%q...", string(r[:max]))
	}
	return fmt.Sprintf("%q", s)
}
