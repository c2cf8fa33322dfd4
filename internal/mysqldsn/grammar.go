package mysqldsn

import (
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// This file reads a DSN as go-sql-driver/mysql's ParseDSN (dsn.go) does,
// with its error messages, so that the spec is checked by the driver's
// rules without linking the driver. TestAgreesWithDriver and
// FuzzAgreesWithDriver (backends/mysql/dsn) compare the two.

// The driver's errors for a malformed DSN.
var (
	errUnescaped = errors.New("invalid DSN: did you forget to escape a param value?")
	errAddr      = errors.New("invalid DSN: network address not terminated (missing closing brace)")
	errNoSlash   = errors.New("invalid DSN: missing the slash separating the database name")
	errStrict    = errors.New("parameter strict: the MySQL driver has no strict mode any more (set sql_mode instead)")
)

// driverConfig is what the driver keeps of a DSN that coordd checks
// further.
type driverConfig struct {
	net, addr string
	// collation is the last collation parameter, tls the TLS config name
	// and pubKey the server public key name the driver would look up.
	collation, tls, pubKey string
	// params are the session variables, unescaped: the parameters the
	// driver does not know, which it sends as SET name = value.
	params map[string]string
}

// parseDriverDSN reads dsn as the driver does:
// [user[:password]@][net[(addr)]]/dbname[?param1=value1&paramN=valueN],
// split at the last '/', the last '@' before it and the first '(' after
// that, the parameters after the first '?' that follows the '/'.
func parseDriverDSN(dsn string) (*driverConfig, error) {
	c := &driverConfig{params: map[string]string{}}
	slash := strings.LastIndexByte(dsn, '/')
	if slash < 0 {
		if dsn != "" {
			return nil, errNoSlash
		}
		return c, c.normalize()
	}
	if slash > 0 {
		at := strings.LastIndexByte(dsn[:slash], '@') // -1: no user
		open := slash
		if k := strings.IndexByte(dsn[at+1:slash], '('); k >= 0 {
			open = at + 1 + k
			if dsn[slash-1] != ')' {
				if strings.ContainsRune(dsn[open+1:slash], ')') {
					return nil, errUnescaped
				}
				return nil, errAddr
			}
			c.addr = dsn[open+1 : slash-1]
		}
		c.net = dsn[at+1 : open]
	}
	dbname := dsn[slash+1:]
	if q := strings.IndexByte(dbname, '?'); q >= 0 {
		if err := c.parseParams(dbname[q+1:]); err != nil {
			return nil, err
		}
		dbname = dbname[:q]
	}
	if _, err := url.PathUnescape(dbname); err != nil {
		return nil, fmt.Errorf("invalid dbname %q: %w", dbname, err)
	}
	return c, c.normalize()
}

// parseParams reads the parameters; one without "=" is ignored, as the
// driver ignores it.
func (c *driverConfig) parseParams(params string) error {
	for _, kv := range strings.Split(params, "&") {
		k, v, found := strings.Cut(kv, "=")
		if !found {
			continue
		}
		if err := c.param(k, v); err != nil {
			return err
		}
	}
	return nil
}

// param checks one parameter as the driver does; a later value of a
// parameter replaces an earlier one.
func (c *driverConfig) param(k, v string) error {
	var err error
	switch k {
	case "allowAllFiles", "allowCleartextPasswords", "allowFallbackToPlaintext", "allowNativePasswords",
		"allowOldPasswords", "checkConnLiveness", "clientFoundRows", "columnsWithAlias", "compress",
		"interpolateParams", "multiStatements", "parseTime", "rejectReadOnly":
		if _, ok := readBool(v); !ok {
			return errors.New("invalid bool value: " + v)
		}
	case "charset": // coordd's check (checkCharset) is stricter than the driver's
	case "collation":
		c.collation = v
	case "loc":
		if v, err = url.QueryUnescape(v); err != nil {
			return err
		}
		_, err = time.LoadLocation(v)
	case "timeTruncate":
		if _, err := time.ParseDuration(v); err != nil {
			return fmt.Errorf("invalid timeTruncate value: %v, error: %w", v, err)
		}
	case "readTimeout", "timeout", "writeTimeout":
		_, err = time.ParseDuration(v)
	case "serverPubKey":
		if c.pubKey, err = url.QueryUnescape(v); err != nil {
			return fmt.Errorf("invalid value for server pub key name: %v", err)
		}
	case "strict":
		return errStrict // the driver panics
	case "tls":
		err = c.setTLS(v)
	case "maxAllowedPacket":
		_, err = strconv.Atoi(v)
	case "connectionAttributes":
		if _, err := url.QueryUnescape(v); err != nil {
			return fmt.Errorf("invalid connectionAttributes value: %v", err)
		}
	default:
		c.params[k], err = url.QueryUnescape(v)
	}
	return err
}

// setTLS reads the tls parameter: a bool, skip-verify or preferred (any
// case), else the name of a registered TLS config, unescaped.
func (c *driverConfig) setTLS(v string) error {
	if b, ok := readBool(v); ok {
		c.tls = strconv.FormatBool(b)
		return nil
	}
	if lv := strings.ToLower(v); lv == "skip-verify" || lv == "preferred" {
		c.tls = lv
		return nil
	}
	name, err := url.QueryUnescape(v)
	if err != nil {
		return fmt.Errorf("invalid value for TLS config name: %v", err)
	}
	c.tls = name
	return nil
}

// normalize refuses what the driver refuses once the DSN is read: a
// network without a default address, and TLS configs or server public
// keys that are not registered (coordd registers none).
func (c *driverConfig) normalize() error {
	if c.net == "" {
		c.net = "tcp"
	}
	if c.addr == "" && c.net != "tcp" && c.net != "unix" {
		return errors.New("default addr for network '" + c.net + "' unknown")
	}
	switch c.tls {
	case "", "false", "true", "skip-verify", "preferred":
	default:
		return errors.New("invalid value / unknown config name: " + c.tls)
	}
	if c.pubKey != "" {
		return errors.New("invalid value / unknown server pub key name: " + c.pubKey)
	}
	return nil
}

// sessionVars are the names of the session variables, sorted.
func (c *driverConfig) sessionVars() []string {
	out := make([]string, 0, len(c.params))
	for k := range c.params {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// readBool is the driver's reading of a bool parameter.
func readBool(v string) (value, ok bool) {
	switch v {
	case "1", "true", "TRUE", "True":
		return true, true
	case "0", "false", "FALSE", "False":
		return false, true
	}
	return false, false
}
