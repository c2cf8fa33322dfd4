// Package bench holds process-level benchmarks: they start real coordd
// processes (internal/proctest) and measure from outside what a user of
// the command sees: failover after a kill -9, `coordd queue work`, an idle
// daemon's CPU (and its queries on MariaDB), the cross-process semaphore
// wake-up and a burst of cron tasks due in the same second. It has no code
// of its own; see the _test.go files and docs/benchmarks.md.
//
//	go test -run '^$' -bench . -benchtime 1x ./bench/
package bench
