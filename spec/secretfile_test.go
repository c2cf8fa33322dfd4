package spec

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/coordd/coordd/internal/fsblock"
)

// secretDir makes a directory of secret files and returns its path.
func secretDir(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// envWith is a Getenv that knows only vars.
func envWith(vars map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := vars[k]; return v, ok }
}

// TestSecretFiles: ${file:PATH} and ${credential:NAME} put a file's text
// in a connection field, one trailing line end removed; a relative path
// is relative to the spec file; CREDENTIALS_DIRECTORY counts as a
// variable the backends reference.
func TestSecretFiles(t *testing.T) {
	secrets := secretDir(t, map[string]string{
		"db-pw":          "p@ss/w#rd?x\n",
		"creds/redis-pw": "r3dis\r\n",
		"prefix":         "pfx_",
		"empty":          "",
	})
	specDir := secretDir(t, map[string]string{"s/redis-user": "coordd\n"})
	writeSpec(t, filepath.Join(specDir, "coordd.yaml"), `backends:
  db: {type: mysql, dsn: "coordd:${file:`+secrets+`/db-pw}@tcp(db1:3306)/coordd", table_prefix: "${file:`+secrets+`/prefix}"}
  r: {type: redis, url: "redis://${file:s/redis-user}:${credential:redis-pw}@cache1:6379/0"}
  e: {type: redis, url: "redis://:${file:`+secrets+`/empty}@cache2:6379/0"}
cluster: {backend: db}
`)
	s, err := Load(specDir, LoadOptions{DataDir: "/data", Getenv: envWith(map[string]string{CredentialsDirVar: filepath.Join(secrets, "creds")})})
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Backends["db"].DSN; got != "coordd:p@ss/w#rd?x@tcp(db1:3306)/coordd" {
		t.Errorf("dsn = %q", got)
	}
	if got := s.Backends["db"].TablePrefix; got != "pfx_" {
		t.Errorf("table_prefix = %q", got)
	}
	if got := s.Backends["r"].URL; got != "redis://coordd:r3dis@cache1:6379/0" {
		t.Errorf("url = %q", got)
	}
	if got := s.Backends["e"].URL; got != "redis://:@cache2:6379/0" {
		t.Errorf("url with an empty secret = %q", got)
	}
	if got := s.BackendEnv(); !reflect.DeepEqual(got, []string{CredentialsDirVar}) {
		t.Errorf("BackendEnv() = %q, want %s", got, CredentialsDirVar)
	}
	if got := RedactDSN(s.Backends["db"].DSN); got != "coordd:****@tcp(db1:3306)/coordd" {
		t.Errorf("plans show the DSN as %q", got)
	}
	// The hash leaves the password out, as with a variable.
	other := secretDir(t, map[string]string{"db-pw": "another\n", "prefix": "pfx_"})
	s2, err := LoadFiles(map[string][]byte{"a.yaml": []byte(`backends:
  db: {type: mysql, dsn: "coordd:${file:` + other + `/db-pw}@tcp(db1:3306)/coordd", table_prefix: "${file:` + other + `/prefix}"}
`)}, LoadOptions{DataDir: "/data"})
	if err != nil {
		t.Fatal(err)
	}
	s1, err := LoadFiles(map[string][]byte{"a.yaml": []byte(`backends:
  db: {type: mysql, dsn: "coordd:${file:` + secrets + `/db-pw}@tcp(db1:3306)/coordd", table_prefix: "${file:` + secrets + `/prefix}"}
`)}, LoadOptions{DataDir: "/data"})
	if err != nil {
		t.Fatal(err)
	}
	if s1.Hash() != s2.Hash() {
		t.Error("a password read from a file changed the spec hash")
	}
}

// TestSecretFileErrors: a secret file that cannot be used is an error of
// the field, at its position, that names the file and why, never what the
// file or the variables hold.
func TestSecretFileErrors(t *testing.T) {
	const content = "Top-S3cret-Line1"
	dir := secretDir(t, map[string]string{"two-lines": content + "\nsecond\n", "big": strings.Repeat("x", MaxSecretFileSize+1)})
	fifo := filepath.Join(dir, "fifo")
	mkfifo(t, fifo)
	cases := []struct{ ref, want string }{
		{"${file:" + dir + "/missing}", `${file:...}: cannot read secret file "` + dir + `/missing": no such file or directory`},
		{"${file:" + dir + "/two-lines}", `${file:...}: cannot read secret file "` + dir + `/two-lines": it holds more than one line`},
		{"${file:" + dir + "/big}", `${file:...}: cannot read secret file "` + dir + `/big": too large: 65537 bytes, more than 65536 bytes`},
		{"${file:" + fifo + "}", `cannot read secret file "` + fifo + `": not a regular file (fifo)`},
		{"${file:/dev/zero}", `cannot read secret file "/dev/zero": not a regular file (character device)`},
		{"${file:/proc/kmsg}", `cannot read secret file "/proc/kmsg": not a regular file (procfs, a kernel file system)`},
		{"${file:" + dir + "}", `cannot read secret file "` + dir + `": not a regular file (directory)`},
		{"${file:}", `malformed reference "${file:...}" at character 8: the path is empty`},
		{"${file:${X}/pw}", `malformed reference "${file:...}" at character 8: a path is taken as written and holds no "$"`},
		{"${credential:db}", `${credential:db} reads $CREDENTIALS_DIRECTORY, which is not set: systemd sets it for a unit with LoadCredential=db:PATH`},
		{"${credential:../db}", `malformed reference "${credential:...}" at character 8: a credential name is a file name`},
		{"${credential:}", `malformed reference "${credential:...}" at character 8: the name is empty`},
		{"${file:x:y}", `${file:...}: cannot read secret file "/specs/x:y": no such file or directory`},
	}
	for _, c := range cases {
		src := "backends:\n  db: {type: mysql, dsn: \"coordd:" + c.ref + "@tcp(db1:3306)/coordd\"}\n"
		_, err := LoadFiles(map[string][]byte{"/specs/a.yaml": []byte(src)}, LoadOptions{DataDir: "/data", Getenv: envWith(nil), ReadTimeout: 10 * time.Second})
		var errs Errors
		if !errors.As(err, &errs) || len(errs) != 1 {
			t.Errorf("%s: got %v, want one error", c.ref, err)
			continue
		}
		e := errs[0]
		if posString(e.Pos) != "/specs/a.yaml:2:26" || e.Address != "backends.db.dsn" || !strings.Contains(e.Msg, c.want) {
			t.Errorf("%s: got %s, want /specs/a.yaml:2:26: backends.db.dsn: ...%s", c.ref, e, c.want)
		}
		if strings.Contains(e.Error(), content) || strings.Contains(e.Error(), "second") {
			t.Errorf("%s: the error shows the file's content: %s", c.ref, e)
		}
	}
}

// TestSecretFilesSkipEnv: validate --skip-env reads no secret file and
// leaves the references as written; their syntax is still checked.
func TestSecretFilesSkipEnv(t *testing.T) {
	read := func(p string) ([]byte, error) {
		t.Errorf("read %s with SkipEnv", p)
		return nil, errors.New("no")
	}
	src := "backends:\n  db: {type: mysql, dsn: \"coordd:${file:/run/pw}${credential:db}@tcp(db1:3306)/coordd\"}\n"
	s := mustLoad(t, one(src), LoadOptions{SkipEnv: true, ReadFile: read, Getenv: envWith(nil)})
	if got := s.Backends["db"].DSN; got != "coordd:${file:/run/pw}${credential:db}@tcp(db1:3306)/coordd" {
		t.Errorf("dsn = %q", got)
	}
	_, errs := loadStrings(t, one("backends:\n  db: {type: mysql, dsn: \"${file:}@tcp(h)/d\"}\n"), LoadOptions{SkipEnv: true, ReadFile: read})
	if len(errs) != 1 || !strings.Contains(errs[0].Msg, "the path is empty") {
		t.Errorf("a malformed reference with SkipEnv: %v", errs)
	}
}

// TestSecretFileReadBounded: a secret file whose open never returns fails
// the load at the read deadline, like a spec file.
func TestSecretFileReadBounded(t *testing.T) {
	dir := secretDir(t, map[string]string{"pw": "x\n"})
	fsblock.Block(t, filepath.Join(dir, "pw"))
	src := "backends:\n  db: {type: mysql, dsn: \"coordd:${file:" + dir + "/pw}@tcp(db1:3306)/coordd\"}\n"
	done := make(chan error, 1)
	go func() {
		_, err := LoadFiles(map[string][]byte{"a.yaml": []byte(src)}, LoadOptions{DataDir: "/data", ReadTimeout: 100 * time.Millisecond})
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "backends.db.dsn: ${file:...}: cannot read secret file \""+dir+"/pw\": the file system did not answer within 100ms") {
			t.Errorf("got %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the load has not returned after 30s")
	}
}

// FuzzExpandReferences: expansion never panics, never quotes what a
// variable or a secret file holds in a message, and without a resolver
// (--skip-env) leaves every reference as written.
func FuzzExpandReferences(f *testing.F) {
	for _, s := range []string{
		"u:${file:/run/pw}@tcp(h)/d", "${credential:db}", "${file:rel/pw}", "${file:-def}", "${file:}",
		"${file:${X}}", "${credential:../x}", "${VAR:-d}${file:/a}$${file:/b}", "${", "$$", "${file:/a}}",
		"redis://:${credential:r}@h/0", "${credential:a/b}", "${file:/x\x00y}",
	} {
		f.Add(s, "Secret-Value")
	}
	f.Fuzz(func(t *testing.T, s, secret string) {
		res := fuzzResolver{secret}
		r := expandEnv(s, "/specs", res)
		if len(secret) >= 4 && !strings.Contains(s, secret) {
			for _, m := range append(append([]string{r.malformed}, r.failed...), r.missing...) {
				if strings.Contains(m, secret) {
					t.Fatalf("message quotes the secret: %q", m)
				}
			}
		}
		skip := expandEnv(s, "/specs", nil)
		if skip.malformed != r.malformed || skip.refs != r.refs || !reflect.DeepEqual(skip.names, r.names) {
			t.Fatalf("skip-env disagrees: %+v vs %+v", skip, r)
		}
		if skip.malformed == "" && skip.refs > 0 && skip.value != s {
			t.Fatalf("skip-env changed %q into %q", s, skip.value)
		}
	})
}

// fuzzResolver answers every variable and file with the secret, except
// files whose name says "missing".
type fuzzResolver struct{ secret string }

func (f fuzzResolver) lookupEnv(string) (string, bool) { return f.secret, true }

func (f fuzzResolver) secretFile(p string) (string, error) {
	if strings.Contains(p, "missing") {
		return "", errors.New("no such file or directory")
	}
	return f.secret, nil
}
