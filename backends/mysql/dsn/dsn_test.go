package dsn

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestParseGivesTheDriverItsConfig: the driver gets the DSN without
// coordd's pool parameters, its own parameters read and the rest as
// session variables; what internal/mysqldsn refuses (its table is
// TestParse there) is refused here with the same sentinels.
func TestParseGivesTheDriverItsConfig(t *testing.T) {
	cfg, pool, err := Parse("u:p@tcp(db:3306)/coordd?maxOpenConns=4&readTimeout=5s&tls=skip-verify&connMaxIdleTime=0&sql_mode=ANSI")
	if err != nil {
		t.Fatal(err)
	}
	if want := (Pool{MaxOpenConns: 4, MaxIdleConns: 16, ConnMaxLifetime: 5 * time.Minute}); pool != want {
		t.Errorf("pool = %+v, want %+v", pool, want)
	}
	if cfg.User != "u" || cfg.Passwd != "p" || cfg.Addr != "db:3306" || cfg.DBName != "coordd" || cfg.ReadTimeout != 5*time.Second || cfg.TLSConfig != "skip-verify" {
		t.Errorf("config = %+v", cfg)
	}
	if len(cfg.Params) != 1 || cfg.Params["sql_mode"] != "ANSI" {
		t.Errorf("session variables = %v, want only sql_mode", cfg.Params)
	}
	for dsn, want := range map[string]error{
		"u@tcp(db)/x?charset=gbk":                  ErrUnsafeCharset,
		"u@tcp(db)/x?character_set_client=gbk":     ErrUnsafeCharset,
		"u@tcp(db)/x?sql_mode='',x=1":              ErrSessionVariable,
		"u:secretXtcp(db:3306)/x":                  ErrUnknownNetwork,
		"u@tcp(db)/x?maxOpenConns=0&readTimeout=x": nil,
	} {
		_, _, err := Parse(dsn)
		if err == nil || want != nil && !errors.Is(err, want) {
			t.Errorf("Parse(%q) = %v, want %v", dsn, err, want)
		}
	}
}

// TestParseRefusesStrict: the driver panics on its removed strict
// parameter; Parse refuses it before the driver reads the DSN.
func TestParseRefusesStrict(t *testing.T) {
	_, _, err := Parse("u@tcp(db)/x?strict=true")
	if err == nil || !strings.Contains(err.Error(), "strict") {
		t.Fatalf("Parse = %v, want an error naming strict", err)
	}
}
