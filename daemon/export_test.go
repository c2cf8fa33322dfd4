package daemon

import "github.com/coordd/coordd/spec"

// SetLoadSpec makes d's reloads load the spec with load instead of
// spec.Load; set it before Run.
func SetLoadSpec(d *Daemon, load func(string, spec.LoadOptions) (*spec.Spec, error)) {
	d.loadSpec = load
}
