package dashboard

import (
	"fmt"
	"time"

	"github.com/coordd/coordd/backends"
)

// A queue page's chart of the last hour: one bar per minute of the
// backend's clock, processed jobs below and failed attempts stacked above.
// The page allows no script, no inline style and no SVG (a page that held
// one would look like injected markup), so the bars are spans whose
// heights are chartLevels classes of the style sheet (.h0 to .h20).

const (
	chartMinutes = 60
	chartLevels  = 20
)

type chartBar struct {
	// P and F are the heights of the processed and failed parts, in
	// levels (0 to chartLevels).
	P, F  int
	Title string
}

type minuteChart struct {
	Bars []chartBar
	// Peak is the largest minute (processed + failed), the chart's top.
	Peak int64
}

// HourChart is the row's last chartMinutes minutes, the oldest left.
func (r *queueRow) HourChart() minuteChart {
	var c minuteChart
	if r.Counts.Now.IsZero() {
		return c
	}
	byMinute := make(map[int64]backends.QueueCount, len(r.Counts.Minutes))
	for _, m := range r.Counts.Minutes {
		byMinute[m.Minute.Unix()] = m.QueueCount
	}
	last := r.Counts.Now.Truncate(time.Minute)
	for i := range chartMinutes {
		if v := byMinute[last.Add(-time.Duration(i)*time.Minute).Unix()]; v.Processed+v.Failed > c.Peak {
			c.Peak = v.Processed + v.Failed
		}
	}
	for i := range chartMinutes {
		at := last.Add(-time.Duration(chartMinutes-1-i) * time.Minute)
		v := byMinute[at.Unix()]
		b := chartBar{Title: fmt.Sprintf("%s: %d processed, %d failed", at.UTC().Format("15:04"), v.Processed, v.Failed)}
		if c.Peak > 0 {
			b.P, b.F = level(v.Processed, c.Peak), level(v.Failed, c.Peak)
		}
		c.Bars = append(c.Bars, b)
	}
	return c
}

// level is n of peak in chart levels, at least 1 for any n > 0 so that a
// minute with one failure among thousands still shows.
func level(n, peak int64) int {
	if n <= 0 {
		return 0
	}
	return max(int(n*chartLevels/peak), 1)
}
