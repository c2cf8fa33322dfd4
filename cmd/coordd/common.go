package main

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/backends/open"
	"github.com/coordd/coordd/internal/version"
	"github.com/coordd/coordd/reconcile"
	"github.com/coordd/coordd/spec"
)

// loadSpec loads the spec and prints every error on stderr.
func loadSpec(env *cliEnv, path string, skipEnv bool) (*spec.Spec, bool) {
	s, err := spec.Load(path, spec.LoadOptions{
		SkipEnv: skipEnv,
		Getenv: func(k string) (string, bool) {
			return os.LookupEnv(k)
		},
	})
	if err != nil {
		var errs spec.Errors
		if errors.As(err, &errs) {
			for _, e := range errs {
				fmt.Fprintln(env.stderr, e.Error())
			}
			fmt.Fprintf(env.stderr, "%d error(s) in %s\n", errs.Count(), path)
		} else {
			fmt.Fprintf(env.stderr, "coordd: %v\n", err)
		}
		return nil, false
	}
	return s, true
}

// openEngine opens the spec's backends; readOnly is for plan.
func openEngine(ctx context.Context, env *cliEnv, s *spec.Spec, readOnly bool) (*reconcile.Engine, bool) {
	e, err := reconcile.Open(ctx, s, reconcile.OpenOptions{ReadOnly: readOnly, Version: version.Version})
	if err != nil {
		fmt.Fprintf(env.stderr, "coordd: %v\n", err)
		return nil, false
	}
	return e, true
}

// openAs opens the spec's backend name and checks that it implements T (a
// capability interface such as backends.QueueAdmin); what names the
// capability in the error. Close the returned backend.
func openAs[T any](ctx context.Context, s *spec.Spec, name, what string, readOnly bool) (T, backends.Backend, error) {
	var zero T
	b, err := open.Open(ctx, s.Backends[name], backends.Options{ReadOnly: readOnly, Version: version.Version})
	if err != nil {
		return zero, nil, fmt.Errorf("open backend %q: %w", name, err)
	}
	v, ok := b.(T)
	if !ok {
		b.Close()
		return zero, nil, fmt.Errorf("backend %q (%s) cannot hold %s: %w", name, b.Type(), what, backends.ErrUnsupported)
	}
	return v, b, nil
}
