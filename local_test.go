package journey_test

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/journey-go/journey"
	"github.com/journey-go/journey/actors"
	"github.com/journey-go/journey/graph"
	"github.com/journey-go/journey/internal/pgtest"
	"github.com/journey-go/journey/persistence"
)

// localGraph is x → y = x + 1.
func localGraph(name string, opts ...graph.NodeOption) *graph.Graph {
	return graph.MustNew(name, "v1", []graph.Node{
		graph.Input("x"),
		graph.Compute("y", graph.Needs("x"), func(ctx context.Context, in graph.Values) (any, error) {
			return in.Int("x") + 1, nil
		}, opts...),
	})
}

// claimCounter counts the dispatcher's claims after its first, which every start makes. While a
// claim runs, the writes reserve no worker: it may fill them all.
type claimCounter struct {
	first chan struct{}
	once  atomic.Bool
	n     atomic.Int64
}

func newClaimCounter() *claimCounter { return &claimCounter{first: make(chan struct{})} }

func (c *claimCounter) hooks() actors.Hooks {
	return actors.Hooks{
		Claiming: func(context.Context) {
			if c.once.Load() {
				c.n.Add(1)
			}
		},
		Claimed: func(int) {
			if c.once.CompareAndSwap(false, true) {
				close(c.first)
			}
		},
	}
}

// started waits until the dispatcher's first claim has ended.
func (c *claimCounter) started(t *testing.T) {
	t.Helper()
	select {
	case <-c.first:
	case <-testCtx(t).Done():
		t.Fatal("the dispatcher never claimed")
	}
}

// claimCountingRuntime returns a runtime serving g, with its config, once its dispatcher's first
// claim has ended, and the counter of its claims after that. Its poll, 30s, is far off: a claim
// that runs was started by a NOTIFY of work.
func claimCountingRuntime(t *testing.T, g *graph.Graph) (*journey.Runtime, journey.Config, *claimCounter) {
	t.Helper()
	claims := newClaimCounter()
	cfg := testConfig(t, g)
	cfg.PollInterval = 30 * time.Second
	cfg.ReplicaID = g.Name() + "-replica"
	cfg.Test.Hooks = claims.hooks()
	rt := newRuntime(t, cfg)
	claims.started(t)
	return rt, cfg, claims
}

// availableAt reads when each attempt of node y of execution id became AVAILABLE (nil: never),
// and the replica that holds or held it.
func availableAt(t *testing.T, schema, id string) (at []*time.Time, replicas []*string) {
	t.Helper()
	return nodeAvailableAt(t, schema, id, "y")
}

// nodeAvailableAt is availableAt of node.
func nodeAvailableAt(t *testing.T, schema, id, node string) (at []*time.Time, replicas []*string) {
	t.Helper()
	rows, err := pgtest.DB(t).QueryContext(testCtx(t), "SELECT available_at, replica_id FROM "+
		pgx.Identifier{schema, "computations"}.Sanitize()+" WHERE execution_id = $1 AND node = $2 ORDER BY id", id, node)
	require.NoError(t, err)
	defer rows.Close()
	for rows.Next() {
		var a *time.Time
		var r *string
		require.NoError(t, rows.Scan(&a, &r))
		at, replicas = append(at, a), append(replicas, r)
	}
	require.NoError(t, rows.Err())
	return at, replicas
}

// A Set whose write makes work ready, on a replica that serves the graph and has a free worker,
// claims that work in its own transaction and hands it to its dispatcher: the attempt is never
// AVAILABLE, and no claim runs (the poll, 30s, is far off; a NOTIFY of work would start one).
func TestSetHandsItsWorkToTheLocalDispatcher(t *testing.T) {
	t.Parallel()
	g := localGraph("local-set")
	rt, cfg, claims := claimCountingRuntime(t, g)
	ctx := testCtx(t)

	for i := range 3 {
		ex, err := rt.Start(ctx, g)
		require.NoError(t, err)
		rev, err := rt.Set(ctx, ex.ID, "x", i)
		require.NoError(t, err)
		require.Equal(t, int64(1), rev, "the Set's own revision")
		v, err := rt.Get(ctx, ex.ID, "y", journey.WaitAny())
		require.NoError(t, err)
		require.Equal(t, int64(i+1), v.Int())
		// The Set at 1, the claim at 2, the completion at 3, as with a claim of its own.
		require.Equal(t, int64(3), v.Revision)

		at, replicas := availableAt(t, cfg.Schema, ex.ID)
		require.Len(t, at, 1)
		require.Nil(t, at[0], "the attempt was never AVAILABLE")
		require.Equal(t, cfg.ReplicaID, *replicas[0])
		got := attempts(t, rt, ex.ID, "y")
		require.Equal(t, journey.StateSuccess, got[0].State)
		require.False(t, got[0].ClaimedAt.Before(got[0].CreatedAt), "claimed as the write that made it commits")
	}
	// Start with values takes the same path.
	ex, err := rt.Start(ctx, g, journey.WithValues(map[string]any{"x": 41}))
	require.NoError(t, err)
	require.Equal(t, int64(1), ex.Revision)
	v, err := rt.Get(ctx, ex.ID, "y", journey.WaitAny())
	require.NoError(t, err)
	require.Equal(t, int64(42), v.Int())
	at, _ := availableAt(t, cfg.Schema, ex.ID)
	require.Equal(t, []*time.Time{nil}, at)

	require.Zero(t, claims.n.Load(), "no claim ran")
}

// A completion that makes work ready claims it too, as a Set does: along a chain x → y → z,
// neither y nor z is ever AVAILABLE, and no claim runs.
func TestCompletionHandsItsWorkToTheLocalDispatcher(t *testing.T) {
	t.Parallel()
	g := graph.MustNew("local-chain", "v1", []graph.Node{
		graph.Input("x"),
		graph.Compute("y", graph.Needs("x"), func(ctx context.Context, in graph.Values) (any, error) {
			return in.Int("x") + 1, nil
		}),
		graph.Compute("z", graph.Needs("y"), func(ctx context.Context, in graph.Values) (any, error) {
			return in.Int("y") + 1, nil
		}),
	})
	rt, cfg, claims := claimCountingRuntime(t, g)
	ctx := testCtx(t)

	ex, err := rt.Start(ctx, g, journey.WithValues(map[string]any{"x": 1}))
	require.NoError(t, err)
	v, err := rt.Get(ctx, ex.ID, "z", journey.WaitAny())
	require.NoError(t, err)
	require.Equal(t, int64(3), v.Int())
	for _, node := range []string{"y", "z"} {
		at, replicas := nodeAvailableAt(t, cfg.Schema, ex.ID, node)
		require.Equal(t, []*time.Time{nil}, at, "%s was never AVAILABLE", node)
		require.Equal(t, cfg.ReplicaID, *replicas[0])
	}
	require.Zero(t, claims.n.Load(), "no claim ran")
}

// A write whose COMMIT fails claims nothing: its attempts are rolled back with it, and the
// workers it reserved are free again for the next write.
func TestFailedCommitClaimsNothing(t *testing.T) {
	pgtest.SkipOnCitus(t, "Citus refuses triggers on distributed tables, which the test injects its failure with")
	t.Parallel()
	g := localGraph("local-abort")
	cfg := testConfig(t, g)
	cfg.PollInterval = 30 * time.Second
	cfg.MaxWorkers = 1 // a reservation not given back would leave no worker for the next Set
	claims := newClaimCounter()
	cfg.Test.Hooks = claims.hooks()
	rt := newRuntime(t, cfg)
	claims.started(t)
	ctx := testCtx(t)
	db := pgtest.DB(t)
	table := pgx.Identifier{cfg.Schema, "nodes"}.Sanitize()
	fn := pgx.Identifier{cfg.Schema, "refuse_claimed"}.Sanitize()
	// A deferred constraint trigger fails the COMMIT itself of a write that writes a claimed
	// attempt.
	_, err := db.ExecContext(ctx, `CREATE FUNCTION `+fn+`() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN RAISE EXCEPTION 'injected: the COMMIT fails'; END $$`)
	require.NoError(t, err)
	_, err = db.ExecContext(ctx, `CREATE CONSTRAINT TRIGGER refuse_claimed AFTER INSERT OR UPDATE ON `+table+`
		DEFERRABLE INITIALLY DEFERRED FOR EACH ROW WHEN (NEW.replica_id IS NOT NULL) EXECUTE FUNCTION `+fn+`()`)
	require.NoError(t, err)

	failed, err := rt.Start(ctx, g)
	require.NoError(t, err)
	_, err = rt.Set(ctx, failed.ID, "x", 1)
	require.ErrorContains(t, err, "injected: the COMMIT fails")
	at, _ := availableAt(t, cfg.Schema, failed.ID)
	require.Empty(t, at, "nothing was written")
	_, err = rt.Get(ctx, failed.ID, "x")
	require.ErrorIs(t, err, journey.ErrNotSet)

	_, err = db.ExecContext(ctx, `DROP TRIGGER refuse_claimed ON `+table)
	require.NoError(t, err)
	ex, err := rt.Start(ctx, g)
	require.NoError(t, err)
	_, err = rt.Set(ctx, ex.ID, "x", 2)
	require.NoError(t, err)
	// The poll (30s) would find it: the worker runs it before.
	gctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	v, err := rt.Get(gctx, ex.ID, "y", journey.WaitAny())
	require.NoError(t, err)
	require.Equal(t, int64(3), v.Int())
	at, _ = availableAt(t, cfg.Schema, ex.ID)
	require.Equal(t, []*time.Time{nil}, at, "the one worker was free again for the next Set")
}

// A write whose COMMIT gets no answer, though the server committed it, gives back the attempt it
// claimed for its replica, fenced by the claim token it chose before the COMMIT: the attempt is
// AVAILABLE at once, and runs, without waiting for its heartbeat deadline or spending an attempt
// (with MaxAttempts(1), the node would fail without ever running). The caller learns that the
// outcome is unknown.
func TestClaimOfAWriteWhoseCommitGotNoAnswerIsReleased(t *testing.T) {
	t.Parallel()
	g := localGraph("local-unknown", graph.Heartbeat(time.Second, time.Hour), graph.MaxAttempts(1))
	var target atomic.Pointer[string]
	cfg := testConfig(t, g)
	cfg.Test.StoreHooks = persistence.Hooks{Committed: func(handed []string) error {
		if id := target.Load(); id != nil && slices.Contains(handed, *id) && target.CompareAndSwap(id, nil) {
			return errInjected
		}
		return nil
	}}
	claims := newClaimCounter()
	cfg.Test.Hooks = claims.hooks()
	rt := newRuntime(t, cfg)
	claims.started(t)
	ctx := testCtx(t)
	ex, err := rt.Start(ctx, g)
	require.NoError(t, err)
	target.Store(&ex.ID)
	_, err = rt.Set(ctx, ex.ID, "x", 1)
	require.ErrorIs(t, err, errInjected)
	require.ErrorIs(t, err, journey.ErrOutcomeUnknown)

	// Far below the heartbeat timeout (an hour): the released attempt runs at once.
	gctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	v, err := rt.Get(gctx, ex.ID, "y", journey.WaitAny())
	require.NoError(t, err)
	require.Equal(t, int64(2), v.Int())
	got := unreleased(t, attempts(t, rt, ex.ID, "y"))
	require.Len(t, got, 1, "no attempt spent")
	require.Equal(t, journey.StateSuccess, got[0].State)
	require.Equal(t, 1, got[0].Attempt)
}

type injected struct{}

func (injected) Error() string { return "injected: the connection broke as the COMMIT was sent" }

var errInjected error = injected{}

// A write that waits for its execution's lock longer than a heartbeat timeout, and claims the
// attempt it makes ready, stamps the claim once it holds the lock: the attempt does not commit
// already past its heartbeat deadline, which the sweeper would abandon while the function runs,
// and its retry run beside it.
func TestLocalClaimStartsItsDeadlinesAfterTheLockWait(t *testing.T) {
	t.Parallel()
	// Two seconds: a busy machine (Citus's three servers, the race detector and a CPU hog on two
	// cores) delayed a heartbeat past a timeout of one, and the sweeper rightly ran the attempt again.
	const timeout = 2 * time.Second
	var runs, running, most atomic.Int64
	var fresh atomic.Bool // the attempt's heartbeat deadline was ahead when its function began
	cfg := testConfig(t)
	db := pgtest.DB(t)
	g := graph.MustNew("local-lockwait", "v1", []graph.Node{
		graph.Input("x"),
		graph.Compute("y", graph.Needs("x"), func(ctx context.Context, in graph.Values) (any, error) {
			first := runs.Add(1) == 1
			n := running.Add(1)
			defer running.Add(-1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
			if first {
				var ahead bool
				err := db.QueryRowContext(ctx, `SELECT bool_and(heartbeat_deadline > now()) FROM `+
					pgx.Identifier{cfg.Schema, "computations"}.Sanitize()+` WHERE state = 'RUNNING'`).Scan(&ahead)
				fresh.Store(err == nil && ahead)
			}
			// Long enough for sweeps (every 50ms) to find the attempt, were it past its deadline.
			select {
			case <-time.After(2 * timeout):
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			return in.Int("x") + 1, nil
		}, graph.Heartbeat(timeout/4, timeout), graph.MaxAttempts(3), graph.Backoff(fastBackoff)),
	})
	cfg.Graphs = []*graph.Graph{g}
	rt := newRuntime(t, cfg)
	ctx := testCtx(t)
	ex, err := rt.Start(ctx, g)
	require.NoError(t, err)

	// Another session holds the execution's row while the Set waits for it, longer than the
	// heartbeat timeout.
	holder, err := db.BeginTx(ctx, nil)
	require.NoError(t, err)
	defer func() { _ = holder.Rollback() }()
	_, err = holder.ExecContext(ctx, `SELECT 1 FROM `+pgx.Identifier{cfg.Schema, "executions"}.Sanitize()+
		` WHERE lane = $1 AND id = $2 FOR UPDATE`, persistence.LaneOf(ex.ID), ex.ID)
	require.NoError(t, err)
	set := make(chan error, 1)
	go func() {
		_, err := rt.Set(ctx, ex.ID, "x", 1)
		set <- err
	}()
	waits := `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`
	if pgtest.Citus(t) {
		waits = `SELECT count(*) FROM citus_lock_waits` // the Set waits on the worker
	}
	waitFor(t, "the Set to wait for the execution's lock", func() bool {
		var waiting int
		require.NoError(t, db.QueryRowContext(ctx, waits).Scan(&waiting))
		return waiting > 0
	})
	time.Sleep(timeout + timeout/2) // the wall-clock time that the lock wait takes is the point
	require.NoError(t, holder.Commit())
	require.NoError(t, <-set)

	v, err := rt.Get(ctx, ex.ID, "y", journey.WaitAny())
	require.NoError(t, err)
	require.Equal(t, int64(2), v.Int())
	require.True(t, fresh.Load(), "the claim's heartbeat deadline was ahead when the function began")
	require.Equal(t, int64(1), runs.Load(), "the function ran once")
	require.Equal(t, int64(1), most.Load(), "never two at once")
	require.Equal(t, map[journey.ComputationState]int{journey.StateSuccess: 1}, countStates(t, rt, ex.ID, "y"))
}
