// Package bench holds process-level benchmarks of issue 3: they start real
// coordd processes (internal/proctest) on the embedded store and measure
// failover, `coordd queue work`, an idle daemon's CPU and the cross-process
// semaphore wake-up. It has no code of its own; see process_bench_test.go
// and docs/benchmarks.md.
//
//	go test -run '^$' -bench . -benchtime 1x ./bench/
package bench
