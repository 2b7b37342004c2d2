#!/usr/bin/env bash
# journey bench beside river bench, alternated in rounds, on equal work: the same N for both
# drains, and continuous runs of the same duration. Each run is on a throwaway PostgreSQL of its
# own, journey bench's (durable defaults: fsync, synchronous_commit and full_page_writes on;
# pg_stat_statements loaded), River's by `journey dev -durable`; each side with 2,000 workers
# (river bench's, and journey bench's default). It prints each run's figures and, per round,
# journey-go's ratio to River. `make bench-river RIVER=/path/to/river` runs it.
#
#   RIVER          the river CLI to measure beside (build it with ../shared/tools/river.sh)
#   RIVER_ROUNDS   the rounds (default 2)
#   RIVER_N        the drains' N, for both, separated by spaces (default "200000 1000000")
#   RIVER_DURATION the continuous runs' duration (default 60s)
#   RIVER_FLAT_N   the drain of journey bench alone that each round runs first, against which
#                  the drains' rates are compared (default 20000; empty: none)
set -euo pipefail
cd "$(dirname "$0")/.."
: "${RIVER:?set RIVER to a river CLI, e.g. one built by ../shared/tools/river.sh}"
rounds=${RIVER_ROUNDS:-2} sizes=${RIVER_N:-200000 1000000} duration=${RIVER_DURATION:-60s} flat=${RIVER_FLAT_N-20000}
work=$(mktemp -d /tmp/beside-river.XXXXXX)
trap 'rm -rf "$work"' EXIT
journey=$work/journey
go build -o "$journey" ./cmd/journey
unset PGDATABASE

# river_run prints River's jobs per second for river bench's flags.
river_run() {
	"$journey" dev -durable -- sh -c "\"$RIVER\" migrate-up --database-url \"\$DATABASE_URL\" >/dev/null &&
		\"$RIVER\" bench --database-url \"\$DATABASE_URL\" $*" 2>&1 |
		grep -oE 'overall job/sec \[ *[0-9.]+' | tail -1 | grep -oE '[0-9.]+$'
}

# journey_run prints journey bench's final line for its flags, the figures of the comparison.
journey_run() {
	"$journey" bench "$@" 2>&1 | grep -E '^bench: mode=.*computations/s=' | tail -1 |
		grep -oE '(computations/s|go_cpu_us_per_computation|pg_cpu_us_per_computation|allocs_per_computation|us_per_computation_start|us_per_computation_end)=[^ ]+' |
		tr '\n' ' '
}

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "n/a" }'; }
rate() { grep -oE 'computations/s=[0-9.]+' <<<"$1" | cut -d= -f2; }

for round in $(seq "$rounds"); do
	if [ -n "$flat" ]; then
		base=$(journey_run -n "$flat")
		echo "round $round journey drain $flat: $base"
	fi
	for n in $sizes; do
		river=$(river_run -n "$n")
		line=$(journey_run -n "$n")
		echo "round $round drain $n: River ${river} jobs/s; journey $line"
		echo "round $round drain $n ratio to River: $(ratio "$(rate "$line")" "$river")${flat:+; to the $flat drain: $(ratio "$(rate "$line")" "$(rate "$base")")}"
	done
	river=$(river_run --duration "$duration")
	line=$(journey_run -duration "$duration")
	echo "round $round continuous $duration: River ${river} jobs/s; journey $line"
	echo "round $round continuous ratio to River: $(ratio "$(rate "$line")" "$river")"
done
