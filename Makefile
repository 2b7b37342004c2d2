# The checks of journey-go. .ci/run runs the same targets.
#
#   make test     vet, then every test against one throwaway PostgreSQL (or the database at
#                 TEST_DATABASE_URL, if set): first every package but the process tests, in
#                 parallel (make test-packages), then the process tests alone (make test-process)
#   make lint     gofmt, go vet, go.mod tidy, and golangci-lint at a pinned version (see
#                 .golangci.yml), which it installs into bin/ when it is missing or another version
#   make bench    the Go benchmarks, then journey bench in each mode (drain, continuous, open
#                 loop), under a minute each; see the README's Performance section
#   make bench-table  issue 23's figures in one table: each run of journey bench three times, on
#                 a throwaway PostgreSQL each, with the medians and the targets (about 20 minutes;
#                 scripts/bench-table.sh says how to make it shorter). Not part of test or .ci/run
#   make bench-river RIVER=path  journey bench beside river bench (a river CLI built by
#                 ../shared/tools/river.sh), alternated, on durable PostgreSQLs, with the ratios
#   make chaos    the process tests (SIGKILL, SIGSTOP, restarts) five times over, with their figures
#   make soak     3 replica processes under load for 10 minutes, with kills, a freeze and a
#                 PostgreSQL restart, then an audit of the database (`make test` runs 60 seconds
#                 of it); JOURNEY_SOAK_DURATION and JOURNEY_SOAK_RATE (executions/s) change it
#   make test-citus  the onboarding example, the core runtime tests and a replica's SIGKILL on a
#                 throwaway Citus cluster, built from ../shared/tools into $TMPDIR/journey-citus
#                 when missing (scripts/test-citus.sh); .ci/run runs it
#   make example  the onboarding example
#   make pgbouncer  PgBouncer 1.25, built from ../shared/tools into .tools/pgbouncer (git-ignored),
#                 for the tests behind a pooler that keeps prepared statements; .ci/run builds it
#   make fuzz     each fuzz test for FUZZTIME (default 1m): graph validation, value decoding, and
#                 the checks and parsers of what callers, CLI flags and dashboard queries give;
#                 .ci/run runs 5,000 calls of each (FUZZTIME=5000x: a duration can fail at its end
#                 on a busy machine, golang/go#75804). Their seeds also run in make test

GO ?= go
# journey dev starts one PostgreSQL for the whole run, sets DATABASE_URL and TEST_DATABASE_URL,
# and stops it afterwards. With TEST_DATABASE_URL already set, the tests use that database.
WITH_DB = $(if $(TEST_DATABASE_URL),,$(GO) run ./cmd/journey dev --)

.PHONY: test test-packages test-process test-citus lint bench bench-table bench-river chaos soak example fuzz pgbouncer

# PROCESS_TESTS start replicas as processes of their own (SIGKILL, SIGSTOP, restarts). They run
# after the other packages, not beside them, so that their processes get the machine's cores:
# under -race on two cores, every package's tests at once put the load average at 9-17.
PROCESS_TESTS = ./internal/chaos

# The soak starts its own PostgreSQL, which it restarts. make test runs a 60-second version.
JOURNEY_SOAK_DURATION ?= 10m
JOURNEY_SOAK_RATE ?= 20

# make test builds PgBouncer 1.25 for the tests behind a pooler, unless they are skipped or
# JOURNEY_PGBOUNCER names one.
test: $(if $(JOURNEY_SKIP_POOLER)$(JOURNEY_PGBOUNCER),,pgbouncer)
	$(GO) vet ./...
	$(WITH_DB) $(MAKE) --no-print-directory test-packages test-process

# The two halves of make test, each against TEST_DATABASE_URL (or a throwaway cluster per package).
test-packages:
	packages="$$($(GO) list ./...)" && process="$$($(GO) list $(PROCESS_TESTS))" && \
		$(GO) test -race -count=1 -timeout 15m $$(echo "$$packages" | grep -vxF "$$process")

test-process:
	$(GO) test -race -count=1 -p 1 -timeout 15m $(PROCESS_TESTS)

test-citus:
	GO=$(GO) bash scripts/test-citus.sh

# golangci-lint is pinned, and built from the Go module proxy into bin/ (git-ignored) when the
# binary there is missing or another version. On two cores its first build takes minutes (measured:
# 4.5, and 8 with an empty build cache on a busy machine); later ones take seconds.
GOLANGCI_LINT_VERSION = 2.15.0
GOLANGCI_LINT = $(CURDIR)/bin/golangci-lint

lint:
	@unformatted="$$(gofmt -l .)"; \
	if [ -n "$$unformatted" ]; then \
		echo "gofmt: these files need formatting (run gofmt -w .):"; echo "$$unformatted"; exit 1; \
	fi
	$(GO) vet ./...
	@$(GO) mod tidy -diff || { echo "go.mod or go.sum is not tidy: run go mod tidy (the diff above is what it would change)"; exit 1; }
	@if [ "$$($(GOLANGCI_LINT) version --short 2>/dev/null)" != "$(GOLANGCI_LINT_VERSION)" ]; then \
		echo "installing golangci-lint v$(GOLANGCI_LINT_VERSION) into bin/ (a few minutes, the first time)"; \
		rm -f "$(GOLANGCI_LINT)" && GOBIN="$(CURDIR)/bin" $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@v$(GOLANGCI_LINT_VERSION); \
	fi
	$(GOLANGCI_LINT) run

# journey bench uses DATABASE_URL, or else starts a throwaway PostgreSQL of its own with
# pg_stat_statements loaded, so that it can count the statements per computation.
JOURNEY_BENCH = $(GO) run ./cmd/journey bench

bench:
	$(WITH_DB) $(GO) test -run '^$$' -bench . -benchmem -count=1 ./...
	$(JOURNEY_BENCH) -n 5000
	$(JOURNEY_BENCH) -duration 15s
	$(JOURNEY_BENCH) -rate 50 -duration 15s

# Figures, not checks: it prints them beside their targets, and fails only if a run does.
bench-table:
	scripts/bench-table.sh

# journey bench beside river bench, alternated, on equal terms (see the script): RIVER=path.
bench-river:
	scripts/beside-river.sh

chaos:
	$(WITH_DB) $(GO) test -race -count=5 -v -timeout 30m -skip '^TestSoak$$' $(PROCESS_TESTS)

soak:
	JOURNEY_SOAK_DURATION=$(JOURNEY_SOAK_DURATION) JOURNEY_SOAK_RATE=$(JOURNEY_SOAK_RATE) \
		$(GO) test -race -count=1 -v -run '^TestSoak$$' -timeout 2h ./internal/chaos

example:
	$(GO) run ./examples/onboarding

# The tests behind a pooler run through Debian's PgBouncer (1.18 in Debian 12) and through one
# that keeps prepared statements (1.21 or later, max_prepared_statements), which Debian 12 does not
# package: this builds it, with ../shared/tools/build-pgbouncer.sh, where the tests look for it
# unless JOURNEY_PGBOUNCER names another. The build needs build-essential, pkg-config,
# libevent-dev, libssl-dev, python3, autoconf, automake and libtool; it runs again only when the
# tarball is newer than the program.
SHARED_TOOLS ?= $(CURDIR)/../shared/tools
PGBOUNCER_VERSION = 1.25.2
PGBOUNCER = $(CURDIR)/.tools/pgbouncer/bin/pgbouncer

pgbouncer: $(PGBOUNCER)

$(PGBOUNCER): $(SHARED_TOOLS)/pgbouncer-$(PGBOUNCER_VERSION).tar.gz
	@scratch="$$(mktemp -d)" && trap 'rm -rf "$$scratch"' EXIT && \
		tar -xzf "$<" -C "$$scratch" && \
		NICE= "$(SHARED_TOOLS)/build-pgbouncer.sh" "$$scratch/pgbouncer-$(PGBOUNCER_VERSION)" "$(CURDIR)/.tools/pgbouncer" "$$scratch/build" && \
		touch "$@"

FUZZTIME ?= 1m
FUZZ_TESTS = ./graph:FuzzNew ./graph:FuzzValue ./persistence:FuzzCheckText \
	./persistence:FuzzCheckValue ./persistence:FuzzParseWhere ./persistence:FuzzParseCursor ./persistence/machine:FuzzParseSignature

fuzz:
	@for t in $(FUZZ_TESTS); do \
		echo "fuzz $${t#*:} in $${t%%:*} for $(FUZZTIME)"; \
		$(GO) test -run '^$$' -fuzz "^$${t#*:}$$" -fuzztime $(FUZZTIME) "$${t%%:*}" || exit 1; \
	done
