package spec

import (
	"strings"
	"testing"
	"time"
)

func mustSchedule(t *testing.T, expr, tz string) Schedule {
	t.Helper()
	s, err := ParseSchedule(expr, tz)
	if err != nil {
		t.Fatalf("ParseSchedule(%q, %q): %v", expr, tz, err)
	}
	return s
}

func utc(s string) time.Time {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		panic(err)
	}
	return t
}

func TestScheduleNext(t *testing.T) {
	cases := []struct {
		expr, tz, from, want string
	}{
		{"0 4 * * *", "", "2026-01-01T00:00:00Z", "2026-01-01T04:00:00Z"},
		{"0 4 * * *", "", "2026-01-01T04:00:00Z", "2026-01-02T04:00:00Z"}, // strictly after
		{"30 0 4 * * *", "UTC", "2026-01-01T00:00:00Z", "2026-01-01T04:00:30Z"},
		{"*/15 * * * * *", "", "2026-01-01T00:00:07Z", "2026-01-01T00:00:15Z"},
		{"@hourly", "", "2026-01-01T10:30:00Z", "2026-01-01T11:00:00Z"},
		{"@daily", "", "2026-01-01T10:30:00Z", "2026-01-02T00:00:00Z"},
		{"@midnight", "", "2026-01-01T10:30:00Z", "2026-01-02T00:00:00Z"},
		{"@weekly", "", "2026-01-01T10:30:00Z", "2026-01-04T00:00:00Z"}, // Sunday
		{"@monthly", "", "2026-01-01T10:30:00Z", "2026-02-01T00:00:00Z"},
		{"@yearly", "", "2026-01-01T10:30:00Z", "2027-01-01T00:00:00Z"},
		{"@annually", "", "2026-01-01T10:30:00Z", "2027-01-01T00:00:00Z"},
		{"0 4 * * *", "Asia/Tokyo", "2026-01-01T00:00:00Z", "2026-01-01T19:00:00Z"},
		{"0 9 * * MON-FRI", "Europe/Paris", "2026-01-02T08:00:00Z", "2026-01-05T08:00:00Z"},
		{"@every 1h", "", "2026-01-01T10:30:00Z", "2026-01-01T11:00:00Z"},
		{"@every 1h", "", "2026-01-01T11:00:00Z", "2026-01-01T12:00:00Z"},
		{"@every 1h", "Asia/Kolkata", "2026-01-01T10:30:00Z", "2026-01-01T11:00:00Z"}, // epoch multiples, not local hours
		{"@every 7m", "", "1970-01-01T00:00:00Z", "1970-01-01T00:07:00Z"},
		{"@every 7m", "", "2025-01-01T00:00:00Z", "2025-01-01T00:05:00Z"}, // 1735689600 = 4132594*420 + 120
		{"@every 7m", "", "2026-01-01T00:00:00Z", "2026-01-01T00:07:00Z"}, // 2026-01-01 is itself a multiple
		{"@every 1500ms", "", "1970-01-01T00:00:02Z", "1970-01-01T00:00:03Z"},
		{"@every 1500ms", "", "1970-01-01T00:00:03Z", "1970-01-01T00:00:04.5Z"},
		{"@every 1h", "", "1969-12-31T22:30:00Z", "1969-12-31T23:00:00Z"},
		{"@every 24h", "", "2600-01-01T12:00:00Z", "2600-01-02T00:00:00Z"},
	}
	for _, tc := range cases {
		s := mustSchedule(t, tc.expr, tc.tz)
		got := s.Next(utc(tc.from))
		if !got.Equal(utc(tc.want)) {
			t.Errorf("%q in %q: Next(%s) = %s, want %s", tc.expr, tc.tz, tc.from, got.UTC().Format(time.RFC3339Nano), tc.want)
		}
		if s.String() != tc.expr {
			t.Errorf("String() = %q, want %q", s.String(), tc.expr)
		}
	}
}

func TestScheduleLocation(t *testing.T) {
	s := mustSchedule(t, "0 4 * * *", "Asia/Tokyo")
	got := s.Next(utc("2026-01-01T00:00:00Z"))
	if got.Location().String() != "Asia/Tokyo" || got.Hour() != 4 {
		t.Errorf("Next = %v, want 04:00 in Asia/Tokyo", got)
	}
	// The input's own location does not matter.
	ny, _ := time.LoadLocation("America/New_York")
	if got2 := s.Next(utc("2026-01-01T00:00:00Z").In(ny)); !got2.Equal(got) {
		t.Errorf("Next depends on the input location: %v vs %v", got2, got)
	}
}

func TestScheduleDST(t *testing.T) {
	// 2026-03-08 02:00 does not exist in New York, and 2026-11-01 01:30
	// happens twice. Walking through both must terminate and advance.
	for _, expr := range []string{"30 2 * * *", "30 1 * * *", "*/20 * * * *", "0 0 * * * *", "@every 45m"} {
		s := mustSchedule(t, expr, "America/New_York")
		for _, start := range []string{"2026-03-07T00:00:00Z", "2026-10-31T00:00:00Z"} {
			at := utc(start)
			for i := 0; i < 500; i++ {
				next := s.Next(at)
				if next.IsZero() || !next.After(at) {
					t.Fatalf("%q: Next(%v) = %v", expr, at, next)
				}
				at = next
			}
		}
	}
	// Fixed hours: the nonexistent 02:30 of the spring-forward day runs
	// once, at the first valid instant after it (03:00 EDT = 07:00Z) ...
	s := mustSchedule(t, "30 2 * * *", "America/New_York")
	got := s.Next(utc("2026-03-08T05:00:00Z"))
	if !got.Equal(utc("2026-03-08T07:00:00Z")) {
		t.Errorf("spring forward: Next = %v, want 2026-03-08T07:00:00Z", got.UTC())
	}
	if got.Location().String() != "America/New_York" || got.Hour() != 3 || got.Minute() != 0 {
		t.Errorf("spring forward: %v, want 03:00 local", got)
	}
	if n := s.Next(got); !n.Equal(utc("2026-03-09T06:30:00Z")) {
		t.Errorf("spring forward: then %v, want the next day's 02:30 EDT", n.UTC())
	}
	// ... and of the repeated 01:30 of the fall-back day only the first runs.
	s = mustSchedule(t, "30 1 * * *", "America/New_York")
	first := s.Next(utc("2026-11-01T04:00:00Z"))
	second := s.Next(first)
	if !first.Equal(utc("2026-11-01T05:30:00Z")) || !second.Equal(utc("2026-11-02T06:30:00Z")) {
		t.Errorf("fall back: %v then %v, want 05:30Z then the next day's 06:30Z", first.UTC(), second.UTC())
	}
	// Starting inside the repeated hour (01:10 EST) does not run the
	// repeated 01:30 either.
	if got := s.Next(utc("2026-11-01T06:10:00Z")); !got.Equal(utc("2026-11-02T06:30:00Z")) {
		t.Errorf("fall back from the second 01:10: %v", got.UTC())
	}
}

func TestScheduleDSTFixedTimes(t *testing.T) {
	cases := []struct {
		expr, tz, from string
		want           []string
	}{
		// New York: 2026-03-08 02:00 EST -> 03:00 EDT; 2026-11-01 02:00 EDT -> 01:00 EST.
		{"30 2 * * *", "America/New_York", "2026-03-07T00:00:00Z",
			[]string{"2026-03-07T07:30:00Z", "2026-03-08T07:00:00Z", "2026-03-09T06:30:00Z"}},
		{"0 2 * * *", "America/New_York", "2026-03-07T12:00:00Z",
			[]string{"2026-03-08T07:00:00Z", "2026-03-09T06:00:00Z"}},
		{"*/20 2 * * *", "America/New_York", "2026-03-08T06:00:00Z", // 02:00, 02:20, 02:40 all map to 03:00: once
			[]string{"2026-03-08T07:00:00Z", "2026-03-09T06:00:00Z"}},
		{"30 1 * * *", "America/New_York", "2026-10-31T00:00:00Z",
			[]string{"2026-10-31T05:30:00Z", "2026-11-01T05:30:00Z", "2026-11-02T06:30:00Z"}},
		{"0 9 * * *", "America/New_York", "2026-10-31T00:00:00Z",
			[]string{"2026-10-31T13:00:00Z", "2026-11-01T14:00:00Z"}},
		// Berlin: 2026-03-29 02:00 CET -> 03:00 CEST; 2026-10-25 03:00 CEST -> 02:00 CET.
		{"30 2 * * *", "Europe/Berlin", "2026-03-28T00:00:00Z",
			[]string{"2026-03-28T01:30:00Z", "2026-03-29T01:00:00Z", "2026-03-30T00:30:00Z"}},
		{"30 2 * * *", "Europe/Berlin", "2026-10-24T00:00:00Z",
			[]string{"2026-10-24T00:30:00Z", "2026-10-25T00:30:00Z", "2026-10-26T01:30:00Z"}},
		{"@daily", "Europe/Berlin", "2026-10-24T12:00:00Z",
			[]string{"2026-10-24T22:00:00Z", "2026-10-25T23:00:00Z"}},
		// Absolute time: wildcard hours, @hourly and @every run in both
		// passes of the repeated hour and skip the missing one.
		{"30 * * * *", "America/New_York", "2026-11-01T05:00:00Z",
			[]string{"2026-11-01T05:30:00Z", "2026-11-01T06:30:00Z", "2026-11-01T07:30:00Z"}},
		{"@hourly", "America/New_York", "2026-11-01T05:00:00Z",
			[]string{"2026-11-01T06:00:00Z", "2026-11-01T07:00:00Z"}},
		{"0 */1 * * *", "Europe/Berlin", "2026-10-25T00:00:00Z",
			[]string{"2026-10-25T01:00:00Z", "2026-10-25T02:00:00Z"}},
		{"30 * * * *", "America/New_York", "2026-03-08T06:00:00Z",
			[]string{"2026-03-08T06:30:00Z", "2026-03-08T07:30:00Z"}},
		{"@every 1h", "America/New_York", "2026-11-01T05:00:00Z",
			[]string{"2026-11-01T06:00:00Z", "2026-11-01T07:00:00Z"}},
	}
	for _, tc := range cases {
		s := mustSchedule(t, tc.expr, tc.tz)
		at := utc(tc.from)
		for _, w := range tc.want {
			at = s.Next(at)
			if !at.Equal(utc(w)) {
				t.Errorf("%q in %s from %s: got %s, want %s", tc.expr, tc.tz, tc.from, at.UTC().Format(time.RFC3339), w)
				break
			}
		}
	}
}

func TestScheduleErrors(t *testing.T) {
	cases := []struct{ expr, tz, msg string }{
		{"", "", "schedule is empty"},
		{"   ", "", "schedule is empty"},
		{"* * *", "", "invalid cron expression"},
		{"* * * * * * *", "", "invalid cron expression"},
		{"60 * * * *", "", "invalid cron expression"},
		{"@fortnightly", "", "invalid cron expression"},
		{"@every", "", "takes one duration"},
		{"@every 1h 2h", "", "takes one duration"},
		{"@every soon", "", "invalid duration"},
		{"@every 999ms", "", "at least 1s"},
		{"@every -1h", "", "at least 1s"},
		{"TZ=UTC 0 4 * * *", "", "TZ= and CRON_TZ="},
		{"CRON_TZ=Asia/Tokyo 0 4 * * *", "", "TZ= and CRON_TZ="},
		{"0 0 31 2 *", "", "never fires"},
		{"0 4 * * *", "Local", `"Local" is not allowed`},
		{"0 4 * * *", "Nowhere/City", "unknown time zone"},
		{"0 4 * * *", "../../etc/passwd", "unknown time zone"},
	}
	for _, tc := range cases {
		_, err := ParseSchedule(tc.expr, tc.tz)
		if err == nil || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("ParseSchedule(%q, %q) = %v, want %q", tc.expr, tc.tz, err, tc.msg)
		}
	}
}
