// Package dashboard is coordd's web dashboard: the read-only pages that
// `coordd run` serves beside /metrics (cluster, semaphores, cron tasks,
// queues and their dead jobs, rate limits), and the few actions an
// operator may take from them once logged in (run a task now, pause or
// resume it, requeue or purge dead jobs). docs/dashboard.md is the
// operator's guide.
//
// # Pages read what the CLI reads, bounded
//
// Every page is built from the daemon's last good spec and its open
// backends (Source), through the calls the CLI makes: the cluster page is
// `coordd status` (cluster.go), the semaphores page `sem status`
// (semaphores.go, waiters.go), the cron pages `cron list` and `cron
// history` (cron.go), the queue pages `queue stats` and `queue dead`
// (queues.go, jobs.go), the rate limits page the rate limits of `coordd
// status` (ratelimits.go). Objects are read a backend at a time, one call
// for all the objects a backend holds, under one deadline per request
// (readTimeout); a read that fails is shown in place of its section,
// never as a broken page.
//
// Reading needs no login, so what one request costs does not depend on
// what the store holds: a queue's page reads one page of its dead set
// with each payload cut by the backend (backends.Queues), a search
// reads at most deadScan dead jobs and uses a bounded query, a job's page
// reads one job with at most payloadShown bytes of its payload, a run's
// output is shown by its last outputTail bytes, and the plan shown on the
// cluster page is computed at most every planEvery. Values come from
// other hosts and may be hostile: html/template escapes them, and text.go
// also shows control and format characters escaped and cuts long values.
// Every response forbids scripts, frames and foreign styles (a
// Content-Security-Policy), and a request whose Host header is not one of
// the dashboard's names is refused (host.go), against DNS rebinding.
//
// # Actions are guarded
//
// An action (Action; the built-in ones and Options.Extra) is a POST to
// /actions/KIND/NAME/ACTION, and handleAction runs it only when all of
// these hold: the daemon runs with --dashboard-actions; the browser has a
// session, started by logging in with a token of the token file, whose
// token is still in that file (removing its line ends the session); the
// browser does not say the request is cross-site (Sec-Fetch-Site, Origin;
// the session cookie is SameSite=Strict besides); the form carries the
// session's form token; and a destructive action's confirm box is ticked. Failed logins are counted per client address and lock out only
// that address (auth.go). Every outcome, refusals included, is logged with
// the token id, the remote address and the forwarded-for header.
package dashboard
