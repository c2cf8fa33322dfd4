package spec

import (
	"errors"
	"fmt"
	"math/big"
	"slices"
	"strings"
	"time"
	_ "time/tzdata" // timezones validate the same on hosts without a zoneinfo database

	"github.com/robfig/cron/v3"
)

var cronParser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// neverRef is the fixed instant from which a schedule must fire at least
// once (robfig searches five years ahead), so that "0 0 30 2 *" is rejected
// without making validation depend on the current time.
var neverRef = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

// ParseSchedule parses a cron expression evaluated in timezone ("" = UTC).
// It accepts five fields, six with a leading seconds field (which Load
// refuses: secondsField; applied tasks may still have one), the @yearly,
// @annually, @monthly, @weekly, @daily, @midnight and @hourly descriptors,
// and "@every D", whose occurrences are the multiples of D since the Unix
// epoch so that missed runs can be counted from stored times alone.
func ParseSchedule(expr, timezone string) (Schedule, error) {
	loc, err := loadLocation(timezone)
	if err != nil {
		return nil, err
	}
	return parseScheduleIn(expr, loc)
}

// secondsField explains why a spec's schedule of six fields is refused,
// or is "" for any other. A sixth field is read as a leading seconds
// field (Quartz, Spring), which a crontab reader does not expect: "*/5 * *
// * * *" would run every five seconds, and a crontab line pasted with its
// user or command field runs at times nobody meant. ParseSchedule itself
// still reads six fields, so that tasks applied before Load refused them
// keep running until their spec is fixed.
func secondsField(expr string) string {
	f := strings.Fields(expr)
	if len(f) != 6 || strings.HasPrefix(f[0], "@") {
		return ""
	}
	return fmt.Sprintf("%s has 6 fields; a schedule has 5 (minute hour day-of-month month day-of-week), and the first of 6, %s, would be a seconds field, which coordd does not take: drop it (%s runs at second 0), or write \"@every D\" for an interval under a minute",
		quote(expr), quote(f[0]), quote(strings.Join(f[1:], " ")))
}

// loadLocation resolves an IANA zone. "Local" is refused because the
// servers of one group may not agree on it.
func loadLocation(tz string) (*time.Location, error) {
	switch tz {
	case "":
		return time.UTC, nil
	case "Local":
		return nil, errors.New(`"Local" is not allowed: servers may disagree on it; name an IANA zone such as "Europe/Paris" or "UTC"`)
	}
	loc, err := time.LoadLocation(tz)
	if err != nil {
		return nil, fmt.Errorf("unknown time zone %s: use an IANA name such as \"Asia/Tokyo\" or \"UTC\"", quote(tz))
	}
	return loc, nil
}

func parseScheduleIn(expr string, loc *time.Location) (s Schedule, err error) {
	fields := strings.Fields(expr)
	if len(fields) == 0 {
		return nil, errors.New("schedule is empty")
	}
	if f := fields[0]; strings.HasPrefix(f, "TZ=") || strings.HasPrefix(f, "CRON_TZ=") {
		return nil, errors.New("TZ= and CRON_TZ= prefixes are not allowed; set the timezone field instead")
	}
	if fields[0] == "@every" {
		if len(fields) != 2 {
			return nil, errors.New(`"@every" takes one duration, e.g. "@every 15m"`)
		}
		d, err := time.ParseDuration(fields[1])
		if err != nil {
			return nil, fmt.Errorf("@every: invalid duration %s: use Go syntax such as 90s or 1h30m", quote(fields[1]))
		}
		if d < time.Second {
			return nil, errors.New("@every: the interval must be at least 1s")
		}
		return &everySchedule{expr: expr, d: d, loc: loc}, nil
	}
	defer func() {
		// The parser is third-party; never let a malformed expression take
		// the process down.
		if r := recover(); r != nil {
			s, err = nil, fmt.Errorf("invalid cron expression %s", quote(expr))
		}
	}()
	cs, err := cronParser.Parse(expr)
	if err != nil {
		return nil, fmt.Errorf("invalid cron expression %s: %v", quote(expr), err)
	}
	spec, ok := cs.(*cron.SpecSchedule)
	if !ok {
		return nil, fmt.Errorf("invalid cron expression %s", quote(expr))
	}
	spec.Location = loc
	if spec.Next(neverRef).IsZero() {
		return nil, fmt.Errorf("cron expression %s never fires", quote(expr))
	}
	cs2 := &cronSchedule{expr: expr, s: spec, loc: loc}
	if loc != time.UTC && !absoluteHours(fields) {
		wall := *spec
		wall.Location = time.UTC
		cs2.wall = &wall
	}
	return cs2, nil
}

// absoluteHours reports whether a schedule's hour field runs every hour
// ("*", "?", a step over all hours such as "*/2", or @hourly): such
// schedules follow absolute time across daylight saving changes.
// Descriptors other than @hourly have a fixed hour.
func absoluteHours(fields []string) bool {
	var hour string
	switch {
	case strings.HasPrefix(fields[0], "@"):
		return fields[0] == "@hourly"
	case len(fields) == 5:
		hour = fields[1]
	case len(fields) == 6:
		hour = fields[2]
	default:
		return true
	}
	return strings.HasPrefix(hour, "*") || strings.HasPrefix(hour, "?")
}

// cronSchedule is a robfig schedule pinned to the task's location.
//
// A schedule with a fixed hour field (wall is set) is evaluated on the wall
// clock instead, so that daylight saving changes neither skip nor repeat a
// run: the next matching wall-clock time is computed as if the zone had no
// transitions, then mapped to an instant by wallInstant. A wall time that
// occurs twice (fall back) maps to its first instant, so the second one does
// not run; a wall time that does not exist (spring forward) maps to the first
// valid instant after it, so it runs once, late. Schedules whose hour field
// covers every hour (and @every) follow absolute time and use robfig as is.
type cronSchedule struct {
	expr string
	s    *cron.SpecSchedule
	loc  *time.Location
	wall *cron.SpecSchedule // s evaluated in UTC as wall-clock time; nil: absolute
}

// maxWallSteps bounds the wall-clock search in Next: a gap or a repeated
// hour skips at most a few hours' worth of matches.
const maxWallSteps = 10000

func (c *cronSchedule) Next(t time.Time) time.Time {
	if c.wall == nil {
		n := c.s.Next(t)
		if n.IsZero() {
			return n
		}
		return n.In(c.loc)
	}
	w := wallClock(t.In(c.loc))
	for range maxWallSteps {
		w = c.wall.Next(w)
		if w.IsZero() {
			return w
		}
		if n := wallInstant(w, c.loc); n.After(t) {
			return n
		}
	}
	return time.Time{}
}

// wallClock returns t's wall-clock reading as a UTC time.
func wallClock(t time.Time) time.Time {
	y, mo, d := t.Date()
	h, mi, s := t.Clock()
	return time.Date(y, mo, d, h, mi, s, t.Nanosecond(), time.UTC)
}

// wallInstant maps a wall-clock reading w (a UTC time) in loc to an instant:
// the earliest instant that reads w, or, when none does (the clocks jumped
// over it), the first instant after the jump.
func wallInstant(w time.Time, loc *time.Location) time.Time {
	// Any transition near w is visible from the offsets a day around it.
	var offs []int
	for _, d := range []time.Duration{-24 * time.Hour, 0, 24 * time.Hour} {
		_, off := w.Add(d).In(loc).Zone()
		if !slices.Contains(offs, off) {
			offs = append(offs, off)
		}
	}
	var best time.Time
	for _, off := range offs {
		i := w.Add(-time.Duration(off) * time.Second).In(loc)
		if wallClock(i).Equal(w) && (best.IsZero() || i.Before(best)) {
			best = i
		}
	}
	if !best.IsZero() {
		return best
	}
	for _, off := range offs {
		i := w.Add(-time.Duration(off) * time.Second).In(loc)
		start, _ := i.ZoneBounds()
		if !start.IsZero() && wallClock(start).After(w) && (best.IsZero() || start.Before(best)) {
			best = start
		}
	}
	if best.IsZero() { // cannot happen with real zone data; stay safe
		return time.Date(w.Year(), w.Month(), w.Day(), w.Hour(), w.Minute(), w.Second(), w.Nanosecond(), loc)
	}
	return best
}

func (c *cronSchedule) String() string { return c.expr }

// everySchedule fires at every multiple of d since the Unix epoch. Unlike
// robfig's @every, which counts from "now", this gives every server the same
// occurrences and makes missed ones countable.
type everySchedule struct {
	expr string
	d    time.Duration
	loc  *time.Location
}

var nsPerSec = big.NewInt(int64(time.Second))

func (e *everySchedule) Next(t time.Time) time.Time {
	// ns since the epoch does not fit in an int64 past year 2262; use big
	// integers so that any time.Time works.
	ns := new(big.Int).Mul(big.NewInt(t.Unix()), nsPerSec)
	ns.Add(ns, big.NewInt(int64(t.Nanosecond())))
	d := big.NewInt(int64(e.d))
	q := new(big.Int).Div(ns, d) // Euclidean: floor for positive d
	q.Add(q, big.NewInt(1))
	q.Mul(q, d)
	sec, rem := new(big.Int).DivMod(q, nsPerSec, new(big.Int))
	if !sec.IsInt64() {
		return time.Time{}
	}
	return time.Unix(sec.Int64(), rem.Int64()).In(e.loc)
}

func (e *everySchedule) String() string { return e.expr }
