package spec

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// YAML short tags of resolved scalars.
const (
	tagStr   = "!!str"
	tagInt   = "!!int"
	tagFloat = "!!float"
	tagBool  = "!!bool"
	tagNull  = "!!null"
)

// fieldSet is the fields of one mapping (an object, a backend, cluster),
// checked for unknown and duplicate keys, with typed getters that record
// an error at the value's position and report whether the value is usable.
type fieldSet struct {
	l    *loader
	file *srcFile
	addr string     // e.g. "semaphore.reindex"
	at   *yaml.Node // the name key: where "missing field" errors point
	keys map[string]*yaml.Node
	vals map[string]*yaml.Node
}

// fields walks mapping n. allowed lists the valid keys; foreign, when set,
// explains a key that is valid elsewhere (e.g. dsn on a redis backend) and
// returns "" otherwise. It returns nil when n is not a mapping (an error is
// recorded); a null n is an empty mapping.
func (l *loader) fields(f *srcFile, addr string, at, n *yaml.Node, allowed []string, foreign func(string) string) *fieldSet {
	fs := &fieldSet{l: l, file: f, addr: addr, at: at, keys: map[string]*yaml.Node{}, vals: map[string]*yaml.Node{}}
	if n == nil || isNull(n) {
		return fs
	}
	if n.Kind == yaml.AliasNode {
		return nil // reported by the alias scan
	}
	if n.Kind != yaml.MappingNode {
		l.errAt(f, n, addr, "must be a mapping of settings, got %s", describe(n, false))
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			if k.Kind != yaml.AliasNode {
				l.errAt(f, k, addr, "keys must be field names, got %s", describe(k, false))
			}
			continue
		}
		name := k.Value
		if prev, dup := fs.keys[name]; dup {
			l.errAt(f, k, addr, "duplicate key %s; first at %s", quote(name), f.pos(prev))
			continue
		}
		if !contains(allowed, name) {
			if name == "<<" {
				l.errAt(f, k, addr, "merge keys (<<) are not supported")
			} else if why := callForeign(foreign, name); why != "" {
				l.errAt(f, k, addr, "%s", why)
			} else {
				l.errAt(f, k, addr, "unknown field %s%s", quote(name), didYouMean(name, allowed))
			}
			continue
		}
		fs.keys[name] = k
		fs.vals[name] = v
	}
	return fs
}

func callForeign(f func(string) string, name string) string {
	if f == nil {
		return ""
	}
	return f(name)
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func isNull(n *yaml.Node) bool {
	return n.Kind == 0 || (n.Kind == yaml.ScalarNode && n.ShortTag() == tagNull)
}

// describe says what a node is for "got ..." messages. With secret, the
// value itself is left out.
func describe(n *yaml.Node, secret bool) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.AliasNode:
		return "an alias"
	case yaml.ScalarNode:
	default:
		return "nothing"
	}
	var kind string
	switch n.ShortTag() {
	case tagNull:
		return "null"
	case tagStr:
		kind = "string"
	case tagInt:
		kind = "integer"
	case tagFloat:
		kind = "number"
	case tagBool:
		kind = "boolean"
	case "!!timestamp":
		kind = "timestamp"
	case "!!binary":
		return "binary data"
	default:
		kind = "value tagged " + quote(n.Tag)
	}
	if secret {
		return kind
	}
	if kind == "string" || strings.HasPrefix(kind, "value") {
		return kind + " " + quote(n.Value)
	}
	return kind + " " + short(n.Value)
}

// short truncates a value for a message.
func short(s string) string {
	const max = 60
	if r := []rune(s); len(r) > max {
		return string(r[:max]) + "..."
	}
	return s
}

// has reports whether the field was written (even with a bad value).
func (fs *fieldSet) has(name string) bool { _, ok := fs.vals[name]; return ok }

// node returns the field's value node, or nil when absent.
func (fs *fieldSet) node(name string) *yaml.Node { return fs.vals[name] }

// errf records an error at the field's value.
func (fs *fieldSet) errf(name, format string, args ...any) {
	n := fs.vals[name]
	if n == nil {
		n = fs.at
	}
	fs.l.errAt(fs.file, n, fs.addr+"."+name, format, args...)
}

// missing records that a required field is absent.
func (fs *fieldSet) missing(name, hint string) {
	fs.l.errAt(fs.file, fs.at, fs.addr, "missing required field %s%s", quote(name), hint)
}

// scalar returns the field's node when it is present and not an alias
// (aliases are reported once, by the alias scan).
func (fs *fieldSet) scalar(name string) (*yaml.Node, bool) {
	n, ok := fs.vals[name]
	if !ok || n.Kind == yaml.AliasNode {
		return nil, false
	}
	return n, true
}

// str reads a string field. secret keeps the value out of messages.
func (fs *fieldSet) str(name string, secret bool) (string, bool) {
	n, ok := fs.scalar(name)
	if !ok {
		return "", false
	}
	if n.Kind != yaml.ScalarNode || n.ShortTag() != tagStr {
		fs.errf(name, "must be a string, got %s", describe(n, secret))
		return "", false
	}
	return n.Value, true
}

// integer reads an integer field.
func (fs *fieldSet) integer(name string) (int, bool) {
	n, ok := fs.scalar(name)
	if !ok {
		return 0, false
	}
	if n.Kind != yaml.ScalarNode || n.ShortTag() != tagInt {
		fs.errf(name, "must be an integer, got %s", describe(n, false))
		return 0, false
	}
	var v int64
	if err := n.Decode(&v); err != nil || int64(int(v)) != v {
		fs.errf(name, "must be an integer, got %s (out of range)", describe(n, false))
		return 0, false
	}
	return int(v), true
}

// intRange reads an integer field that must be at least lo (and at most hi
// when hi > lo); def is used when absent.
func (fs *fieldSet) intRange(name string, def, lo, hi int) (int, bool) {
	if !fs.has(name) {
		return def, true
	}
	v, ok := fs.integer(name)
	if !ok {
		return def, false
	}
	if v < lo {
		fs.errf(name, "must be at least %d, got %d", lo, v)
		return def, false
	}
	if hi > lo && v > hi {
		fs.errf(name, "must be at most %d, got %d", hi, v)
		return def, false
	}
	return v, true
}

// boolean reads a bool field, false when absent.
func (fs *fieldSet) boolean(name string) bool {
	n, ok := fs.scalar(name)
	if !ok {
		return false
	}
	if n.Kind != yaml.ScalarNode || n.ShortTag() != tagBool {
		fs.errf(name, "must be a boolean (true or false), got %s", describe(n, false))
		return false
	}
	var v bool
	if err := n.Decode(&v); err != nil {
		fs.errf(name, "must be a boolean (true or false), got %s", describe(n, false))
		return false
	}
	return v
}

// duration reads a Go duration ("30s", "1h30m") that must be at least lo
// (0 for "not negative", positive for "greater than 0"); def is used when
// absent.
func (fs *fieldSet) duration(name string, def, lo time.Duration) (time.Duration, bool) {
	n, ok := fs.scalar(name)
	if !ok {
		return def, !fs.has(name)
	}
	if n.Kind == yaml.ScalarNode && (n.ShortTag() == tagInt || n.ShortTag() == tagFloat) {
		fs.errf(name, "must be a duration like 30s, got %s; add a unit (ns, us, ms, s, m, h)", describe(n, false))
		return def, false
	}
	if n.Kind != yaml.ScalarNode || n.ShortTag() != tagStr {
		fs.errf(name, "must be a duration like 30s, got %s", describe(n, false))
		return def, false
	}
	d, err := time.ParseDuration(strings.TrimSpace(n.Value))
	if err != nil {
		fs.errf(name, "must be a duration like 30s or 1h30m, got %s", describe(n, false))
		return def, false
	}
	if d < 0 {
		fs.errf(name, "must not be negative, got %s", n.Value)
		return def, false
	}
	if d < lo {
		if lo == time.Nanosecond {
			fs.errf(name, "must be greater than 0")
		} else {
			fs.errf(name, "must be at least %s, got %s", lo, d)
		}
		return def, false
	}
	return d, true
}

// enum reads a string field restricted to values; def when absent.
func (fs *fieldSet) enum(name, def string, values ...string) (string, bool) {
	if !fs.has(name) {
		return def, true
	}
	v, ok := fs.str(name, false)
	if !ok {
		return def, false
	}
	if !contains(values, v) {
		fs.errf(name, "must be one of %s; got %s%s", strings.Join(values, ", "), quote(v), didYouMean(v, values))
		return def, false
	}
	return v, true
}

// stringish is a scalar used as a string where numbers are natural
// (command arguments, environment values): strings, integers and floats
// are taken as written; booleans, null and collections are errors.
func stringish(n *yaml.Node) (string, bool) {
	if n.Kind != yaml.ScalarNode {
		return "", false
	}
	switch n.ShortTag() {
	case tagStr, tagInt, tagFloat:
		return n.Value, true
	}
	return "", false
}

// parseSize reads "64KiB", "1MiB", "512KB", "2MB", "100B" or plain digits.
func parseSize(s string) (int64, bool) {
	s = strings.TrimSpace(s)
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	if i == 0 || i > 18 {
		return 0, false
	}
	n, err := strconv.ParseInt(s[:i], 10, 64)
	if err != nil {
		return 0, false
	}
	mult := map[string]int64{
		"": 1, "b": 1,
		"kb": 1000, "mb": 1000 * 1000, "gb": 1000 * 1000 * 1000,
		"kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30,
	}[strings.ToLower(strings.TrimSpace(s[i:]))]
	if mult == 0 || n > (1<<62)/mult {
		return 0, false
	}
	return n * mult, true
}

// errAt records an error at node n of file f.
func (l *loader) errAt(f *srcFile, n *yaml.Node, addr, format string, args ...any) {
	l.errs.add(&Error{Pos: f.posOf(n), Address: addr, Msg: fmt.Sprintf(format, args...)})
}
