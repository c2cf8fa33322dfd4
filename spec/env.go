package spec

import (
	"fmt"
	"slices"
	"sort"
	"strings"
)

// envResult is the outcome of expanding one connection field.
type envResult struct {
	// value is the expanded string; with no lookup function, references are
	// left as written and only "$$" is unescaped when there are none.
	value string
	// refs counts ${...} references.
	refs int
	// names lists the referenced variables, set or not, in order of
	// appearance (also without a lookup function).
	names []string
	// missing lists referenced variables that are unset and have no default.
	missing []string
	// malformed describes a syntax error; the value is then unusable.
	malformed string
}

// expandEnv expands ${VAR} and ${VAR:-default} in s; "$$" is a literal "$"
// and any other "$" is left alone. With getenv nil it only checks the
// syntax (validate --skip-env). Messages never quote s itself, because
// connection fields carry passwords.
func expandEnv(s string, getenv func(string) (string, bool)) envResult {
	var r envResult
	var b strings.Builder
	for i := 0; i < len(s); {
		c := s[i]
		if c != '$' || i+1 >= len(s) {
			b.WriteByte(c)
			i++
			continue
		}
		switch s[i+1] {
		case '$':
			b.WriteByte('$')
			i += 2
			continue
		case '{':
		default:
			b.WriteByte(c)
			i++
			continue
		}
		end := strings.IndexByte(s[i+2:], '}')
		if end < 0 {
			r.malformed = fmt.Sprintf("unclosed \"${\" at character %d (write \"$$\" for a literal \"$\")", i+1)
			return r
		}
		inner := s[i+2 : i+2+end]
		name, def, hasDef := strings.Cut(inner, ":-")
		if !validEnvName(name) {
			r.malformed = fmt.Sprintf("malformed reference \"${...}\" at character %d: a variable name starts with a letter or \"_\" and contains only letters, digits and \"_\" (write \"$$\" for a literal \"$\")", i+1)
			return r
		}
		r.refs++
		r.names = append(r.names, name)
		i += 2 + end + 1
		if getenv == nil {
			continue
		}
		v, ok := getenv(name)
		switch {
		case hasDef && (!ok || v == ""):
			b.WriteString(def)
		case ok:
			b.WriteString(v)
		default:
			r.missing = append(r.missing, name)
		}
	}
	if getenv == nil && r.refs > 0 {
		r.value = s
	} else {
		r.value = b.String()
	}
	return r
}

// Values of cluster.child_env.
const (
	// ChildEnvScrub (the default) removes the variables that backend
	// connection fields reference from the environment of every command
	// coordd starts.
	ChildEnvScrub = "scrub"
	// ChildEnvInherit passes coordd's whole environment on.
	ChildEnvInherit = "inherit"
)

// BackendEnv lists, sorted, the environment variables that backend
// connection fields reference (dsn, url, path, key_prefix, ...): they
// hold, or lead to, the backends' secrets. Loading with SkipEnv records
// them too.
func (s *Spec) BackendEnv() []string {
	return slices.Clone(s.backendEnv)
}

// ChildEnvUnset lists the variables to remove from the environment of the
// commands coordd starts (cron commands, `sem run`, `queue work`): the
// BackendEnv, unless cluster.child_env is inherit. A command must not
// read the backends' passwords, nor print them into the output that a
// cron run stores for every host to read.
func (s *Spec) ChildEnvUnset() []string {
	if s.Cluster.InheritEnv {
		return nil
	}
	return s.BackendEnv()
}

// noteEnv records the variables a connection field referenced.
func (l *loader) noteEnv(names []string) {
	if l.backendEnv == nil {
		l.backendEnv = map[string]bool{}
	}
	for _, n := range names {
		l.backendEnv[n] = true
	}
}

// sortedEnv is the recorded variables, sorted.
func (l *loader) sortedEnv() []string {
	out := make([]string, 0, len(l.backendEnv))
	for n := range l.backendEnv {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

func validEnvName(name string) bool {
	if name == "" {
		return false
	}
	for i, c := range name {
		switch {
		case c == '_', c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z':
		case c >= '0' && c <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}
