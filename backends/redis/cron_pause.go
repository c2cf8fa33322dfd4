package redis

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/coordd/coordd/backends"
)

// An operator's pause of a task is a field of the pauses hash (name ->
// {"host", "at" (server TIME in µs, as a string), "reason"}), beside the
// definition: PutCron rewrites the definition and keeps it, DeleteCron
// drops it. The claim script and the due script read it (and paused:
// true in the definition) at the instant they decide.

// cronPauseScript records an operator's pause at the server's TIME unless
// the task is already paused (lua/cron_pause.lua).
var cronPauseScript = luaScript("cron_pause.lua")

// cronResumeScript removes an operator's pause (lua/cron_resume.lua).
var cronResumeScript = luaScript("cron_resume.lua")

// cronPauseRecord is a pause as the scripts write it.
type cronPauseRecord struct {
	Host   string `json:"host"`
	At     int64  `json:"at,string"`
	Reason string `json:"reason"`
}

// parseCronPause decodes a pause record.
func parseCronPause(text string) (backends.CronPause, error) {
	var r cronPauseRecord
	if err := json.Unmarshal([]byte(text), &r); err != nil {
		return backends.CronPause{}, fmt.Errorf("pause record: %w", err)
	}
	return backends.CronPause{Host: r.Host, At: timeOfMicros(r.At), Reason: r.Reason}, nil
}

// PauseCron implements backends.Crons in one script.
func (s *Store) PauseCron(ctx context.Context, name, host, reason string) (backends.CronPause, bool, error) {
	if err := s.writable(); err != nil {
		return backends.CronPause{}, false, fmt.Errorf("pause cron %q: %w", name, err)
	}
	if err := backends.CheckPause(name, host, reason); err != nil {
		return backends.CronPause{}, false, fmt.Errorf("pause cron %q: %w", name, err)
	}
	res, err := cronPauseScript.Run(ctx, s.rdb, []string{s.keys.cronDefs(), s.keys.cronPaused()}, name, host, reason).Slice()
	if err != nil {
		return backends.CronPause{}, false, fmt.Errorf("pause cron %q: %w", name, err)
	}
	if found, _ := res[0].(int64); found == 0 {
		return backends.CronPause{}, false, fmt.Errorf("pause cron %q: %w", name, backends.ErrNotFound)
	}
	if len(res) != 3 {
		return backends.CronPause{}, false, fmt.Errorf("pause cron %q: script returned %d values", name, len(res))
	}
	text, _ := res[1].(string)
	p, err := parseCronPause(text)
	if err != nil {
		return backends.CronPause{}, false, fmt.Errorf("pause cron %q: %w", name, err)
	}
	wrote, _ := res[2].(int64)
	return p, wrote == 1, nil
}

// ResumeCron implements backends.Crons in one script.
func (s *Store) ResumeCron(ctx context.Context, name string) (*backends.CronPause, error) {
	if err := s.writable(); err != nil {
		return nil, fmt.Errorf("resume cron %q: %w", name, err)
	}
	res, err := cronResumeScript.Run(ctx, s.rdb, []string{s.keys.cronDefs(), s.keys.cronPaused()}, name).Slice()
	if err != nil {
		return nil, fmt.Errorf("resume cron %q: %w", name, err)
	}
	if found, _ := res[0].(int64); found == 0 {
		return nil, fmt.Errorf("resume cron %q: %w", name, backends.ErrNotFound)
	}
	if len(res) != 2 {
		return nil, fmt.Errorf("resume cron %q: script returned %d values", name, len(res))
	}
	text, _ := res[1].(string)
	if text == "" {
		return nil, nil
	}
	p, err := parseCronPause(text)
	if err != nil {
		return nil, fmt.Errorf("resume cron %q: %w", name, err)
	}
	return &p, nil
}
