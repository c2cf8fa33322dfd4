package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/backends/open"
	"github.com/coordd/coordd/internal/safetext"
	"github.com/coordd/coordd/internal/version"
	"github.com/coordd/coordd/reconcile"
	"github.com/coordd/coordd/spec"
)

// errReported is returned by a helper that printed its errors itself (the
// spec's, one a line): the caller prints nothing more.
var errReported = errors.New("reported on stderr")

// reportErr prints err after prefix, unless it was reported already.
func reportErr(env *cliEnv, prefix string, err error) {
	if !errors.Is(err, errReported) {
		fmt.Fprintf(env.stderr, "%s: %v\n", prefix, err)
	}
}

// loadSpec loads the spec and prints every error on stderr. A spec path
// that does not exist is one line that says where the path came from and
// how to point at another: a new user's first command usually has none.
// Reading the spec ends when ctx does (SIGTERM, SIGINT), however stuck
// the file system is.
func loadSpec(ctx context.Context, env *cliEnv, path string, skipEnv bool) (*spec.Spec, bool) {
	s, err := spec.LoadContext(ctx, path, spec.LoadOptions{
		SkipEnv: skipEnv,
		Getenv: func(k string) (string, bool) {
			return os.LookupEnv(k)
		},
	})
	if err == nil {
		return s, true
	}
	var errs spec.Errors
	if !errors.As(err, &errs) {
		fmt.Fprintf(env.stderr, "coordd: %v\n", err)
		return nil, false
	}
	if len(errs) == 1 && errs[0].Pos.File == path && errors.Is(errs[0], fs.ErrNotExist) {
		from := "given with -f"
		switch {
		case path == env.getenv("COORDD_SPEC"):
			from = "from $COORDD_SPEC"
		case path == defaultSpecPath:
			from = "the default, as neither -f nor $COORDD_SPEC is set"
		}
		fmt.Fprintf(env.stderr, "coordd: no spec at %s (%s): point at a spec file or a directory of *.yaml files with -f PATH, or set COORDD_SPEC=PATH\n", safetext.Line(path), from)
		return nil, false
	}
	for _, e := range errs {
		fmt.Fprintln(env.stderr, e.Error())
	}
	fmt.Fprintf(env.stderr, "%d error(s) in %s\n", errs.Count(), safetext.Line(path))
	return nil, false
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

// openAs opens the spec's backend name and returns it with one of its
// areas: area is one of backends.Backend's accessors, such as
// backends.Backend.Queues; what names the area in the error when the
// backend holds none. Close the returned backend.
func openAs[T comparable](ctx context.Context, s *spec.Spec, name, what string, readOnly bool, area func(backends.Backend) T) (T, backends.Backend, error) {
	var zero T
	b, err := open.Open(ctx, s.Backends[name], backends.Options{ReadOnly: readOnly, Version: version.Version})
	if err != nil {
		return zero, nil, open.Wrap(name, err)
	}
	v := area(b)
	if v == zero {
		b.Close()
		return zero, nil, fmt.Errorf("backend %q (%s) cannot hold %s: %w", name, b.Type(), what, backends.ErrUnsupported)
	}
	return v, b, nil
}

// explained is an error whose text is msg alone and that still matches
// its sentinel with errors.Is: for a message that already says what the
// sentinel says, in the words of the command (wrapping with %w would
// append the sentinel's text and say it twice).
type explained struct {
	msg      string
	sentinel error
}

func (e *explained) Error() string { return e.msg }
func (e *explained) Unwrap() error { return e.sentinel }

// explain returns msg as an error that matches sentinel.
func explain(sentinel error, format string, args ...any) error {
	return &explained{msg: fmt.Sprintf(format, args...), sentinel: sentinel}
}
