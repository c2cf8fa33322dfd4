package redis

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	goredis "github.com/redis/go-redis/v9"
	lua "github.com/yuin/gopher-lua"
	luaparse "github.com/yuin/gopher-lua/parse"
)

// luaTestScript is a script of a test: src with its include lines written
// out, as luaScript does for the files in lua/.
func luaTestScript(src string) *goredis.Script {
	s, err := luaExpand("(test)", src)
	if err != nil {
		panic(err)
	}
	return goredis.NewScript(s)
}

// luaScriptCalls finds, in the package's production files, the file names
// passed to luaScript and every NewScript call outside luaScript.
func luaScriptCalls(t *testing.T) (loaded []string, stray []string) {
	t.Helper()
	fset := token.NewFileSet()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			if fd, ok := d.(*ast.FuncDecl); ok && fd.Name.Name == "luaScript" && fd.Recv == nil {
				continue // the loader itself
			}
			ast.Inspect(d, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok {
					return true
				}
				switch fn := call.Fun.(type) {
				case *ast.Ident:
					if fn.Name != "luaScript" {
						return true
					}
					lit, ok := call.Args[0].(*ast.BasicLit)
					if !ok || lit.Kind != token.STRING {
						stray = append(stray, fset.Position(call.Pos()).String()+": luaScript with a computed name")
						return true
					}
					v, err := strconv.Unquote(lit.Value)
					if err != nil {
						t.Fatal(err)
					}
					loaded = append(loaded, v)
				case *ast.SelectorExpr:
					if fn.Sel.Name == "NewScript" {
						stray = append(stray, fset.Position(call.Pos()).String()+": NewScript outside luaScript")
					}
				}
				return true
			})
		}
	}
	return loaded, stray
}

// TestLuaFilesMatchScriptVariables: every script variable of the package
// is loaded from a file in lua/ (no script text left in Go strings), every
// file in lua/ is loaded by exactly one variable, and every file in lua/lib
// is included by some script, so no file is dead and none is duplicated.
func TestLuaFilesMatchScriptVariables(t *testing.T) {
	loaded, stray := luaScriptCalls(t)
	for _, s := range stray {
		t.Errorf("%s: every script comes from a file in lua/", s)
	}
	var scripts, libs []string
	err := fs.WalkDir(luaFiles, "lua", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel := strings.TrimPrefix(path, "lua/")
		switch {
		case !strings.HasSuffix(rel, ".lua"):
			t.Errorf("lua/%s: not a .lua file", rel)
		case strings.HasPrefix(rel, "lib/"):
			libs = append(libs, rel)
		case strings.Contains(rel, "/"):
			t.Errorf("lua/%s: scripts sit in lua/, shared pieces in lua/lib", rel)
		default:
			scripts = append(scripts, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(loaded)
	for i := 1; i < len(loaded); i++ {
		if loaded[i] == loaded[i-1] {
			t.Errorf("lua/%s: loaded by two variables", loaded[i])
		}
	}
	for _, s := range scripts {
		if !slices.Contains(loaded, s) {
			t.Errorf("lua/%s: no variable loads it", s)
		}
	}
	for _, s := range loaded {
		if !slices.Contains(scripts, s) {
			t.Errorf("luaScript(%q): no such script in lua/", s)
		}
	}
	if len(luaScripts) != len(scripts) {
		t.Errorf("%d scripts loaded at initialization, %d files in lua/", len(luaScripts), len(scripts))
	}
	included := map[string]bool{}
	for _, s := range scripts {
		b, err := luaFiles.ReadFile("lua/" + s)
		if err != nil {
			t.Fatal(err)
		}
		for line := range strings.Lines(string(b)) {
			if inc, ok := strings.CutPrefix(line, luaIncludePrefix); ok {
				included[strings.TrimSpace(inc)] = true
			}
		}
	}
	for _, l := range libs {
		if !included[l] {
			t.Errorf("lua/%s: no script includes it", l)
		}
	}
	for l := range included {
		if !slices.Contains(libs, l) {
			t.Errorf("include %s: only files of lua/lib are included", l)
		}
	}
}

// TestLuaExpandRejectsBadIncludes: an include of a missing file, or of a
// file that includes another, fails instead of loading a partial script.
func TestLuaExpandRejectsBadIncludes(t *testing.T) {
	for _, src := range []string{
		"--#include lib/missing.lua\nreturn 1\n",
		"--#include sem_acquire.lua\nreturn 1\n", // a script, which includes lib files
	} {
		if _, err := luaExpand("(test)", src); err == nil {
			t.Errorf("%q: expanded without an error", src)
		}
	}
	got, err := luaExpand("(test)", "local a = 1\n--#include lib/cron_final.lua\nreturn a\n")
	if err != nil {
		t.Fatal(err)
	}
	lib, err := os.ReadFile("lua/lib/cron_final.lua")
	if err != nil {
		t.Fatal(err)
	}
	if want := "local a = 1\n" + string(lib) + "return a\n"; got != want {
		t.Errorf("expanded:\n%s\nwant:\n%s", got, want)
	}
}

// TestLuaScriptsLoadInRedis: the server compiles every script (SCRIPT LOAD
// reports a syntax error of any path, even one no test runs) and names it
// by the SHA the client sends with EVALSHA.
func TestLuaScriptsLoadInRedis(t *testing.T) {
	s := openSemStores(t, 1)[0]
	if len(luaScripts) == 0 {
		t.Fatal("no script loaded")
	}
	for name, sc := range luaScripts {
		sha, err := sc.Load(t.Context(), s.rdb).Result()
		if err != nil {
			t.Errorf("lua/%s: %v", name, err)
			continue
		}
		if sha != sc.Hash() {
			t.Errorf("lua/%s: server SHA %s, client %s", name, sha, sc.Hash())
		}
	}
}

// TestLuaConstantsAgree: the constants that the one-slot fast paths write
// out, before lib/sem_consts.lua is included, are the library's, and the
// lock's grace is the one Go adds to the lock's TTL (semLockTTL).
func TestLuaConstantsAgree(t *testing.T) {
	consts, err := luaFiles.ReadFile("lua/lib/sem_consts.lua")
	if err != nil {
		t.Fatal(err)
	}
	value := func(name string) string {
		for line := range strings.Lines(string(consts)) {
			if v, ok := strings.CutPrefix(line, "local "+name+" = "); ok {
				return strings.TrimSpace(v)
			}
		}
		t.Fatalf("lib/sem_consts.lua: no %s", name)
		return ""
	}
	grace, bias := value("GRACE_MS"), value("BIAS")
	if want := strconv.FormatInt(semLockGrace.Milliseconds(), 10); grace != want {
		t.Errorf("GRACE_MS = %s, semLockGrace is %s ms", grace, want)
	}
	if bias != strconv.FormatInt(1<<52, 10) {
		t.Errorf("BIAS = %s, want 2^52", bias)
	}
	for file, uses := range map[string][]string{
		"sem_fast_acquire.lua": {"c + " + bias + ","},
		"sem_fast_release.lua": {"pt > " + grace + " + 2"},
		"raise_counter.lua":    {"v + " + bias + " < now", "now - " + bias + ")"},
	} {
		b, err := luaFiles.ReadFile("lua/" + file)
		if err != nil {
			t.Fatal(err)
		}
		for _, u := range uses {
			if !strings.Contains(string(b), u) {
				t.Errorf("lua/%s does not contain %q", file, u)
			}
		}
	}
}

// luaGlobalsAllowed are the globals a script may read: the ones Redis gives
// a script (Lua 5.1's base library and the libraries Redis loads).
var luaGlobalsAllowed = map[string]bool{
	"redis": true, "KEYS": true, "ARGV": true,
	"string": true, "table": true, "math": true, "cjson": true, "cmsgpack": true, "bit": true, "struct": true,
	"tonumber": true, "tostring": true, "type": true, "ipairs": true, "pairs": true, "next": true,
	"unpack": true, "select": true, "error": true, "pcall": true, "assert": true,
}

// luaGlobals compiles src (Lua 5.1, as Redis runs it) and returns the
// globals it reads and writes. The compiler resolves locals, upvalues and
// scopes, so what is left in GETGLOBAL and SETGLOBAL is a true global.
func luaGlobals(name, src string) (read, written []string, err error) {
	chunk, err := luaparse.Parse(strings.NewReader(src), name)
	if err != nil {
		return nil, nil, err
	}
	proto, err := lua.Compile(chunk, name)
	if err != nil {
		return nil, nil, err
	}
	var walk func(p *lua.FunctionProto)
	walk = func(p *lua.FunctionProto) {
		for _, inst := range p.Code {
			// Lua 5.1's layout: the opcode in the top 6 bits, Bx (a
			// constant's index) in the low 18.
			op, bx := int(inst>>26), int(inst&0x3ffff)
			switch op {
			case lua.OP_GETGLOBAL:
				read = append(read, p.Constants[bx].String())
			case lua.OP_SETGLOBAL:
				written = append(written, p.Constants[bx].String())
			}
		}
		for _, f := range p.FunctionPrototypes {
			walk(f)
		}
	}
	walk(proto)
	return read, written, nil
}

// TestLuaScriptsUseNoUnknownGlobal: no script reads a global Redis does not
// define (a misspelt helper or a local out of scope, which Redis reports
// only when that line runs, maybe on a rare path) or writes one (Redis
// refuses). The check itself must find both in a sample.
func TestLuaScriptsUseNoUnknownGlobal(t *testing.T) {
	read, written, err := luaGlobals("sample", "local function f() return now_uss() end\nx = f()\nreturn redis.call('TIME')\n")
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(read)
	if !slices.Equal(read, []string{"now_uss", "redis"}) || !slices.Equal(written, []string{"x"}) {
		t.Fatalf("the check reads the sample's globals as %v, written %v", read, written)
	}
	if len(luaScripts) == 0 {
		t.Fatal("no script loaded")
	}
	for name := range luaScripts {
		src, err := luaSource(name)
		if err != nil {
			t.Fatal(err)
		}
		read, written, err := luaGlobals(name, src)
		if err != nil {
			t.Errorf("lua/%s: %v", name, err)
			continue
		}
		for _, g := range read {
			if !luaGlobalsAllowed[g] {
				t.Errorf("lua/%s reads the unknown global %s", name, g)
			}
		}
		for _, g := range written {
			t.Errorf("lua/%s writes the global %s", name, g)
		}
	}
}
