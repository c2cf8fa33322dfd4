package redis

import (
	"embed"
	"fmt"
	"strings"

	goredis "github.com/redis/go-redis/v9"
)

// The Lua scripts live in lua/, one script per file, each with its KEYS,
// ARGV and replies in a comment at its top. lua/lib holds the pieces that
// several scripts share (key names, constants, helper functions): a line
// "--#include lib/<name>.lua" in a script stands for that file's text, so
// the text Redis runs is the script's file with its includes written out,
// in order. An included file includes nothing.
//
// Each script is loaded once, at package initialization, into the
// *goredis.Script variable its callers use. Script.Run sends EVALSHA and
// falls back to EVAL when the server does not know the script, so a
// changed comment (a new SHA) costs one EVAL per server, never a failure.
//
//go:embed lua
var luaFiles embed.FS

// luaIncludePrefix starts a line that stands for a lib file.
const luaIncludePrefix = "--#include "

// luaScripts holds every script luaScript loaded, by file name: the tests
// check each against the files and against Redis.
var luaScripts = map[string]*goredis.Script{}

// luaScript loads lua/<name> with its includes written out. A missing or
// malformed file panics at package initialization, so any test of the
// package finds it.
func luaScript(name string) *goredis.Script {
	src, err := luaSource(name)
	if err != nil {
		panic(err)
	}
	if _, dup := luaScripts[name]; dup {
		panic(fmt.Sprintf("redis: lua/%s loaded twice", name))
	}
	s := goredis.NewScript(src)
	luaScripts[name] = s
	return s
}

// luaSource is the text of lua/<name> with its includes written out.
func luaSource(name string) (string, error) {
	b, err := luaFiles.ReadFile("lua/" + name)
	if err != nil {
		return "", fmt.Errorf("redis: lua script: %w", err)
	}
	return luaExpand(name, string(b))
}

// luaExpand replaces each include line of src (the text of lua/<name>)
// with the included file.
func luaExpand(name, src string) (string, error) {
	var out strings.Builder
	for line := range strings.SplitAfterSeq(src, "\n") {
		inc, ok := strings.CutPrefix(line, luaIncludePrefix)
		if !ok {
			out.WriteString(line)
			continue
		}
		lib, err := luaFiles.ReadFile("lua/" + strings.TrimSpace(inc))
		if err != nil {
			return "", fmt.Errorf("redis: lua/%s: include: %w", name, err)
		}
		if strings.Contains("\n"+string(lib), "\n"+luaIncludePrefix) || !strings.HasSuffix(string(lib), "\n") {
			return "", fmt.Errorf("redis: lua/%s: included file %s includes another or lacks its last newline", name, strings.TrimSpace(inc))
		}
		out.Write(lib)
	}
	return out.String(), nil
}
