package open_test

import (
	"errors"
	"path/filepath"
	"testing"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/backends/open"
	"github.com/coordd/coordd/spec"
)

func TestOpenSQLite(t *testing.T) {
	path := filepath.Join(t.TempDir(), "db", "coordd.db")
	b, err := open.Open(t.Context(), &spec.Backend{Name: "embedded", Type: spec.TypeSQLite, Path: path}, backends.Options{Version: "0.1.0"})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if b.Name() != "embedded" || b.Type() != spec.TypeSQLite {
		t.Errorf("opened %s %s, want embedded sqlite", b.Name(), b.Type())
	}
	if _, ok := b.(backends.StateStore); !ok {
		t.Error("sqlite backend is not a StateStore")
	}
}

func TestOpenNotInBuild(t *testing.T) {
	for _, typ := range []string{spec.TypeMySQL, spec.TypeRedis, spec.TypeMemcached} {
		b, err := open.Open(t.Context(), &spec.Backend{Name: "x", Type: typ}, backends.Options{})
		if !errors.Is(err, backends.ErrUnsupported) || b != nil {
			t.Errorf("open %s = %v, %v; want nil and ErrUnsupported", typ, b, err)
		}
	}
}

func TestOpenUnknown(t *testing.T) {
	for _, sb := range []*spec.Backend{nil, {Name: "x", Type: "etcd"}, {Name: "x"}} {
		b, err := open.Open(t.Context(), sb, backends.Options{})
		if err == nil || b != nil || errors.Is(err, backends.ErrUnsupported) {
			t.Errorf("open %+v = %v, %v; want a plain error", sb, b, err)
		}
	}
}

func TestOpenSQLiteError(t *testing.T) {
	b, err := open.Open(t.Context(), &spec.Backend{Name: "x", Type: spec.TypeSQLite}, backends.Options{})
	if err == nil || b != nil {
		t.Errorf("open with empty path = %v, %v; want an error and a nil backend", b, err)
	}
}
