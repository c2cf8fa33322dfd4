package spec

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// FuzzLoad checks that no input makes the loader panic, and that every
// error it returns carries a position.
func FuzzLoad(f *testing.F) {
	for _, s := range goodSpecs {
		f.Add(s, "")
	}
	for _, c := range badCases {
		f.Add(c.files["a.yaml"], c.files["b.yaml"])
	}
	f.Add("backends:\n  db: {type: mysql, dsn: \"u:${file:/run/pw}@tcp(h)/d\"}\n", "backends:\n  r: {type: redis, url: \"redis://:${credential:pw}@h/0\"}\n")
	f.Add("backends:\n  db: {type: mysql, dsn: \"u:${file:missing}@tcp(h)/d\", table_prefix: \"${file:-x}\"}\n", "")
	f.Fuzz(func(t *testing.T, a, b string) {
		getenv := func(k string) (string, bool) {
			if k == CredentialsDirVar {
				return "/creds", true
			}
			return "v", k == "SET"
		}
		// Secret files come from here, not the disk: "pw" files hold a
		// secret that a message must never show.
		read := func(p string) ([]byte, error) {
			if strings.Contains(p, "pw") {
				return []byte("Fuzz-Secret-9\n"), nil
			}
			return nil, os.ErrNotExist
		}
		for _, skip := range []bool{false, true} {
			s, err := LoadFiles(map[string][]byte{"a.yaml": []byte(a), "b.yaml": []byte(b)},
				LoadOptions{Getenv: getenv, SkipEnv: skip, DataDir: "/data", ReadFile: read})
			if err != nil && strings.Contains(err.Error(), "Fuzz-Secret-9") && !strings.Contains(a+b, "Fuzz-Secret-9") {
				t.Fatalf("an error shows a secret file's content:\n%v", err)
			}
			if err == nil {
				checkInvariants(t, s)
				continue
			}
			if s != nil {
				t.Fatalf("spec returned with an error")
			}
			var errs Errors
			if !errors.As(err, &errs) {
				t.Fatalf("error is %T, not Errors: %v", err, err)
			}
			if len(errs) == 0 {
				t.Fatalf("empty Errors")
			}
			for _, e := range errs {
				if e.Pos.File == "" || e.Pos.Line < 1 || e.Pos.Col < 1 {
					t.Fatalf("error without a position: %#v", e)
				}
			}
		}
	})
}

// Entry kinds of FuzzLoadDir, picked by the low bits of a layout byte.
const (
	fzRegular = iota
	fzFIFO
	fzDevZero
	fzDevNull
	fzDirLink
	fzSelfDirLink
	fzDangling
	fzLoop
	fzHuge
	fzLarge
	fzSubdir
	fzFileLink
	fzFIFOLink
	fzSocket
	fzEmpty
	fzKinds
)

// fuzzNames are the names entries take (the high bits of a layout byte):
// spec files, a hidden one and one that is not a spec file.
var fuzzNames = []string{"a.yaml", "b.yml", "c.yaml", "d.yaml", "e.yml", ".hidden.yaml", "notes.txt", "f.yaml"}

// FuzzLoadDir builds a spec directory from the input and loads it: each
// layout byte adds an entry (a file holding a part of content, a FIFO, a
// symlink to /dev/zero, to a directory, dangling or looping, a file over
// the size limit, ...). The last byte 0xff loads the first entry's path
// instead of the directory. Load must return, with a spec or with errors
// that each name a file of the directory; a spec file that cannot be read
// must be named in them.
func FuzzLoadDir(f *testing.F) {
	f.Add([]byte{0x00, 0x11}, "semaphores:\n  s: {limit: 1}\n")
	f.Add([]byte{0x00, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77}, "cron:\n  c: {schedule: \"@daily\", command: x}\n\x1equeues: {q: {}}\n")
	f.Add([]byte{0x08, 0x18, 0x29, 0x39, 0x49}, "")
	f.Add([]byte{0x0a, 0x1b, 0x2c, 0x3d, 0x4e, 0xff}, "semaphores: [\n")
	f.Add([]byte{0x01, 0xff}, "")
	f.Add([]byte{0x02, 0x70, 0xff}, "backends: {mc: {type: memcached, servers: [\"h:1\"], key_prefix: \"a b\"}}\n")
	for _, c := range badCases[:5] {
		f.Add([]byte{0x00, 0x10, 0x21}, c.files["a.yaml"]+"\x1e"+c.files["b.yaml"])
	}
	f.Fuzz(func(t *testing.T, layout []byte, content string) {
		if len(layout) > 16 {
			layout = layout[:16]
		}
		single := len(layout) > 1 && layout[len(layout)-1] == 0xff
		if single {
			layout = layout[:len(layout)-1]
		}
		root := t.TempDir()
		dir := filepath.Join(root, "spec")
		other := filepath.Join(root, "other")
		for _, d := range []string{dir, other} {
			if err := os.Mkdir(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		parts := strings.Split(content, "\x1e")
		var first string
		unreadable := map[string]bool{} // spec files Load must name
		for i, b := range layout {
			name := fuzzNames[int(b>>4)%len(fuzzNames)]
			path := filepath.Join(dir, name)
			if _, err := os.Lstat(path); err == nil {
				continue
			}
			if first == "" {
				first = path
			}
			part := parts[i%len(parts)]
			var err error
			switch int(b&0x0f) % fzKinds {
			case fzRegular:
				err = os.WriteFile(path, []byte(part), 0o644)
			case fzFIFO:
				err = syscall.Mkfifo(path, 0o644)
				unreadable[path] = true
			case fzDevZero:
				err = os.Symlink("/dev/zero", path)
				unreadable[path] = true
			case fzDevNull:
				err = os.Symlink("/dev/null", path)
				unreadable[path] = true
			case fzDirLink:
				err = os.Symlink(other, path)
			case fzSelfDirLink:
				err = os.Symlink(".", path)
			case fzDangling:
				err = os.Symlink(filepath.Join(other, "missing.yaml"), path)
				unreadable[path] = true
			case fzLoop:
				err = os.Symlink(name, path)
				unreadable[path] = true
			case fzHuge:
				err = sparseFile(path, MaxFileSize+1)
				unreadable[path] = true
			case fzLarge:
				err = sparseFile(path, MaxFileSize) // zeros: read, then invalid YAML
			case fzSubdir:
				err = os.Mkdir(path, 0o755)
			case fzFileLink:
				target := filepath.Join(other, name)
				if err = os.WriteFile(target, []byte(part), 0o644); err == nil {
					err = os.Symlink(target, path)
				}
			case fzFIFOLink:
				target := filepath.Join(other, "fifo"+name)
				if err = syscall.Mkfifo(target, 0o644); err == nil {
					err = os.Symlink(target, path)
				}
				unreadable[path] = true
			case fzSocket:
				var l *net.UnixListener
				if l, err = net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"}); err == nil {
					l.SetUnlinkOnClose(false)
					l.Close()
				}
				unreadable[path] = true
			case fzEmpty:
				err = os.WriteFile(path, nil, 0o644)
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		target := dir
		if single && first != "" {
			target = first
		}
		type result struct {
			s   *Spec
			err error
		}
		done := make(chan result, 1)
		go func() {
			s, err := Load(target, LoadOptions{Getenv: func(string) (string, bool) { return "v", true }, DataDir: "/data"})
			done <- result{s, err}
		}()
		var r result
		select {
		case r = <-done:
		case <-time.After(20 * time.Second):
			t.Fatalf("Load(%s) has not returned after 20s", target)
		}
		if r.err == nil {
			checkInvariants(t, r.s)
			for _, n := range r.s.Files {
				if unreadable[n] {
					t.Fatalf("%s was loaded", n)
				}
			}
			return
		}
		if r.s != nil {
			t.Fatalf("spec returned with an error")
		}
		var errs Errors
		if !errors.As(r.err, &errs) || len(errs) == 0 {
			t.Fatalf("error is %T, not Errors: %v", r.err, r.err)
		}
		named := map[string]bool{}
		for _, e := range errs {
			if e.Pos.Line < 1 || e.Pos.Col < 1 || (e.Pos.File != target && !strings.HasPrefix(e.Pos.File, dir+string(filepath.Separator))) {
				t.Fatalf("error does not name a file of %s: %#v", dir, e)
			}
			named[e.Pos.File] = true
		}
		if errors.Is(r.err, ErrTooManyErrors) {
			return // the rest may be cut off
		}
		for p := range unreadable {
			base := filepath.Base(p)
			inSpec := !strings.HasPrefix(base, ".") && (strings.HasSuffix(base, ".yaml") || strings.HasSuffix(base, ".yml"))
			if (target == p || target == dir && inSpec) && !named[p] {
				t.Fatalf("%s cannot be read but no error names it: %v", p, errs)
			}
		}
	})
}

// sparseFile makes a file of size zero bytes without writing them.
func sparseFile(path string, size int64) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := f.Truncate(size); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
