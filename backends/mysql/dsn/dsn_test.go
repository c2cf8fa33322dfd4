package dsn

import (
	"strings"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	cases := []struct {
		in      string
		pool    Pool
		params  map[string]string
		wantErr string
	}{
		{in: "u:p@tcp(db:3306)/coordd", pool: DefaultPool},
		{
			in:     "u:p@tcp(db:3306)/coordd?maxOpenConns=4&readTimeout=5s&maxIdleConns=0&connMaxLifetime=90s&connMaxIdleTime=0&sql_mode=ANSI",
			pool:   Pool{MaxOpenConns: 4, MaxIdleConns: 0, ConnMaxLifetime: 90 * time.Second},
			params: map[string]string{"sql_mode": "ANSI"},
		},
		{in: "u@tcp(db)/x?maxOpenConns=0", wantErr: "maxOpenConns"},
		{in: "u@tcp(db)/x?maxIdleConns=-1", wantErr: "maxIdleConns"},
		{in: "u@tcp(db)/x?connMaxLifetime=5", wantErr: "connMaxLifetime"},
		{in: "u@tcp(db)/x?connMaxIdleTime=-1s", wantErr: "connMaxIdleTime"},
		{in: "u@tcp(db)/x?readTimeout=banana", wantErr: "invalid duration"},
	}
	for _, c := range cases {
		cfg, pool, err := Parse(c.in)
		if c.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("Parse(%q) error = %v, want one naming %q", c.in, err, c.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("Parse(%q): %v", c.in, err)
			continue
		}
		if pool != c.pool {
			t.Errorf("Parse(%q) pool = %+v, want %+v", c.in, pool, c.pool)
		}
		for k := range cfg.Params {
			if _, ok := c.params[k]; !ok {
				t.Errorf("Parse(%q): parameter %q reached the driver", c.in, k)
			}
		}
		for k, v := range c.params {
			if cfg.Params[k] != v {
				t.Errorf("Parse(%q): param %s = %q, want %q", c.in, k, cfg.Params[k], v)
			}
		}
	}
}
