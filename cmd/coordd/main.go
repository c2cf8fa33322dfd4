// Command coordd is declarative coordination for a group of redundant
// servers: semaphores, cron tasks and queues declared in YAML, reconciled
// into a shared backend. Each subcommand lives in its own file and stays a
// thin layer over packages that tests call directly.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"regexp"
	"sort"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"

	"github.com/go-sql-driver/mysql"
	"github.com/mattn/go-isatty"
	goredis "github.com/redis/go-redis/v9"

	"github.com/coordd/coordd/internal/child"
)

// runFunc runs a command (or one of its subcommands) and returns the exit
// code.
type runFunc func(ctx context.Context, c *command, env *cliEnv, args []string) int

// command is one subcommand.
type command struct {
	name    string
	summary string
	usage   string
	run     runFunc
}

// dispatch runs the subcommand named by args[0] (sem run, queue push, …).
func dispatch(ctx context.Context, c *command, env *cliEnv, args []string, subs map[string]runFunc) int {
	if len(args) == 0 {
		fmt.Fprint(env.stderr, c.usage)
		return 1
	}
	if args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(env.stdout, c.usage)
		return 0
	}
	sub, ok := subs[args[0]]
	if !ok {
		fmt.Fprintf(env.stderr, "coordd %s: unknown subcommand %q\nRun 'coordd %s --help' for usage.\n", c.name, args[0], c.name)
		return 1
	}
	// The subcommand's flag errors name it: "coordd sem run: ...".
	return sub(ctx, &command{name: c.name + " " + args[0], summary: c.summary, usage: c.usage, run: c.run}, env, args[1:])
}

// cliEnv is what a subcommand may touch; tests replace its fields.
type cliEnv struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	getenv         func(string) string
	isTerminal     bool
	// colour: stdout may carry ANSI colours (wantColour).
	colour bool
	// stderrTerminal: a person reads stderr, so a wait may say what it
	// waits for.
	stderrTerminal bool
	// hostname is the default --host-id; nil means os.Hostname.
	hostname func() (string, error)
}

var commands = []*command{validateCmd, planCmd, applyCmd, runCmd, statusCmd, semCmd, rateCmd, cronCmd, queueCmd, versionCmd}

func main() {
	// First of all, before a secret is read or a command started: no
	// command coordd starts may read this process's environment or memory
	// (child.DisableDumps).
	if err := child.DisableDumps(); err != nil {
		fmt.Fprintf(os.Stderr, "coordd: cannot keep its memory from the commands it runs: %v\n", err)
		os.Exit(1)
	}
	// Started as a child shim (see internal/child): run it and exit.
	child.MaybeRunShim()
	child.DefaultShim = selfExe()
	// The MySQL driver and go-redis print what they consider critical (a
	// connection that broke) on stderr by themselves; every such error also
	// reaches coordd as an error it handles and reports. `coordd run` sends
	// these lines to its log at debug level; the short-lived commands drop
	// them, so that their stderr stays theirs and a JSON log stays JSON.
	_ = mysql.SetLogger(&mysql.NopLogger{})
	goredis.SetLogger(nopRedisLog{})
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	env := &cliEnv{stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr, getenv: os.Getenv, isTerminal: stdinIsTerminal(),
		colour: wantColour(os.Getenv, isatty.IsTerminal(os.Stdout.Fd())), stderrTerminal: isatty.IsTerminal(os.Stderr.Fd())}
	code := run(ctx, env, os.Args[1:])
	stop()
	os.Exit(code)
}

// selfExe is this executable, which runs the child shim (main calls
// child.MaybeRunShim first); "" (no shim) when it cannot be found.
var selfExe = sync.OnceValue(func() string {
	exe, err := os.Executable()
	if err != nil {
		return ""
	}
	return exe
})

func run(ctx context.Context, env *cliEnv, args []string) int {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		if len(args) > 1 {
			if c := lookup(args[1]); c != nil {
				fmt.Fprint(env.stdout, c.usage)
				return 0
			}
		}
		if len(args) == 0 {
			usage(env.stderr)
			return 1
		}
		usage(env.stdout)
		return 0
	}
	c := lookup(args[0])
	if c == nil {
		fmt.Fprintf(env.stderr, "coordd: unknown command %q\nRun 'coordd --help' for the commands.\n", args[0])
		return 1
	}
	return c.run(ctx, c, env, args[1:])
}

func lookup(name string) *command {
	for _, c := range commands {
		if c.name == name {
			return c
		}
	}
	return nil
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "Usage: coordd COMMAND [FLAGS]")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Commands:")
	cs := append([]*command{}, commands...)
	sort.Slice(cs, func(i, j int) bool { return cs[i].name < cs[j].name })
	for _, c := range cs {
		fmt.Fprintf(w, "  %-10s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Run 'coordd COMMAND --help' for a command's flags.")
}

// newFlags returns a FlagSet for c. --help prints the command's usage and
// its flags on stdout (flagExit makes it exit 0). A flag error prints one
// line and where the help is on stderr, not the whole help: the error is
// what a person needs to see, and 30 lines of flags would scroll it away.
// The flag package reports both through Usage; an error has written its
// message to the output first, so Usage tells them apart by that.
func newFlags(c *command, env *cliEnv) *flag.FlagSet {
	fs := flag.NewFlagSet(c.name, flag.ContinueOnError)
	var msg strings.Builder
	fs.SetOutput(&msg)
	fs.Usage = func() {
		if msg.Len() == 0 {
			fmt.Fprint(env.stdout, c.usage)
			fmt.Fprintln(env.stdout, "\nFlags:")
			printFlags(env.stdout, fs)
			return
		}
		fmt.Fprintf(env.stderr, "coordd %s: %s\n", c.name, dashDash(explainParseError(fs, strings.TrimSpace(msg.String()))))
		fmt.Fprintf(env.stderr, "Run 'coordd %s --help' for usage.\n", c.name)
		msg.Reset()
	}
	return fs
}

// parseErrorFlag finds the flag of the flag package's value error
// `invalid value "x" for flag -name: parse error`.
var parseErrorFlag = regexp.MustCompile(`for flag -([^:]+): parse error$`)

// explainParseError replaces the flag package's bare "parse error" with
// the form the flag's value takes.
func explainParseError(fs *flag.FlagSet, msg string) string {
	m := parseErrorFlag.FindStringSubmatch(msg)
	if m == nil {
		return msg
	}
	f := fs.Lookup(m[1])
	if f == nil {
		return msg
	}
	var want string
	switch fmt.Sprintf("%T", f.Value) {
	case "*flag.durationValue":
		want = "not a duration: give a number and a unit, such as 30s, 5m or 1h30m"
	case "*flag.intValue", "*flag.int64Value", "*flag.uintValue", "*flag.uint64Value":
		want = "not a whole number"
	case "*flag.boolValue":
		want = "not true or false"
	case "*flag.float64Value":
		want = "not a number"
	default:
		return msg
	}
	return strings.TrimSuffix(msg, "parse error") + want
}

// printFlags prints fs's flags as a person types them: --name for a long
// flag (Go's PrintDefaults writes -name), its short form beside it.
func printFlags(w io.Writer, fs *flag.FlagSet) {
	short := map[string]string{} // long name -> short name
	fs.VisitAll(func(f *flag.Flag) {
		if long, ok := strings.CutPrefix(f.Usage, "short for --"); ok {
			short[long] = f.Name
		}
	})
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fs.VisitAll(func(f *flag.Flag) {
		if strings.HasPrefix(f.Usage, "short for --") {
			return
		}
		typ, usage := flag.UnquoteUsage(f)
		name := dash(f.Name)
		if s, ok := short[f.Name]; ok {
			name = dash(s) + ", " + name
		}
		if typ != "" {
			name += " " + typ
		}
		switch {
		case f.DefValue == "" || f.DefValue == "0" || f.DefValue == "false" || f.DefValue == "0s":
		case fmt.Sprintf("%T", f.Value) == "*flag.stringValue":
			usage += fmt.Sprintf(" (default %q)", f.DefValue)
		default:
			usage += fmt.Sprintf(" (default %s)", f.DefValue)
		}
		fmt.Fprintf(tw, "  %s\t%s\n", name, usage)
	})
	tw.Flush()
}

// dash is a flag as typed: -f for one letter, --name for a word.
func dash(name string) string {
	if len(name) == 1 {
		return "-" + name
	}
	return "--" + name
}

// flagInMsg is a flag as the flag package names it in an error (-name).
var flagInMsg = regexp.MustCompile(`(^|[\s:])-([a-z][a-z-]+)\b`)

// dashDash rewrites the flag package's -name in an error as --name.
func dashDash(msg string) string {
	return flagInMsg.ReplaceAllString(msg, "$1--$2")
}

// parseArgs parses flags that may appear anywhere before a "--", including
// after positional arguments (Go's flag package alone stops at the first
// positional). It returns the positionals and everything after "--".
func parseArgs(fs *flag.FlagSet, args []string) (positional, rest []string, err error) {
	for {
		if err := fs.Parse(args); err != nil {
			return nil, nil, err
		}
		consumed := len(args) - fs.NArg()
		if consumed > 0 && args[consumed-1] == "--" {
			return positional, fs.Args(), nil
		}
		if fs.NArg() == 0 {
			return positional, nil, nil
		}
		positional = append(positional, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

// flagExit maps a flag parse error to an exit code: --help is success.
func flagExit(err error) int {
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	return 1
}

// defaultSpecPath is the spec without -f or $COORDD_SPEC.
const defaultSpecPath = "/etc/coordd"

// specFlag adds -f/--file, defaulting to $COORDD_SPEC, then /etc/coordd.
func specFlag(fs *flag.FlagSet, env *cliEnv) *string {
	def := env.getenv("COORDD_SPEC")
	if def == "" {
		def = defaultSpecPath
	}
	p := new(string)
	fs.StringVar(p, "file", def, "the spec's `PATH`: a file or a directory of *.yaml/*.yml files ($COORDD_SPEC)")
	fs.StringVar(p, "f", def, "short for --file")
	return p
}

func noPositional(env *cliEnv, name string, pos []string) bool {
	if len(pos) > 0 {
		fmt.Fprintf(env.stderr, "coordd %s: unexpected argument %q\n", name, strings.Join(pos, " "))
		return false
	}
	return true
}

// nopRedisLog drops go-redis's own messages (see main).
type nopRedisLog struct{}

func (nopRedisLog) Printf(context.Context, string, ...any) {}
