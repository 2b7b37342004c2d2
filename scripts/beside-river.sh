#!/usr/bin/env bash
# journey bench beside river bench, alternated in rounds, on equal terms: each run on a throwaway
# PostgreSQL of its own, journey bench's (durable defaults: fsync, synchronous_commit and
# full_page_writes on; pg_stat_statements loaded), River's by `journey dev -durable`; each side
# with 2,000 workers (river bench's, and journey bench's default). It prints each run's figures
# and, per round, journey-go's ratio to River. `make bench-river RIVER=/path/to/river` runs it.
#
#   RIVER          the river CLI to measure beside (build it with ../shared/tools/river.sh)
#   RIVER_ROUNDS   the rounds (default 2)
#   RIVER_N        journey bench's drain (default 20000; River drains ten times as many, so that
#                  both run for seconds)
#   RIVER_DURATION the continuous runs' duration (default 20s)
set -euo pipefail
cd "$(dirname "$0")/.."
: "${RIVER:?set RIVER to a river CLI, e.g. one built by ../shared/tools/river.sh}"
rounds=${RIVER_ROUNDS:-2} n=${RIVER_N:-20000} duration=${RIVER_DURATION:-20s}
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

# journey_run prints journey bench's final line for its flags.
journey_run() { "$journey" bench "$@" 2>&1 | grep -E '^bench: mode=.*computations/s=' | tail -1; }

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "n/a" }'; }
rate() { grep -oE ' computations/s=[0-9.]+' <<<"$1" | cut -d= -f2; }

for round in $(seq "$rounds"); do
	river=$(river_run -n $((n * 10)))
	line=$(journey_run -n "$n")
	echo "round $round drain: River ${river} jobs/s; $line"
	echo "round $round drain ratio: $(ratio "$(rate "$line")" "$river")"
	river=$(river_run --duration "$duration")
	line=$(journey_run -duration "$duration")
	echo "round $round continuous: River ${river} jobs/s; $line"
	echo "round $round continuous ratio: $(ratio "$(rate "$line")" "$river")"
done
