package spec

import (
	"fmt"
	"strings"
)

// envResult is the outcome of expanding one connection field.
type envResult struct {
	// value is the expanded string; with no lookup function, references are
	// left as written and only "$$" is unescaped when there are none.
	value string
	// refs counts ${...} references.
	refs int
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
