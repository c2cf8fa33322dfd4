package spec

import (
	"net/url"
	"strings"
)

const redacted = "****"

// RedactDSN returns a MySQL DSN
// ([user[:password]@][net[(addr)]]/dbname[?params]) with the password
// replaced by "****", for logs and plans. It splits the DSN the way
// go-sql-driver/mysql does, and when the DSN is malformed it errs on the
// side of hiding too much.
func RedactDSN(dsn string) string {
	colon, at := dsnPassword(dsn)
	if colon < 0 {
		return dsn
	}
	return dsn[:colon+1] + redacted + dsn[at:]
}

// dsnPassword returns the bounds of the password in dsn: it is
// dsn[colon+1:at]. colon is -1 when there is none.
func dsnPassword(dsn string) (colon, at int) {
	end := strings.LastIndexByte(dsn, '/')
	if end < 0 {
		end = len(dsn)
	}
	at = strings.LastIndexByte(dsn[:end], '@')
	if at < 0 {
		// Perhaps the password itself holds a "/".
		at = strings.LastIndexByte(dsn, '@')
		if at < 0 {
			return -1, -1
		}
	}
	colon = strings.IndexByte(dsn[:at], ':')
	if colon < 0 {
		return -1, -1
	}
	return colon, at
}

// RedactURL returns a redis:// URL with the password replaced by "****".
// The URL is otherwise kept as written (not re-encoded).
func RedactURL(u string) string {
	colon, at := urlPassword(u)
	if colon < 0 {
		return u
	}
	return u[:colon+1] + redacted + u[at:]
}

// urlPassword returns the bounds of the password in u: it is u[colon+1:at].
// colon is -1 when there is none.
func urlPassword(u string) (colon, at int) {
	start := strings.Index(u, "://")
	if start < 0 {
		return -1, -1
	}
	start += 3
	rest := u[start:]
	authEnd := strings.IndexAny(rest, "/?#")
	if authEnd < 0 {
		authEnd = len(rest)
	}
	at = strings.LastIndexByte(rest[:authEnd], '@')
	if _, err := url.Parse(u); err != nil || at < 0 {
		// A password holding "/", "?" or "#" unescaped ends the authority
		// early; when the URL does not parse, hide up to the last "@".
		if err != nil {
			at = strings.LastIndexByte(rest, '@')
		}
		if at < 0 {
			return -1, -1
		}
	}
	c := strings.IndexByte(rest[:at], ':')
	if c < 0 {
		return -1, -1
	}
	return start + c, start + at
}

// scrubSecret removes the secret parts of value from a library's error
// message before it reaches the user.
func scrubSecret(msg, value string) string {
	for _, bounds := range [][2]int{pair(dsnPassword(value)), pair(urlPassword(value))} {
		if bounds[0] < 0 {
			continue
		}
		if pw := value[bounds[0]+1 : bounds[1]]; pw != "" {
			msg = strings.ReplaceAll(msg, pw, redacted)
		}
	}
	return msg
}

func pair(a, b int) [2]int { return [2]int{a, b} }
