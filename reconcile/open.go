package reconcile

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/backends/open"
	"github.com/coordd/coordd/spec"
)

// OpenOptions say how to open the spec's backends.
type OpenOptions struct {
	// ReadOnly opens for plan: nothing is created or migrated.
	ReadOnly bool
	// Version is the binary's version, checked against the schema.
	Version string
	// Host names this process in apply records; default hostname:pid.
	Host string
}

// Open opens every backend the spec declares and returns an engine over
// them. Unless ReadOnly, it applies pending migrations first. Close the
// engine when done.
func Open(ctx context.Context, s *spec.Spec, o OpenOptions) (*Engine, error) {
	e := &Engine{Spec: s, Backends: map[string]backends.Backend{}, Host: o.Host}
	if e.Host == "" {
		h, _ := os.Hostname()
		e.Host = fmt.Sprintf("%s:%d", h, os.Getpid())
	}
	names := make([]string, 0, len(s.Backends))
	for n := range s.Backends {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		b, err := open.Open(ctx, s.Backends[n], backends.Options{ReadOnly: o.ReadOnly, Version: o.Version})
		if err != nil {
			e.Close()
			return nil, open.Wrap(n, err)
		}
		e.Backends[n] = b
		if m, ok := b.(backends.Migrator); ok && !o.ReadOnly {
			if err := m.Migrate(ctx); err != nil {
				e.Close()
				return nil, fmt.Errorf("migrate backend %q: %w", n, err)
			}
		}
	}
	cb := e.Backends[s.Cluster.Backend]
	st := cb.Cluster()
	if st == nil {
		e.Close()
		return nil, fmt.Errorf("cluster backend %q cannot hold applied state: %w", s.Cluster.Backend, backends.ErrUnsupported)
	}
	e.State = st
	return e, nil
}

// Close closes every backend.
func (e *Engine) Close() error {
	var errs []error
	for _, b := range e.Backends {
		errs = append(errs, b.Close())
	}
	return errors.Join(errs...)
}
