package spec

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/coordd/coordd/internal/mysqldsn"
	"github.com/coordd/coordd/internal/pgdsn"
	"go.yaml.in/yaml/v3"
)

// The backends section: each backend's fields by its type, its connection
// fields expanded from variables and secret files, and what can be checked
// of them before a connection is made (a MySQL DSN by the driver's rules,
// a PostgreSQL DSN by libpq's,
// a Redis URL, memcached servers and key prefix).

var backendTypes = []string{TypeSQLite, TypeMySQL, TypePostgres, TypeRedis, TypeMemcached}

// backendTypeList is backendTypes for messages.
const backendTypeList = "sqlite, mysql, postgres, redis or memcached"

// backendFields lists the fields each backend type accepts.
var backendFields = map[string][]string{
	TypeSQLite:    {"type", "path"},
	TypeMySQL:     {"type", "dsn", "table_prefix"},
	TypePostgres:  {"type", "dsn", "schema", "table_prefix", "wake"},
	TypeRedis:     {"type", "url", "sentinel", "key_prefix", "durable"},
	TypeMemcached: {"type", "servers", "key_prefix"},
}

var allBackendFields = []string{"type", "path", "dsn", "schema", "table_prefix", "wake", "url", "sentinel", "key_prefix", "durable", "servers"}

// sentinelFields are the fields of a redis backend's sentinel.
var sentinelFields = []string{"master", "addrs", "db", "username", "password", "sentinel_password"}

var tablePrefixRE = regexp.MustCompile(`^[a-zA-Z0-9_]{0,32}$`)

func (l *loader) decodeBackends(s *Spec) {
	for _, name := range l.sortedNames("backends") {
		d := l.named["backends"][name]
		addr := "backends." + name
		typ := peekType(d.val)
		allowed := backendFields[typ]
		if allowed == nil {
			allowed = allBackendFields
		}
		fs := l.fields(d.file, addr, d.key, d.val, allowed, func(field string) string {
			var owners []string
			for _, t := range backendTypes {
				if contains(backendFields[t], field) {
					owners = append(owners, t)
				}
			}
			if len(owners) == 0 {
				return ""
			}
			return fmt.Sprintf("field %s does not apply to %s backends (it is for %s)", quote(field), typ, strings.Join(owners, " and "))
		})
		l.known[name] = ""
		if fs == nil {
			continue
		}
		b := &Backend{Name: name, Pos: d.file.posOf(d.key)}
		if !fs.has("type") {
			fs.missing("type", " ("+backendTypeList+")")
			continue
		}
		t, ok := fs.str("type", false)
		if !ok {
			continue
		}
		if !contains(backendTypes, t) {
			fs.errf("type", "unknown backend type %s%s; use %s", quote(t), didYouMean(t, backendTypes), backendTypeList)
			continue
		}
		b.Type = t
		l.known[name] = t
		switch t {
		case TypeSQLite:
			b.Path = filepath.Join(l.dataDir, name+".db")
			if v, checkable, ok := l.expandField(fs, "path", false); ok {
				switch {
				case checkable && v == "":
					fs.errf("path", "must not be empty")
				case checkable && !filepath.IsAbs(v):
					b.Path = filepath.Join(d.file.dir, v)
				case checkable:
					b.Path = filepath.Clean(v)
				default:
					b.Path = v
				}
			}
		case TypeMySQL:
			if !fs.has("dsn") {
				fs.missing("dsn", ", e.g. \"user:${DB_PASSWORD}@tcp(db1:3306)/coordd\"")
			} else if v, checkable, ok := l.expandField(fs, "dsn", true); ok {
				b.DSN = v
				if checkable {
					if _, _, err := mysqldsn.Parse(v); err != nil {
						msg := err.Error()
						if strings.HasPrefix(msg, "invalid dbname") {
							msg = "invalid database name escape"
						}
						fs.errf("dsn", "is not a valid MySQL DSN: %s", scrubSecret(msg, v))
					}
				}
			}
			b.TablePrefix = defaultTablePrefix
			if v, checkable, ok := l.expandField(fs, "table_prefix", false); ok {
				b.TablePrefix = v
				if checkable && !tablePrefixRE.MatchString(v) {
					fs.errf("table_prefix", "must be at most 32 letters, digits or \"_\", got %s", quote(v))
				}
			}
		case TypePostgres:
			l.postgres(fs, b)
		case TypeRedis:
			switch {
			case fs.has("url") && fs.has("sentinel"):
				fs.errf("sentinel", "cannot be used with %s: give either one server's url or the Sentinels and the master name", quote("url"))
			case fs.has("sentinel"):
				b.Sentinel = l.sentinel(fs)
			case !fs.has("url"):
				fs.missing("url", ", e.g. \"redis://cache1:6379/0\" (or \"sentinel\" with master and addrs)")
			default:
				if v, checkable, ok := l.expandField(fs, "url", true); ok {
					b.URL = v
					if checkable {
						if msg := checkRedisURL(v); msg != "" {
							fs.errf("url", "%s", msg)
						}
					}
				}
			}
			b.KeyPrefix = defaultKeyPrefix
			if v, _, ok := l.expandField(fs, "key_prefix", false); ok {
				b.KeyPrefix = v
			}
			b.Durable = fs.boolean("durable")
		case TypeMemcached:
			b.Servers = l.servers(fs)
			b.KeyPrefix = defaultKeyPrefix
			if v, checkable, ok := l.expandField(fs, "key_prefix", false); ok {
				b.KeyPrefix = v
				if msg := checkMemcachedPrefix(v); checkable && msg != "" {
					fs.errf("key_prefix", "%s", msg)
				}
			}
		}
		s.Backends[name] = b
	}
}

// schemaRE is a PostgreSQL schema name coordd accepts: an unquoted
// identifier of at most 63 bytes (NAMEDATALEN), lower case so that it
// reads the same quoted or not.
var schemaRE = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// postgres reads a postgres backend's fields: dsn (a URL or keyword/value
// string), schema (default public) and table_prefix (default coordd_).
func (l *loader) postgres(fs *fieldSet, b *Backend) {
	if !fs.has("dsn") {
		fs.missing("dsn", ", e.g. \"postgres://coordd:${DB_PASSWORD}@db1:5432/coordd?sslmode=verify-full\"")
	} else if v, checkable, ok := l.expandField(fs, "dsn", true); ok {
		b.DSN = v
		if checkable {
			if _, err := pgdsn.Parse(v); err != nil {
				fs.errf("dsn", "is not a valid PostgreSQL DSN (a postgres:// URL or keyword=value pairs): %s", scrubSecret(err.Error(), v))
			}
		}
	}
	b.Schema = "public"
	if v, checkable, ok := l.expandField(fs, "schema", false); ok {
		b.Schema = v
		if checkable && !schemaRE.MatchString(v) {
			fs.errf("schema", "must be a lower-case identifier of at most 63 letters, digits or \"_\" (not starting with a digit), got %s", quote(v))
		}
	}
	b.TablePrefix = defaultTablePrefix
	if v, checkable, ok := l.expandField(fs, "table_prefix", false); ok {
		b.TablePrefix = v
		if checkable && !tablePrefixRE.MatchString(v) {
			fs.errf("table_prefix", "must be at most 32 letters, digits or \"_\", got %s", quote(v))
		}
	}
	b.Wake, _ = fs.enum("wake", WakeNotify, WakeNotify, WakePoll)
}

// MaxMemcachedKeyPrefix bounds a memcached key_prefix in bytes. memcached
// refuses keys over 250 bytes, and backends/memcached (keys.go) adds up to
// 135 to the prefix: "{sem:", a name encoded in at most 120 bytes
// (maxEncodedName; a spec name is at most 63), "}" and "slot:9999" (slots
// are numbered below maxLimit).
const MaxMemcachedKeyPrefix = 250 - len("{sem:") - 120 - len("}") - len("slot:9999")

// checkMemcachedPrefix says what makes prefix unusable in memcached keys,
// or "". memcached's text protocol ends a key at a space or a control
// character; backends/memcached also refuses braces, which delimit its
// hash tags, and the spec keeps to printable ASCII so that a prefix reads
// the same in every tool.
func checkMemcachedPrefix(prefix string) string {
	if len(prefix) > MaxMemcachedKeyPrefix {
		return fmt.Sprintf("must be at most %d bytes, got %d: memcached keys are at most 250 bytes and coordd adds up to %d to the prefix",
			MaxMemcachedKeyPrefix, len(prefix), 250-MaxMemcachedKeyPrefix)
	}
	for i := 0; i < len(prefix); i++ {
		switch c := prefix[i]; {
		case c == '{' || c == '}':
			return fmt.Sprintf("must not hold braces (coordd's keys use them), got %s", quote(prefix))
		case c <= ' ' || c >= 0x7f:
			return fmt.Sprintf("must be printable ASCII without spaces (memcached keys are), got %s whose byte %d is 0x%02x", quote(prefix), i, c)
		}
	}
	return ""
}

// peekType reads a backend's type before its fields are checked, so that
// fields of other types can be named as such.
func peekType(n *yaml.Node) string {
	if n == nil || n.Kind != yaml.MappingNode {
		return ""
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == "type" && n.Content[i+1].Kind == yaml.ScalarNode {
			if t := n.Content[i+1].Value; contains(backendTypes, t) {
				return t
			}
		}
	}
	return ""
}

// expandField reads a connection field and expands environment
// references in it. checkable is false when the value still holds
// references (SkipEnv), so checks of the final value must be skipped. ok
// is false when the field is absent or bad.
func (l *loader) expandField(fs *fieldSet, name string, secret bool) (v string, checkable, ok bool) {
	raw, ok := fs.str(name, secret)
	if !ok {
		return "", false, false
	}
	return l.expand(fs.file, fs.addr+"."+name, fs.node(name), raw)
}

func (l *loader) expand(f *srcFile, addr string, n *yaml.Node, raw string) (v string, checkable, ok bool) {
	var res resolver
	if !l.skipEnv {
		res = l
	}
	r := expandEnv(raw, f.dir, res)
	l.noteEnv(r.names)
	if r.malformed != "" {
		l.errAt(f, n, addr, "%s", r.malformed)
		return "", false, false
	}
	for _, m := range r.missing {
		l.errAt(f, n, addr, "environment variable %s is not set (use ${%s:-default} for a fallback)", m, m)
	}
	for _, m := range r.failed {
		l.errAt(f, n, addr, "%s", m)
	}
	if len(r.missing) > 0 || len(r.failed) > 0 {
		return "", false, false
	}
	return r.value, !l.skipEnv || r.refs == 0, true
}

// lookupEnv looks a variable up (the loader is the resolver of
// expandEnv).
func (l *loader) lookupEnv(name string) (string, bool) { return l.getenv(name) }

// secretResult is a secret file's value, or why it has none.
type secretResult struct {
	v   string
	err error
}

// secretFile reads a secret file once per load, through LoadOptions.ReadFile or
// the spec reader's rules (a regular file outside the kernel's file
// systems, at most MaxSecretFileSize, within the load's deadline). Errors
// leave out the path, which the message names already, and the content.
func (l *loader) secretFile(path string) (string, error) {
	if r, ok := l.secrets[path]; ok {
		return r.v, r.err
	}
	var data []byte
	var err error
	if l.readFile != nil {
		data, err = l.readFile(path)
	} else {
		data, err = l.read.readFile(path, MaxSecretFileSize)
	}
	var r secretResult
	if err != nil {
		r.err = errors.New(strings.Replace(pathErr(err), "spec too large", "too large", 1))
	} else {
		r.v, r.err = secretText(data)
	}
	if l.secrets == nil {
		l.secrets = map[string]secretResult{}
	}
	l.secrets[path] = r
	return r.v, r.err
}

// checkRedisURL returns what is wrong with a redis URL, never quoting it.
func checkRedisURL(v string) string {
	u, err := url.Parse(v)
	if err != nil {
		return "is not a valid URL: " + scrubSecret(URLError(err), v)
	}
	if u.Scheme != "redis" && u.Scheme != "rediss" {
		return fmt.Sprintf("must be a redis:// or rediss:// URL, got scheme %s", quote(u.Scheme))
	}
	if u.Host == "" || u.Hostname() == "" {
		return "has no host, e.g. redis://cache1:6379/0"
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return "has an invalid port"
		}
	}
	if db := strings.TrimPrefix(u.Path, "/"); db != "" {
		if n, err := strconv.Atoi(db); err != nil || n < 0 {
			return "the path must be a database number, e.g. redis://cache1:6379/0"
		}
	}
	return ""
}

// servers reads memcached's host:port list.
func (l *loader) servers(fs *fieldSet) []string {
	return l.hostPorts(fs, "servers", ", e.g. [\"mc1:11211\", \"mc2:11211\"]")
}

// sentinel reads a redis backend's sentinel mapping.
func (l *loader) sentinel(parent *fieldSet) *RedisSentinel {
	fs := l.fields(parent.file, parent.addr+".sentinel", parent.keys["sentinel"], parent.node("sentinel"), sentinelFields, nil)
	if fs == nil {
		return nil
	}
	if n := parent.node("sentinel"); n == nil || isNull(n) {
		parent.errf("sentinel", "must be a mapping with master and addrs, e.g. {master: mymaster, addrs: [\"sentinel1:26379\"]}")
		return nil
	}
	out := &RedisSentinel{}
	if !fs.has("master") {
		fs.missing("master", ", the name the Sentinels monitor, e.g. mymaster")
	} else if v, checkable, ok := l.expandField(fs, "master", false); ok {
		out.Master = v
		if checkable && (v == "" || strings.ContainsAny(v, " \t\r\n")) {
			fs.errf("master", "must be a name without spaces, got %s", quote(v))
		}
	}
	out.Addrs = l.hostPorts(fs, "addrs", ", e.g. [\"sentinel1:26379\", \"sentinel2:26379\", \"sentinel3:26379\"]")
	out.DB, _ = fs.intRange("db", 0, 0, 0)
	if v, _, ok := l.expandField(fs, "username", false); ok {
		out.Username = v
	}
	if v, _, ok := l.expandField(fs, "password", true); ok {
		out.Password = v
	}
	if v, _, ok := l.expandField(fs, "sentinel_password", true); ok {
		out.SentinelPassword = v
	}
	return out
}

// hostPorts reads a list of host:port.
func (l *loader) hostPorts(fs *fieldSet, name, example string) []string {
	n, ok := fs.scalar(name)
	if !ok {
		if !fs.has(name) {
			fs.missing(name, example)
		}
		return nil
	}
	if n.Kind != yaml.SequenceNode {
		fs.errf(name, "must be a list of host:port, got %s", describe(n, false))
		return nil
	}
	if len(n.Content) == 0 {
		fs.errf(name, "must list at least one host:port")
		return nil
	}
	var out []string
	for i, e := range n.Content {
		addr := fmt.Sprintf("%s.%s[%d]", fs.addr, name, i)
		if e.Kind == yaml.AliasNode {
			continue
		}
		if e.Kind != yaml.ScalarNode || e.ShortTag() != tagStr {
			l.errAt(fs.file, e, addr, "must be a host:port string, got %s", describe(e, false))
			continue
		}
		v, checkable, ok := l.expand(fs.file, addr, e, e.Value)
		if !ok {
			continue
		}
		if checkable {
			host, port, err := net.SplitHostPort(v)
			p, perr := strconv.Atoi(port)
			if err != nil || host == "" || perr != nil || p < 1 || p > 65535 {
				l.errAt(fs.file, e, addr, "must be host:port, got %s", quote(v))
				continue
			}
		}
		out = append(out, v)
	}
	return out
}
