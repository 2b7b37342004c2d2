#!/usr/bin/env bash
# The figures of issue 23 ("What must hold") that journey bench measures, in one table: each run
# on a throwaway PostgreSQL of its own (DATABASE_URL is ignored), in rounds, every run of a round
# one after the other, so that a drift of the machine reaches every figure alike. It prints one
# row per figure: its value in each round, the median and the target. `make bench-table` runs it.
# The figures are not asserted: a run that fails (a failed computation, an unfinished execution)
# is listed at the end, and the script then exits 1.
#
#   BENCH_TABLE_ROUNDS    the rounds (default 3: the issue asks for the median of three)
#   BENCH_TABLE_DURATION  -duration of the timed runs (default 20s)
#   BENCH_TABLE_SCALE     divides the drains' -n and the gated backlogs, for a quick look (default 1)
#   BENCH_TABLE_LOGS      where each run's output goes (default a new directory under /tmp)
set -euo pipefail
cd "$(dirname "$0")/.."

rounds=${BENCH_TABLE_ROUNDS:-3}
duration=${BENCH_TABLE_DURATION:-20s}
scale=${BENCH_TABLE_SCALE:-1}
logs=${BENCH_TABLE_LOGS:-$(mktemp -d /tmp/bench-table.XXXXXX)}
mkdir -p "$logs"

n_one=$((20000 / scale)) n_fanout=$((2000 / scale)) n_chain=$((4000 / scale))
pending_some=$((1000 / scale)) pending_many=$((10000 / scale))
# The gated node: 10 keys, MaxParallel(5), 20ms of work: at most 5 / 20ms = 250 computations/s.
gated=(-graph gated -keys 10 -max-parallel 5 -hold 20ms)

# Each run: a name, then journey bench's flags.
runs=(
	"open1000|-rate 1000 -duration $duration"
	"open2000|-rate 2000 -duration $duration"
	"one|-n $n_one"
	"fanout10|-n $n_fanout -graph fanout10"
	"chain5|-n $n_chain -graph chain5"
	"fanout_open|-rate 100 -duration $duration -graph fanout10"
	"replicas2|-n $n_one -replicas 2"
	"replicas4|-n $n_one -replicas 4"
	"gated0|${gated[*]} -rate 100 -duration $duration"
	"gated_some|${gated[*]} -duration $duration -backlog $pending_some"
	"gated_many|${gated[*]} -duration $duration -backlog $pending_many"
)

echo "bench-table: building journey; each run's output goes to $logs"
go build -o "$logs/journey" ./cmd/journey

declare -A value # value[run,round,field]: a field of the run's final line
failures=()
for round in $(seq 1 "$rounds"); do
	for run in "${runs[@]}"; do
		name=${run%%|*} args=${run#*|}
		out="$logs/$name.$round.txt"
		echo "bench-table: round $round/$rounds: journey bench $args"
		# shellcheck disable=SC2086 # the flags are split on purpose
		if ! env -u DATABASE_URL "$logs/journey" bench $args >"$out" 2>&1; then
			failures+=("round $round: journey bench $args (see $out)")
		fi
		final=$(grep '^bench: mode=.* computations/s=' "$out" | tail -n 1 || true)
		for kv in ${final#bench: }; do
			value[$name,$round,${kv%%=*}]=${kv#*=}
		done
	done
done

# median prints the middle of its numeric arguments (the lower middle of an even count), or -.
median() {
	printf '%s\n' "$@" | grep -E '^-?[0-9.]+$' | sort -g |
		awk '{ v[NR] = $1 } END { if (NR == 0) print "-"; else print v[int((NR + 1) / 2)] }'
}

# row prints a figure: its label, its values in each round, their median and the target. Each
# value is an awk expression over the fields of the runs, written run:field; a value whose
# fields are missing or n/a is -.
row() {
	local label=$1 expr=$2 target=$3 values=() round
	for round in $(seq 1 "$rounds"); do
		local e=$expr ok=1 ref v
		for ref in $(grep -oE '[a-z_0-9]+:[a-z_0-9/]+' <<<"$expr"); do
			v=${value[${ref%%:*},$round,${ref#*:}]:-}
			[[ $v =~ ^-?[0-9.]+$ ]] || ok=
			e=${e//"$ref"/$v}
		done
		if [[ $ok && ! $e =~ /\ 0*\.?0*$ ]]; then # not divided by 0
			values+=("$(awk "BEGIN { v = $e; printf(v >= 100 ? \"%.0f\" : \"%.3g\", v) }")")
		else
			values+=(-)
		fi
	done
	printf '%-58s %-26s %10s  %s\n' "$label" "${values[*]}" "$(median "${values[@]}")" "$target"
}

echo
printf '%-58s %-26s %10s  %s\n' "figure (issue 23)" "rounds" "median" "target"
row "1. open loop 1,000/s: Set to Get p50 ms" "open1000:p50_ms" "≤ 5"
row "1. open loop 1,000/s: p99 ms" "open1000:p99_ms" "≤ 25"
row "2. open loop 2,000/s: achieved computations/s" "open2000:computations/s" "≥ 1,950"
row "2. open loop 2,000/s: in flight at the end of D" "open2000:backlog_end" "not growing"
row "2. open loop 2,000/s: p99 ms" "open2000:p99_ms" "≤ 50"
row "3. transactions per computation at 1,000/s" "open1000:transactions_per_computation" "≤ 2"
row "4. drain one (-n $n_one): computations/s" "one:computations/s" "-"
row "4. drain fanout10 (-n $n_fanout): computations/s" "fanout10:computations/s" "-"
row "4. fanout10 / one" "fanout10:computations/s / one:computations/s" "≥ 0.8"
row "4. drain chain5 (-n $n_chain): computations/s" "chain5:computations/s" "-"
row "4. chain5 / one" "chain5:computations/s / one:computations/s" "≥ 0.8"
row "4. fanout10 open loop 100/s: Set to all ten p50 ms" "fanout_open:p50_ms" "-"
row "4. fanout10 open loop 100/s: p99 ms" "fanout_open:p99_ms" "-"
row "5. drain, 2 replicas: computations/s" "replicas2:computations/s" "-"
row "5. 2 replicas / 1" "replicas2:computations/s / one:computations/s" "≥ 0.9"
row "5. drain, 4 replicas: computations/s" "replicas4:computations/s" "-"
row "5. 4 replicas / 1" "replicas4:computations/s / one:computations/s" "≥ 0.9"
row "6. gated, about 0 pending (-rate 100): pass ms" "gated0:promote_pass_ms" "-"
row "6. gated, about 0 pending: pending at the end" "gated0:pending_end" "about 0"
row "6. gated, $pending_some pending: pass ms" "gated_some:promote_pass_ms" "-"
row "6. gated, $pending_some pending: promotions/s" "gated_some:promotions_per_s" "≤ 250 (5 / 20ms)"
row "6. gated, $pending_many pending: pass ms" "gated_many:promote_pass_ms" "-"
row "6. gated, $pending_many pending: promotions/s" "gated_many:promotions_per_s" "≤ 250 (5 / 20ms)"
row "6. pass ms, $pending_many pending / about 0" "gated_many:promote_pass_ms / gated0:promote_pass_ms" "≤ 2"
row "6. promotions/s, $pending_many pending / $pending_some" \
	"gated_many:promotions_per_s / gated_some:promotions_per_s" "about 1: bound by the limits"
echo "7. faults under load: not bench's; run JOURNEY_SOAK_RATE=300 make soak"

if ((${#failures[@]} > 0)); then
	echo
	echo "bench-table: these runs failed:"
	printf '  %s\n' "${failures[@]}"
	exit 1
fi
