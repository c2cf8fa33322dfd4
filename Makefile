# coordd developer tasks. Run `make` (or `make help`) for the list.

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

GO        ?= go
BIN       := bin/coordd
PKG       := github.com/coordd/coordd
FUZZTIME  ?= 60s
CHAOS_DURATION ?= 5m
CHAOS_SEED     ?=
CHAOS_BACKENDS ?= sqlite,mysql,postgres,redis,redis-stale-failover,memcached,redis-sentinel
COORDD_DATA_DIR ?= ./.coordd-data

# Version stamping: a tag from `git describe` (when the repo has tags) and the
# short commit (when it has commits). Either may be empty, in which case the
# defaults in internal/version are kept.
GIT_VERSION := $(shell git describe --tags --dirty 2>/dev/null)
GIT_COMMIT  := $(shell git rev-parse --short --verify -q HEAD 2>/dev/null)
LDFLAGS :=
ifneq ($(GIT_VERSION),)
LDFLAGS += -X $(PKG)/internal/version.Version=$(GIT_VERSION)
endif
ifneq ($(GIT_COMMIT),)
LDFLAGS += -X $(PKG)/internal/version.Commit=$(GIT_COMMIT)
endif

.PHONY: help build test test-short lint bench bench-peers chaos fuzz quickstart clean

help: ## Show this list of targets
	@echo "Usage: make <target>"
	@echo
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z0-9_-]+:.*## / {printf "  %-12s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

build: ## Build bin/coordd (version/commit stamped from git when available)
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/coordd

test: ## Vet and run all tests with -race against real MariaDB/PostgreSQL/Redis/memcached (started if needed)
	bash scripts/test-services.sh

test-short: ## Run go test ./... without starting any services
	$(GO) test ./...

lint: ## gofmt check, go vet, and staticcheck if installed
	@unformatted="$$(gofmt -l .)"; \
	if [[ -n "$$unformatted" ]]; then echo "gofmt -w needed on:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...
	@if command -v staticcheck >/dev/null 2>&1; then echo staticcheck ./...; staticcheck ./...; \
	else echo "staticcheck not installed; skipping (go install honnef.co/go/tools/cmd/staticcheck@latest)"; fi

bench: ## Run every benchmark in docs/benchmarks.md once (~20 min; starts MariaDB, PostgreSQL, Redis and memcached as `make test` does)
	bash scripts/test-services.sh bash -euo pipefail -c '\
	$(GO) test -p 1 -run "^$$" -bench . -benchtime 1x -timeout 60m ./reconcile/ ./semaphore/ ./queue/ ./scheduler/ ./bench/; \
	$(GO) test -run "^$$" -bench "AcquireRelease|CronClaimFinish" -benchtime 2000x ./backends/mysql/; \
	$(GO) test -run "^$$" -bench Queue -benchtime 1x -timeout 30m ./backends/mysql/; \
	$(GO) test -run "^$$" -bench AcquireRelease -benchtime 2000x ./backends/postgres/; \
	$(GO) test -run "^$$" -bench "Sem|CronClaimFinish" ./backends/redis/; \
	$(GO) test -run "^$$" -bench Queue -benchtime 1x ./backends/redis/; \
	$(GO) test -run "^$$" -bench AcquireRelease -benchtime 2000x ./backends/memcached/'

bench-peers: ## Measure coordd against bsm/redislock, go-redsync, asynq, go-redis/redis_rate, goqite, River (PostgreSQL) and textbook MySQL, side by side (bench/peers, its own module; ~8 min)
	bash scripts/test-services.sh bash -euo pipefail -c '\
	cd bench/peers && $(GO) test -count=1 -run "^$$" -bench . -benchtime 1x -timeout 60m .'

chaos: ## Fault-inject every backend for CHAOS_DURATION (5m) each and print the verdict table (private servers; see docs/reliability.md)
	COORDD_CHAOS_DURATION='$(CHAOS_DURATION)' COORDD_CHAOS_SEED='$(CHAOS_SEED)' COORDD_CHAOS_BACKENDS='$(CHAOS_BACKENDS)' \
		$(GO) test -count=1 -timeout 180m -run '^TestChaos$$' -v ./chaos/

fuzz: ## Fuzz spec.Load (file contents, directories, ${...} references) and the dashboard (pages, action and login forms), 60s each (override: make fuzz FUZZTIME=5m)
	$(GO) test ./spec -run '^$$' -fuzz '^FuzzLoad$$' -fuzztime $(FUZZTIME)
	$(GO) test ./spec -run '^$$' -fuzz '^FuzzLoadDir$$' -fuzztime $(FUZZTIME)
	$(GO) test ./spec -run '^$$' -fuzz '^FuzzExpandReferences$$' -fuzztime $(FUZZTIME)
	$(GO) test ./dashboard -run '^$$' -fuzz '^FuzzDashboardPages$$' -fuzztime $(FUZZTIME)
	$(GO) test ./dashboard -run '^$$' -fuzz '^FuzzDashboardActionForm$$' -fuzztime $(FUZZTIME)
	$(GO) test ./dashboard -run '^$$' -fuzz '^FuzzDashboardLoginForm$$' -fuzztime $(FUZZTIME)

.PHONY: screenshots
screenshots: ## Regenerate docs/dashboard/*.png: the dashboard's pages in headless Chromium over a filled SQLite store
	COORDD_DASHBOARD_SCREENSHOTS=docs/dashboard $(GO) test -count=1 -run 'TestDashboardPages/sqlite|TestDashboardActions/sqlite|TestDashboardQueueBrowser/sqlite' ./dashboard/

quickstart: build ## Build, copy examples/quickstart to ./quickstart-spec (once, yours to edit), run the daemon on the copy (state in COORDD_DATA_DIR, default ./.coordd-data); Ctrl-C stops it
	[ -e quickstart-spec ] || cp -R examples/quickstart quickstart-spec
	COORDD_DATA_DIR='$(COORDD_DATA_DIR)' ./$(BIN) run -f quickstart-spec

clean: ## Remove bin/, the quickstart data dir ./.coordd-data and its spec copy ./quickstart-spec
	rm -rf bin/ ./.coordd-data ./quickstart-spec
