package spec

import (
	"github.com/coordd/coordd/internal/pgdsn"

	"errors"
	"net/url"
	"regexp"
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
func scrubSecret(msg, value string) string { return RedactSecrets(msg, value) }

// secretSpans lists the parts of value, a MySQL DSN, a PostgreSQL DSN or
// a redis URL, that may hold a password, splitting it every way a parser
// might: as a DSN (user:password@...), as a URL, as a DSN whose "@" is
// missing, where the driver takes user:password for the network's name,
// and as PostgreSQL keyword/value pairs (password=...).
func secretSpans(value string) []string {
	var out []string
	add := func(colon, at int) {
		if colon >= 0 && at > colon+1 {
			out = append(out, value[colon+1:at])
		}
	}
	if loc := pgPasswordRE.FindStringIndex(value); loc != nil && !strings.Contains(value, "://") {
		if s, err := pgdsn.Parse(value); err == nil && s.Password.End > s.Password.Start {
			out = append(out, value[s.Password.Start:s.Password.End])
		} else if rest := strings.Trim(value[loc[1]:], " '"); err != nil && rest != "" {
			// Keyword/value pairs that do not parse: hide all after
			// the keyword.
			out = append(out, rest)
		}
	}
	if strings.Contains(value, "://") {
		add(urlPassword(value))
		return out
	}
	add(dsnPassword(value))
	if !strings.Contains(value, "@") {
		end := strings.IndexAny(value, "(/")
		if end < 0 {
			end = len(value)
		}
		if colon := strings.IndexByte(value[:end], ':'); colon >= 0 {
			add(colon, end)
		}
	}
	return out
}

// pgPasswordRE finds the password keyword of PostgreSQL keyword/value
// pairs.
var pgPasswordRE = regexp.MustCompile(`(^|\s)password\s*=`)

// minFragment is the shortest piece of a password that RedactSecrets
// hides wherever it appears: a driver's message may quote a piece of a
// malformed DSN or URL, not the password whole. Shorter pieces would hide
// common words of the messages ("pass" of "using password: YES"); the
// pieces that parsers are known to quote never reach a message (URLError,
// the DSN's network check).
const minFragment = 6

// maxRedactWork bounds the comparison of a message with a password
// (their lengths multiplied); past it the message is replaced whole.
const maxRedactWork = 4 << 20

// RedactSecrets returns msg with every piece of the passwords of values
// (MySQL DSNs or redis URLs) replaced by "****": each run of at least
// six bytes that also appears in a password, and a shorter password (of
// three bytes or more) where it appears whole. It is for the messages of parsers and drivers,
// which quote what they were given, whole or in part.
func RedactSecrets(msg string, values ...string) string {
	for _, v := range values {
		for _, secret := range secretSpans(v) {
			msg = redactFragments(msg, secret)
		}
	}
	return msg
}

// RedactPasswords is RedactSecrets for values that are passwords
// themselves (a redis sentinel's), not connection strings holding one.
func RedactPasswords(msg string, passwords ...string) string {
	for _, p := range passwords {
		if p != "" {
			msg = redactFragments(msg, p)
		}
	}
	return msg
}

// redactFragments hides in msg every common substring with secret of at
// least minFragment bytes (the whole secret when it is shorter).
func redactFragments(msg, secret string) string {
	if len(secret) < minFragment {
		if len(secret) < 3 {
			return msg // hiding one or two bytes everywhere would hide the message
		}
		return strings.ReplaceAll(msg, secret, redacted)
	}
	if len(msg)*len(secret) > maxRedactWork {
		return "(a message that may quote a password, hidden)"
	}
	// longest[i] is the longest common substring of msg and secret that
	// ends at msg[i]: the classic table, one row at a time.
	longest := make([]int, len(msg))
	prev, cur := make([]int, len(secret)+1), make([]int, len(secret)+1)
	for i := 0; i < len(msg); i++ {
		for j := 1; j <= len(secret); j++ {
			if msg[i] == secret[j-1] {
				cur[j] = prev[j-1] + 1
				longest[i] = max(longest[i], cur[j])
			} else {
				cur[j] = 0
			}
		}
		prev, cur = cur, prev
	}
	hide := make([]bool, len(msg))
	for i, n := range longest {
		if n >= minFragment {
			for k := i - n + 1; k <= i; k++ {
				hide[k] = true
			}
		}
	}
	var b strings.Builder
	for i := 0; i < len(msg); i++ {
		if !hide[i] {
			b.WriteByte(msg[i])
			continue
		}
		b.WriteString(redacted)
		for i+1 < len(msg) && hide[i+1] {
			i++
		}
	}
	return b.String()
}

// quotedRE matches a Go-quoted string in a message.
var quotedRE = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)

// URLError is the reason url.Parse gave for refusing a URL, without the
// URL and without the pieces of it that the reason quotes (`invalid port
// ":q7Zr" after host` is what a password holding "/" gives): a password
// that holds "/", "?", "#" or "@" unescaped splits the URL where the
// parser does not expect it, and any piece may be quoted.
func URLError(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	msg := strings.Join(strings.Fields(quotedRE.ReplaceAllString(err.Error(), "")), " ")
	return msg + ` (a password holding "/", "?", "#", "@" or "%" must be percent-encoded: %2F, %3F, %23, %40, %25)`
}
