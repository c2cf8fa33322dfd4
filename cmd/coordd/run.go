package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/hashicorp/go-hclog"
	goredis "github.com/redis/go-redis/v9"

	"github.com/coordd/coordd/daemon"
	"github.com/coordd/coordd/dashboard"
	"github.com/coordd/coordd/internal/version"
	"github.com/coordd/coordd/spec"
)

var runCmd = &command{
	name:    "run",
	summary: "run the daemon: leader election, the scheduler, reload, apply and resync",
	usage: `Usage: coordd run [-f PATH] [--host-id ID] [--log-json] [--log-level LEVEL]
                  [--shutdown-grace D] [--resync D] [--listen ADDR]
                  [--dashboard=false] [--dashboard-actions --dashboard-token-file PATH]
                  [--dashboard-host NAME]...

Runs coordd on this server. Run it on every server with the same spec. It
watches the spec (SIGHUP forces a reload; a broken spec keeps the last good one
running), takes part in leader election, and while it leads: claims due cron
occurrences, applies a spec hash that was never applied, and repairs drift
toward the applied record. SIGTERM stops claiming and lets running commands
finish within --shutdown-grace; a second signal kills them.

--listen ADDR (for example 127.0.0.1:9464) serves Prometheus metrics on
/metrics, a health check on /healthz (503 while the last spec reload
failed) and a read-only web dashboard at / (--dashboard=false turns it off;
it shows payloads and command output, so keep the address private). Without
it nothing listens. --dashboard-actions with --dashboard-token-file adds
buttons (run a task now, requeue or purge dead jobs) for whoever logs in
with a token of that file; every action goes to the log (docs/dashboard.md).
The dashboard answers only to requests that name it by an IP address,
localhost or the --listen name; --dashboard-host NAME adds a name (a DNS name
or a reverse proxy's), so that another site cannot read it by DNS rebinding.
`,
	run: func(ctx context.Context, c *command, env *cliEnv, args []string) int {
		fs := newFlags(c, env)
		path := specFlag(fs, env)
		host := fs.String("host-id", "", "this server's id (default: the hostname)")
		logJSON := fs.Bool("log-json", false, "log JSON lines instead of text")
		logLevel := fs.String("log-level", "info", "trace, debug, info, warn or error")
		grace := fs.Duration("shutdown-grace", 30*time.Second, "how long running commands may finish after SIGTERM")
		resync := fs.Duration("resync", time.Minute, "how often the leader repairs drift")
		listen := fs.String("listen", "", "serve /metrics, /healthz and the dashboard on `ADDR` (default: no listener)")
		dash := fs.Bool("dashboard", true, "serve the web dashboard at / on --listen")
		dashActions := fs.Bool("dashboard-actions", false, "let operators who log in with a token of --dashboard-token-file act from the dashboard")
		dashTokens := fs.String("dashboard-token-file", "", "read the dashboard's access tokens from `PATH`: one ID:SECRET a line, not readable by other users")
		var dashHosts []string
		fs.Func("dashboard-host", "let the dashboard answer to the host `NAME` too (repeat it or separate names with commas); it answers to IP addresses, localhost and the --listen name", func(v string) error {
			for _, n := range strings.Split(v, ",") {
				if n = strings.TrimSpace(n); n != "" {
					dashHosts = append(dashHosts, n)
				}
			}
			return nil
		})
		pos, _, err := parseArgs(fs, args)
		if err != nil {
			return flagExit(err)
		}
		if !noPositional(env, c.name, pos) {
			return 1
		}
		// The daemon's own signals, registered before startup: a SIGHUP or
		// SIGTERM that comes while it starts waits for Run instead of being
		// lost (daemon.Config.Signals).
		sigs := make(chan os.Signal, 4)
		signal.Notify(sigs, syscall.SIGHUP, syscall.SIGTERM, syscall.SIGINT)
		defer signal.Stop(sigs)
		var dashOpts *dashboard.Options
		switch {
		case *dash:
			dashOpts = &dashboard.Options{Actions: *dashActions, TokenFile: *dashTokens, Hosts: dashHosts}
		case *dashActions || *dashTokens != "" || len(dashHosts) > 0:
			fmt.Fprintln(env.stderr, "coordd run: --dashboard-actions, --dashboard-token-file and --dashboard-host need the dashboard (--dashboard=false turns it off)")
			return 1
		}
		if *listen == "" && (*dashActions || *dashTokens != "" || len(dashHosts) > 0) {
			fmt.Fprintln(env.stderr, "coordd run: the dashboard flags need --listen ADDR: the dashboard is served there")
			return 1
		}
		level := hclog.LevelFromString(*logLevel)
		if level == hclog.NoLevel {
			fmt.Fprintf(env.stderr, "coordd run: unknown --log-level %q\n", *logLevel)
			return 1
		}
		log := hclog.New(&hclog.LoggerOptions{
			Name: "coordd", Level: level, JSONFormat: *logJSON, Output: env.stderr,
			Color: hclog.AutoColor, TimeFormat: time.RFC3339Nano,
		})
		_ = mysql.SetLogger(driverLog{log.Named("mysql")})
		goredis.SetLogger(driverLog{log.Named("redis")})
		id, err := hostID(env, *host)
		if err != nil {
			fmt.Fprintf(env.stderr, "coordd run: %v\n", err)
			return 1
		}
		unlock, err := daemon.LockHostID(spec.DefaultDataDir(), id)
		switch {
		case errors.Is(err, daemon.ErrHostIDInUse):
			fmt.Fprintf(env.stderr, "coordd run: %v\n", err)
			return 1
		case err != nil:
			// A data directory this user cannot write (a MySQL-only
			// spec needs none) leaves only the heartbeat's check.
			log.Warn("cannot lock the host id on this machine; a second daemon with the same --host-id is noticed only by the heartbeat", "error", err)
		default:
			defer unlock()
		}
		d, err := daemon.New(ctx, daemon.Config{
			SpecPath: *path, HostID: id, Version: version.Version, Log: log,
			LoadOptions:   spec.LoadOptions{Getenv: os.LookupEnv},
			ShutdownGrace: *grace, ResyncEvery: *resync, Listen: *listen, Dashboard: dashOpts,
			Signals: sigs,
		})
		if err != nil {
			var errs spec.Errors
			if errors.As(err, &errs) {
				for _, e := range errs {
					fmt.Fprintln(env.stderr, e.Error())
				}
			} else {
				fmt.Fprintf(env.stderr, "coordd run: %v\n", err)
			}
			return 1
		}
		if err := d.Run(ctx); err != nil {
			log.Error("stopped", "error", err)
			return 1
		}
		return 0
	},
}

// driverLog sends the MySQL driver's own messages (a broken connection it
// closed, an unexpected EOF) to the daemon's log at debug level: coordd
// reports the errors they cause itself.
type driverLog struct{ l hclog.Logger }

func (d driverLog) Print(v ...any) { d.l.Debug(strings.TrimSpace(fmt.Sprint(v...))) }

// Printf is go-redis's logger interface.
func (d driverLog) Printf(_ context.Context, format string, v ...any) {
	d.l.Debug(strings.TrimSpace(fmt.Sprintf(format, v...)))
}
