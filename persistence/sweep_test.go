package persistence

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/journey-go/journey/graph"
)

// holdExecutions locks the rows of executions ids in a transaction, until the test ends or the
// returned function is called: whatever would write them waits for its lock timeout, and fails.
func (b *bundle) holdExecutions(t *testing.T, ids ...string) (release func()) {
	t.Helper()
	ctx := context.Background()
	tx, err := b.db.BeginTx(ctx, &sql.TxOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback() })
	_, err = tx.NewRaw(b.store.q("SELECT 1 FROM {s}.executions WHERE id IN (?) FOR UPDATE"), bun.List(ids)).Exec(ctx)
	require.NoError(t, err)
	return func() { require.NoError(t, tx.Rollback()) }
}

// One execution must never stop a pass: more expired attempts than a pass abandons, that cannot
// be abandoned (their executions are held past the lock timeout), do not keep the pass from the
// next one; and they sit out the next pass, rather than fill it.
func TestSweepGoesOnPastAttemptsItCannotAbandon(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.store = b.newStore(t, Config{Graphs: []*graph.Graph{b.g}, LockTimeout: 50 * time.Millisecond})
	ctx := context.Background()
	stuck := b.ready(t, 3)
	require.Len(t, b.claimed(t, "dead"), 3) // a replica without a heartbeat: its work has expired
	later := b.ready(t, 1)[0]
	require.Len(t, b.claimed(t, "dead"), 1)
	release := b.holdExecutions(t, stuck...)

	res, err := b.store.Sweep(ctx, SweepOptions{Holder: "r1", Limit: 2})
	require.NoError(t, err)
	require.Len(t, res.Abandoned, 1, "the pass goes on past the stuck attempts")
	require.Equal(t, later, res.Abandoned[0].ExecutionID)
	require.Equal(t, 3, res.Failed, "the pass tries every stuck attempt once")

	res, err = b.store.Sweep(ctx, SweepOptions{Holder: "r1", Limit: 2})
	require.NoError(t, err)
	require.Zero(t, res.Failed, "the stuck attempts sit out the next pass")
	require.Empty(t, res.Abandoned)

	release()
	res, err = b.store.Sweep(ctx, SweepOptions{Holder: "r1", Limit: 2})
	require.NoError(t, err)
	require.Zero(t, res.Failed)
	require.Len(t, res.Abandoned, 2, "then they are tried again, a batch at a time")
	res, err = b.store.Sweep(ctx, SweepOptions{Holder: "r1", Limit: 2})
	require.NoError(t, err)
	require.Len(t, res.Abandoned, 1)
	for _, id := range stuck {
		require.Equal(t, 2, b.latest(t, id, "y").Attempt, "abandoned, and retried")
	}
}

// An attempt that can never be abandoned with its execution is tried again less and less often,
// and at last abandoned alone, with a readable reason: it does not come back at every pass for
// ever.
func TestSweepGivesUpOnAnAttemptItCanNeverAbandon(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.store = b.newStore(t, Config{Graphs: []*graph.Graph{b.g}, LockTimeout: 50 * time.Millisecond})
	ctx := context.Background()
	stuck := b.ready(t, 1)[0]
	c := b.claimOne(t, "dead")
	b.holdExecutions(t, stuck)

	failures, passes := 0, 0
	var res SweepResult
	for passes < 200 && len(res.Abandoned) == 0 {
		var err error
		res, err = b.store.Sweep(ctx, SweepOptions{Holder: "r1", Limit: 10})
		require.NoError(t, err)
		failures += res.Failed
		passes++
	}
	require.Len(t, res.Abandoned, 1, "given up after %d passes", passes)
	require.Equal(t, abandonGiveUp, failures)
	require.Less(t, passes, 200)
	require.Greater(t, passes, 2*abandonGiveUp, "it sat out more and more passes")

	got := b.latest(t, stuck, "y")
	require.Equal(t, c.ID, got.ID, "no retry")
	require.Equal(t, StateAbandoned, got.State)
	require.True(t, got.FailedForGood(), "its node has failed")
	require.Contains(t, *got.Error, ReasonReplica("dead")+gaveUp)
	require.Contains(t, *got.Error, "lock timeout")
	require.Equal(t, CategoryReplicaStale, ReasonCategory(*got.Error))
}

// A busy promotion lock does not hold up the abandonments of a pass: each abandonment of a gated
// attempt commits its retry and goes on to the next, and the pass promotes once, after them. The
// work of a dead replica is retried as soon as its attempts are found, however long another
// transaction holds the lock.
func TestSweepAbandonsPastABusyPromotionLock(t *testing.T) {
	t.Parallel()
	g := keyedGraph("busypromote")
	b := setup(t, g)
	b.store = b.newStore(t, Config{Graphs: []*graph.Graph{g}, LockTimeout: time.Minute})
	ctx := context.Background()
	ids := []string{b.start(t, g, map[string]any{"k": "A"}), b.start(t, g, map[string]any{"k": "B"})}
	require.Len(t, b.claimed(t, "dead"), 2)

	holder, err := b.db.BeginTx(ctx, nil)
	require.NoError(t, err)
	defer func() { _ = holder.Rollback() }()
	_, err = holder.NewRaw("SELECT pg_advisory_xact_lock(hashtextextended(?, 0))", b.store.promoteKey).Exec(ctx)
	require.NoError(t, err)
	swept := make(chan error, 1)
	var res SweepResult
	go func() {
		var err error
		res, err = b.store.Sweep(ctx, SweepOptions{Holder: "r1", Limit: 10})
		swept <- err
	}()
	waitFor(t, "both attempts to be abandoned and retried while the promotion lock is held", func() bool {
		for _, id := range ids {
			if c := b.latest(t, id, "job"); c.Attempt != 2 || c.State != StatePending {
				return false
			}
		}
		return true
	})

	require.NoError(t, holder.Commit())
	require.NoError(t, <-swept)
	require.Len(t, res.Abandoned, 2)
	require.Equal(t, 2, res.Promoted, "the pass promotes the retries once the lock is free")
	for _, id := range ids {
		require.Equal(t, StateAvailable, b.latest(t, id, "job").State)
	}
}

// The retry of an abandoned attempt without backoff keeps the attempt's place in the queue: it
// is claimed before the work that became due after the attempt, not behind all of it.
func TestAbandonedWorkKeepsItsPlaceInTheQueue(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	lost := b.ready(t, 1)[0]
	first := b.claimOne(t, "dead") // a replica without a heartbeat: its work has expired
	b.clock.Advance(time.Second)
	later := b.ready(t, 1)[0]

	res, err := b.store.Sweep(ctx, SweepOptions{Holder: "r1", Limit: 10})
	require.NoError(t, err)
	require.Len(t, res.Abandoned, 1)
	retry := b.latest(t, lost, "y")
	require.Equal(t, 2, retry.Attempt)
	require.True(t, retry.RunAt.Equal(first.RunAt), "due since the abandoned attempt was, %v, not %v", first.RunAt, retry.RunAt)

	got := b.claimOne(t, "r1")
	require.Equal(t, lost, got.ExecutionID, "the retry is claimed first, before %s", later)
	require.Equal(t, later, b.claimOne(t, "r1").ExecutionID)
}
