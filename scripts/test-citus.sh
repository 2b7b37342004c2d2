#!/usr/bin/env bash
# test-citus.sh: the onboarding example and the core runtime tests on a Citus cluster, a
# coordinator and two workers on 127.0.0.1 (make test-citus). It builds Citus from
# ../shared/tools into CITUS_PREFIX when it is missing there (build-citus.sh says which Debian
# packages that needs), starts a throwaway cluster, and removes it at the end.
#
# Env: CITUS_PREFIX (default $TMPDIR/journey-citus, where the postgres user that runs the
# servers under root can reach them), CITUS_PORT (default 55432, and the two after it), SHARED
# (default ../shared), GO (default go).
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
SHARED=${SHARED:-../shared}
PREFIX=${CITUS_PREFIX:-${TMPDIR:-/tmp}/journey-citus}
PORT=${CITUS_PORT:-55432}
tools=$SHARED/tools

if [[ ! -x $PREFIX/usr/lib/postgresql/15/bin/postgres ]] || ! ls "$PREFIX"/usr/lib/postgresql/15/lib/citus.so >/dev/null 2>&1; then
	src=$(mktemp -d "${TMPDIR:-/tmp}/journey-citus-src.XXXXXX")
	tar xzf "$tools"/citus-*.tar.gz -C "$src"
	# At the priority of the tests (build-citus.sh's default is nice 19): beside a busy machine's
	# other work, a niced build waits for it.
	NICE= bash "$tools/build-citus.sh" "$(ls -d "$src"/citus-*/ | head -1)" "$PREFIX"
	rm -rf "$src"
fi

data=$(mktemp -d "${TMPDIR:-/tmp}/journey-citus.XXXXXX")
chmod 755 "$data"
stop() {
	bash "$tools/citus-cluster.sh" stop "$PREFIX" "$data/cluster" "$PORT" >/dev/null 2>&1 || true
	rm -rf "$data"
}
trap stop EXIT
# A port of the three can be taken, by a listener or by a connection's local end (the ephemeral
# ports span 32768-60999): then the cluster starts on the next three, five tries at most.
for try in 1 2 3 4 5; do
	bash "$tools/citus-cluster.sh" start "$PREFIX" "$data/cluster" "$PORT" && break
	[[ $try == 5 || -n ${CITUS_PORT:-} ]] && { tail -n 3 "$data"/cluster/*.log; exit 1; }
	stop
	mkdir -p "$data" && chmod 755 "$data"
	PORT=$((PORT + 3))
	echo "== a port was taken: the cluster starts on $PORT"
done
# Fewer shards than Citus's 32 a table: each test's schema distributes seven tables.
"$PREFIX/usr/lib/postgresql/15/bin/psql" -X -q -h 127.0.0.1 -p "$PORT" -U postgres -d postgres \
	-c "ALTER DATABASE postgres SET citus.shard_count = 8"

url="postgres://postgres@127.0.0.1:$PORT/postgres?sslmode=disable"
echo "== the onboarding example on Citus"
DATABASE_URL=$url $GO run ./examples/onboarding

# The runtime's core: Start, Set, Get with wait, retries, heartbeats and abandonment, gating,
# keyed starts under concurrency, notifications once across replicas; the lock timeout, and a
# local claim that waited for a lock; what reads across lanes (List, History, the insights, a
# graph changed under its version), archiving, cancel and pause; child executions, rate limits,
# priorities and a schedule across replicas; the sweeper's and the actors' own tests; then the
# SIGKILL of a replica process, with its audit (nothing lost, nothing run twice at once). The whole
# root package passes on Citus too, but for the tests that skip there, in about 7 minutes more.
core='^(TestRetries|TestRetryGivesAFreshBudget|TestWaitingGetReturnsWhatAReadReturns|TestSetIsIdempotent'
core+='|TestStartMany|TestStartWithValuesIsStartThenSetMany|TestHeartbeatKeepsLongWorkAlive'
core+='|TestHardDeadlineAbandonsAndFences|TestHeartbeatDeadlineCatchesAFrozenWorker|TestConcurrencyKeyAcrossReplicas'
core+='|TestMaxParallelAcrossReplicas|TestStartManyRespectsGating|TestStartWithAKeyHeldReturnsItsExecution'
core+='|TestConcurrentKeyedStartsMakeOneExecution|TestStartManyWithKeys|TestFailedEventIsClaimedOnceAcrossReplicas'
core+='|TestCompletedEventFiresOnce|TestCompleterGivesUpOnAHeldExecutionAndRecordsOnceItIsFree'
core+='|TestLocalClaimStartsItsDeadlinesAfterTheLockWait|TestListFiltersAndSorts|TestHistoryListsEveryChange'
core+='|TestInsightsFunnel|TestNewRefusesAGraphChangedUnderItsVersion|TestArchive|TestArchiveFreesTheKey'
core+='|TestCancelStopsAnExecutionForGood|TestPauseHoldsWhatComesReadyUntilResume|TestPauseGraphHoldsItsWorkOnly|TestListByState'
core+='|TestMap.*|TestChildTakesItsOneChildResult|TestParentCancelReachesTheChildren|TestRateLimitAcrossReplicas'
core+='|TestRateKeyAcrossReplicas|TestPriorityOrdersTheQueueWithoutStarving|TestScheduleFiresOncePerFireTimeAcrossReplicas)$'
echo "== the migrations distribute the tables by lane"
TEST_DATABASE_URL=$url $GO test -race -count=1 -run '^TestMigrateDistributesOnCitus$' ./migrations
echo "== the core runtime tests on Citus"
TEST_DATABASE_URL=$url JOURNEY_SKIP_POOLER=1 $GO test -race -count=1 -timeout 15m -run "$core" .
echo "== the sweeper and the actors on Citus"
TEST_DATABASE_URL=$url $GO test -race -count=1 -timeout 10m ./sweeper ./actors
echo "== the insights count every committed write once on Citus"
TEST_DATABASE_URL=$url $GO test -race -count=1 -timeout 15m -run '^TestInsightsCountEveryCommittedWriteOnce$' ./persistence
echo "== a replica process SIGKILLed on Citus"
TEST_DATABASE_URL=$url $GO test -race -count=1 -timeout 15m -run '^TestSIGKILLedReplicaLosesNothing$' ./internal/chaos
