package daemon

import (
	"context"

	"github.com/coordd/coordd/spec"
)

// SetLoadSpec makes d's reloads load the spec with load instead of
// spec.LoadContext; set it before Run.
func SetLoadSpec(d *Daemon, load func(context.Context, string, spec.LoadOptions) (*spec.Spec, error)) {
	d.loadSpec = load
}
