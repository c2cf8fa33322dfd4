package spec

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strings"
)

// envResult is the outcome of expanding one connection field.
type envResult struct {
	// value is the expanded string; with no resolver, references are left
	// as written and only "$$" is unescaped when there are none.
	value string
	// refs counts ${...} references.
	refs int
	// names lists the referenced variables, set or not, in order of
	// appearance (also without a resolver); a ${credential:NAME}
	// references CREDENTIALS_DIRECTORY.
	names []string
	// missing lists referenced variables that are unset and have no default.
	missing []string
	// failed lists why file references could not be read, one message
	// each, naming the file but never its content.
	failed []string
	// malformed describes a syntax error; the value is then unusable.
	malformed string
}

// resolver looks references up: variables, and secret files by absolute
// path (the text of the file, one trailing newline removed, or why it
// cannot be used).
type resolver interface {
	lookupEnv(name string) (string, bool)
	secretFile(path string) (string, error)
}

// CredentialsDirVar is the variable systemd sets to the directory of a
// unit's credentials (LoadCredential=, SetCredential=), where
// ${credential:NAME} reads.
const CredentialsDirVar = "CREDENTIALS_DIRECTORY"

// Reference prefixes inside ${...}. A variable name holds no ":", so
// they cannot be read as one; "${file:-x}" stays the variable "file" with
// a default.
const (
	filePrefix       = "file:"
	credentialPrefix = "credential:"
)

// expandEnv expands the references in s: ${VAR}, ${VAR:-default},
// ${file:PATH} (PATH absolute, or relative to dir) and ${credential:NAME}
// (the file NAME in $CREDENTIALS_DIRECTORY); "$$" is a literal "$" and any
// other "$" is left alone. With res nil it only checks the syntax
// (validate --skip-env). Messages never quote s itself nor what a
// reference resolves to, because connection fields carry passwords.
func expandEnv(s, dir string, res resolver) envResult {
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
		at := i + 1
		i += 2 + end + 1
		var v string
		var ok bool
		switch {
		case strings.HasPrefix(inner, filePrefix) && !strings.HasPrefix(inner, filePrefix+"-"):
			path, msg := filePath(inner[len(filePrefix):], dir)
			if msg != "" {
				r.malformed = fmt.Sprintf("malformed reference \"${file:...}\" at character %d: %s", at, msg)
				return r
			}
			r.refs++
			if res == nil {
				continue
			}
			if v, ok = r.readFile(res, path, "${file:...}"); !ok {
				continue
			}
		case strings.HasPrefix(inner, credentialPrefix):
			name := inner[len(credentialPrefix):]
			if msg := credentialName(name); msg != "" {
				r.malformed = fmt.Sprintf("malformed reference \"${credential:...}\" at character %d: %s", at, msg)
				return r
			}
			r.refs++
			r.names = append(r.names, CredentialsDirVar)
			if res == nil {
				continue
			}
			credDir, set := res.lookupEnv(CredentialsDirVar)
			if !set || credDir == "" {
				r.failed = append(r.failed, fmt.Sprintf("${credential:%s} reads $%s, which is not set: systemd sets it for a unit with LoadCredential=%s:PATH", name, CredentialsDirVar, name))
				continue
			}
			path, msg := filePath(filepath.Join(credDir, name), dir)
			if msg != "" {
				r.failed = append(r.failed, fmt.Sprintf("${credential:%s}: $%s is not a usable directory: %s", name, CredentialsDirVar, msg))
				continue
			}
			if v, ok = r.readFile(res, path, "${credential:"+name+"}"); !ok {
				continue
			}
		default:
			name, def, hasDef := strings.Cut(inner, ":-")
			if !validEnvName(name) {
				r.malformed = fmt.Sprintf("malformed reference \"${...}\" at character %d: a variable name starts with a letter or \"_\" and contains only letters, digits and \"_\"; a secret file is ${file:PATH} or ${credential:NAME} (write \"$$\" for a literal \"$\")", at)
				return r
			}
			r.refs++
			r.names = append(r.names, name)
			if res == nil {
				continue
			}
			v, ok = res.lookupEnv(name)
			switch {
			case hasDef && (!ok || v == ""):
				v = def
			case !ok:
				r.missing = append(r.missing, name)
				continue
			}
		}
		b.WriteString(v)
	}
	if res == nil && r.refs > 0 {
		r.value = s
	} else {
		r.value = b.String()
	}
	return r
}

// readFile resolves a file reference, recording why it failed.
func (r *envResult) readFile(res resolver, path, ref string) (string, bool) {
	v, err := res.secretFile(path)
	if err != nil {
		r.failed = append(r.failed, fmt.Sprintf("%s: cannot read secret file %s: %v", ref, quote(path), err))
		return "", false
	}
	return v, true
}

// filePath makes a secret file's path absolute (relative to dir), or
// says why it cannot be one.
func filePath(p, dir string) (string, string) {
	switch {
	case p == "":
		return "", "the path is empty"
	case strings.Contains(p, "$"):
		return "", "a path is taken as written and holds no \"$\"; for a systemd credential write ${credential:NAME}"
	case strings.IndexByte(p, 0) >= 0:
		return "", "the path holds a NUL byte"
	case !filepath.IsAbs(p):
		p = filepath.Join(dir, p)
	}
	return filepath.Clean(p), ""
}

// credentialName says why name cannot be a systemd credential's name,
// or "".
func credentialName(name string) string {
	switch {
	case name == "":
		return "the name is empty"
	case name == "." || name == "..", strings.ContainsAny(name, "/\x00$"):
		return "a credential name is a file name: not \".\" or \"..\", without \"/\" or \"$\""
	case len(name) > 255:
		return "a credential name has at most 255 bytes"
	}
	return ""
}

// MaxSecretFileSize bounds a file that ${file:...} or ${credential:...}
// reads: it holds one password or token.
const MaxSecretFileSize = 64 << 10

// secretText is the value of a secret file's content: one trailing line
// end ("\n" or "\r\n") removed; a file of more than one line is refused,
// since a secret is one line and a second one means the wrong file (an
// env file, a key pair).
func secretText(data []byte) (string, error) {
	s := strings.TrimSuffix(string(data), "\n")
	s = strings.TrimSuffix(s, "\r")
	if strings.ContainsAny(s, "\n\r\x00") {
		return "", errors.New("it holds more than one line (or a NUL byte); a secret file holds the secret alone, with at most one line end after it")
	}
	return s, nil
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
