// Package mysqldsn checks a coordd MySQL DSN without linking the MySQL
// driver: a go-sql-driver/mysql DSN plus the connection-pool parameters that
// database/sql, not the driver, takes. The spec loader checks a backend's
// dsn field with it, so that `coordd validate` reports a bad DSN as an error
// of that field (file:line) while the spec package links no database
// driver; backends/mysql/dsn runs the same check, then the driver's own
// parser, before a connection is opened.
//
// # The driver's grammar, without the driver
//
// Parse reads a DSN the way driver.ParseDSN (go-sql-driver/mysql) does
// (grammar.go): [user[:password]@][net[(addr)]]/dbname[?params], the
// driver's own parameters checked with the driver's rules and messages,
// every other parameter a session variable. It refuses what the driver
// refuses, and also the removed "strict" parameter (on which the driver
// panics) and TLS configs or server public keys registered by name (coordd
// registers none). A test in backends/mysql/dsn holds both parsers to the
// same verdicts, so a driver upgrade that changes the grammar fails it.
//
// # coordd's own parameters
//
// The driver sends every parameter it does not know to the server as a
// session variable (SET maxOpenConns=16 would fail), so Parse removes
// coordd's pool parameters and returns the DSN the driver is to get.
//
// # Charsets
//
// The backend has the driver interpolate parameters client-side
// (interpolateParams) and sends several statements per request on some
// connections (multiStatements), so values it does not trust (job keys and
// payloads, a cron command's output) are escaped by the driver and parsed by
// the server in the connection's character set. In gbk, big5, sjis, cp932,
// gb2312 and gb18030 a multibyte character may end in the byte 0x5c: the
// backslash the driver puts before a quote then belongs to the character
// before it, the quote ends the literal, and the rest of the value runs as
// SQL. The driver refuses only unsafe collations, and only when the DSN
// itself sets interpolateParams. Parse therefore accepts a charset or
// collation only from the safe set (SafeCharset), and session-variable
// parameters only as a plain name with one literal value that does not
// touch the charset or collation; the backend checks each new connection's
// charset again, so that a server forcing another one is refused too.
package mysqldsn

import (
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Pool is the connection pool a MySQL backend keeps.
type Pool struct {
	// MaxOpenConns bounds the shared pool (statements and transactions).
	MaxOpenConns int
	// MaxIdleConns is how many idle connections it keeps.
	MaxIdleConns int
	// ConnMaxLifetime recycles connections, below the server's wait_timeout
	// and a proxy's idle cut-off, so that a failover behind a VIP is picked
	// up.
	ConnMaxLifetime time.Duration
	// ConnMaxIdleTime closes connections idle for this long.
	ConnMaxIdleTime time.Duration
}

// DefaultPool serves one coordd process's short statements without crowding
// a server shared by many hosts (max_connections defaults to 151).
var DefaultPool = Pool{
	MaxOpenConns:    16,
	MaxIdleConns:    16,
	ConnMaxLifetime: 5 * time.Minute,
	ConnMaxIdleTime: time.Minute,
}

// The coordd parameters, named in the driver's camelCase style.
const (
	ParamMaxOpenConns    = "maxOpenConns"
	ParamMaxIdleConns    = "maxIdleConns"
	ParamConnMaxLifetime = "connMaxLifetime"
	ParamConnMaxIdleTime = "connMaxIdleTime"
)

// ErrUnsafeCharset is returned for a DSN that asks for a connection
// charset or collation under which the driver's escaping is unsafe.
var ErrUnsafeCharset = errors.New("the connection charset must be one of " + safeList +
	" (under multibyte charsets such as gbk, client-side escaping lets a value run as SQL)")

// ErrUnknownNetwork is returned for a DSN whose network, the word before
// "(address)", is not tcp, tcp4, tcp6 or unix. The message does not quote
// it: without the "@" after user:password, the driver takes them for the
// network's name, and a dial error would print the password.
var ErrUnknownNetwork = errors.New(`the network before "(address)" must be tcp, tcp4, tcp6 or unix ` +
	`(a DSN is [user[:password]@][net[(address)]]/dbname: is the "@" after the password missing?)`)

// ErrSessionVariable is returned for a parameter the driver would send as
// a session variable (SET name = value) whose name is not a plain name or
// whose value is not one literal: the driver splices both into SQL text.
var ErrSessionVariable = errors.New("a session variable parameter must be a plain name with one value: a number, a word or a quoted string without quotes or backslashes inside")

// networks are the networks a DSN may name; "" is tcp.
var networks = map[string]bool{"": true, "tcp": true, "tcp4": true, "tcp6": true, "unix": true}

// network is the network the driver reads in dsn (without parameters),
// splitting it as the driver does: the last "/" ends the address, the
// last "@" before it ends user:password, and the network runs from there
// to the first "(".
func network(dsn string) string {
	slash := strings.LastIndexByte(dsn, '/')
	if slash <= 0 {
		return ""
	}
	left := dsn[:slash]
	left = left[strings.LastIndexByte(left, '@')+1:]
	if open := strings.IndexByte(left, '('); open >= 0 {
		left = left[:open]
	}
	return left
}

// safeCharsets are the connection charsets in which no multibyte character
// contains the bytes 0x5c (backslash) or 0x27 (quote): single-byte ones,
// and UTF-8, whose continuation bytes are all 0x80 or above.
var safeCharsets = map[string]bool{"utf8mb4": true, "utf8mb3": true, "utf8": true, "latin1": true, "ascii": true, "binary": true}

const safeList = "utf8mb4, utf8, utf8mb3, latin1, ascii, binary"

// SafeCharset reports whether cs is a connection charset under which
// client-side escaping is sound (case-insensitive).
func SafeCharset(cs string) bool { return safeCharsets[strings.ToLower(cs)] }

// SafeCollation reports whether c is a collation of a safe charset: binary,
// or <charset>_<suffix> in plain lowercase letters, digits and underscores
// (the driver splices it into SET NAMES).
func SafeCollation(c string) bool {
	c = strings.ToLower(c)
	if c == "binary" {
		return true
	}
	cs, rest, ok := strings.Cut(c, "_")
	return ok && safeCharsets[cs] && cs != "binary" && collationSuffix.MatchString(rest)
}

var (
	plainName       = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	collationSuffix = regexp.MustCompile(`^[a-z0-9_]+$`)
	// plainValue is one literal: a word or number, or a quoted string
	// that cannot end early or escape.
	plainValue = regexp.MustCompile(`^(?:[A-Za-z0-9_.+-]+|'[^'\\]*'|"[^"\\]*")$`)
)

// splitQuery cuts dsn where the driver does: the parameters follow the
// first '?' after the last '/' (a password may hold '?' or '/').
func splitQuery(dsn string) (base, query string, ok bool) {
	slash := strings.LastIndexByte(dsn, '/')
	if slash < 0 {
		return dsn, "", false
	}
	q := strings.IndexByte(dsn[slash:], '?')
	if q < 0 {
		return dsn, "", false
	}
	return dsn[:slash+q], dsn[slash+q+1:], true
}

// checkCharset refuses the driver's charset (a comma list, tried in order)
// and collation parameters outside the safe set. The driver uses both
// values as written, without unescaping.
func checkCharset(k, v string) error {
	switch k {
	case "charset":
		for _, cs := range strings.Split(v, ",") {
			if !SafeCharset(cs) {
				return fmt.Errorf("charset %q: %w", cs, ErrUnsafeCharset)
			}
		}
	case "collation":
		if !SafeCollation(v) {
			return fmt.Errorf("collation %q: %w", v, ErrUnsafeCharset)
		}
	}
	return nil
}

// CheckSessionVariable checks a parameter the driver sends as SET k = v
// (v unescaped, as the driver keeps it).
func CheckSessionVariable(k, v string) error {
	if !plainName.MatchString(k) {
		return fmt.Errorf("parameter %q: %w", k, ErrSessionVariable)
	}
	if lk := strings.ToLower(k); strings.HasPrefix(lk, "character_set") || strings.HasPrefix(lk, "collation") || lk == "names" {
		return fmt.Errorf("parameter %s sets the connection charset or collation (use charset= or collation=): %w", k, ErrUnsafeCharset)
	}
	if !plainValue.MatchString(v) {
		return fmt.Errorf("parameter %s value %q: %w", k, v, ErrSessionVariable)
	}
	return nil
}

// Parse checks dsn and splits it into the DSN the driver is to get (coordd's
// parameters removed) and the pool settings, defaults filled in. It refuses
// what the driver's parser refuses, a charset or collation outside the safe
// set, and malformed session variables (see the package doc).
func Parse(dsn string) (driverDSN string, pool Pool, err error) {
	pool = DefaultPool
	base, query, hasQuery := splitQuery(dsn)
	var kept []string
	if hasQuery {
		for _, kv := range strings.Split(query, "&") {
			k, v, _ := strings.Cut(kv, "=")
			if err := checkCharset(k, v); err != nil {
				return "", pool, err
			}
			var err error
			switch k {
			case ParamMaxOpenConns:
				pool.MaxOpenConns, err = positiveInt(v)
			case ParamMaxIdleConns:
				pool.MaxIdleConns, err = nonNegInt(v)
			case ParamConnMaxLifetime:
				pool.ConnMaxLifetime, err = duration(v)
			case ParamConnMaxIdleTime:
				pool.ConnMaxIdleTime, err = duration(v)
			default:
				kept = append(kept, kv)
				continue
			}
			if err != nil {
				return "", pool, fmt.Errorf("parameter %s: %w", k, err)
			}
		}
	}
	if !networks[network(base)] {
		return "", pool, ErrUnknownNetwork
	}
	if len(kept) > 0 {
		base += "?" + strings.Join(kept, "&")
	}
	cfg, err := parseDriverDSN(base)
	if err != nil {
		return "", pool, err
	}
	if cfg.collation != "" && !SafeCollation(cfg.collation) {
		return "", pool, fmt.Errorf("collation %q: %w", cfg.collation, ErrUnsafeCharset)
	}
	for _, k := range cfg.sessionVars() {
		if err := CheckSessionVariable(k, cfg.params[k]); err != nil {
			return "", pool, err
		}
	}
	return base, pool, nil
}

func unescape(v string) string {
	if u, err := url.QueryUnescape(v); err == nil {
		return u
	}
	return v
}

func positiveInt(v string) (int, error) {
	n, err := strconv.Atoi(unescape(v))
	if err != nil || n < 1 {
		return 0, fmt.Errorf("want an integer of at least 1, got %q", v)
	}
	return n, nil
}

func nonNegInt(v string) (int, error) {
	n, err := strconv.Atoi(unescape(v))
	if err != nil || n < 0 {
		return 0, fmt.Errorf("want an integer of at least 0, got %q", v)
	}
	return n, nil
}

func duration(v string) (time.Duration, error) {
	d, err := time.ParseDuration(unescape(v))
	if err != nil || d < 0 {
		return 0, fmt.Errorf("want a duration such as 5m (0: no limit), got %q", v)
	}
	return d, nil
}
