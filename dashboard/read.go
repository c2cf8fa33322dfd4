package dashboard

import (
	"errors"
	"sort"

	"github.com/coordd/coordd/backends"
	"github.com/coordd/coordd/spec"
)

// What the pages share: the actions a page offers, and the grouping of
// objects by backend, so that each backend is read once for all of them
// (see the package doc).

// offered lists the actions a page may show for objects of kind: those
// on one dead job (Action.Job) or those on the object.
func (d *Dashboard) offered(p *page, kind spec.Kind, job bool) []Action {
	if !p.Actions || p.Session == nil {
		return nil
	}
	var out []Action
	for _, a := range d.actionsFor(kind) {
		if a.Job == job {
			out = append(out, a)
		}
	}
	p.Forms = p.Forms || len(out) > 0
	return out
}

// isNotFound reports whether a read found no such object.
func isNotFound(err error) bool { return errors.Is(err, backends.ErrNotFound) }

// byBackend groups names by the backend that the spec puts each in.
func byBackend(names []string, backendOf func(string) string) ([]string, map[string][]string) {
	m := map[string][]string{}
	var order []string
	for _, n := range names {
		b := backendOf(n)
		if m[b] == nil {
			order = append(order, b)
		}
		m[b] = append(m[b], n)
	}
	sort.Strings(order)
	return order, m
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
