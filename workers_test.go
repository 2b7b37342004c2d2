package journey_test

import (
	"context"
	"slices"
	"sync"
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

// MaxWorkers bounds the functions running at once on a replica. An attempt whose function has
// returned frees its worker while its outcome is recorded, so that the next claims overlap the
// recording; but the attempts claimed and not yet returned never outnumber MaxWorkers.
func TestMaxWorkersBoundsTheFunctionsRunning(t *testing.T) {
	t.Parallel()
	const workers, executions = 2, 8
	var returned atomic.Int64
	entered := make(chan struct{}, executions)
	release := make(chan struct{})
	g := graph.MustNew("workers", "v1", []graph.Node{
		graph.Input("x"),
		graph.Compute("y", graph.Needs("x"), func(ctx context.Context, in graph.Values) (any, error) {
			defer returned.Add(1)
			entered <- struct{}{}
			select {
			case <-release:
				return in.Int("x"), nil
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}),
	})
	cfg := testConfig(t, g)
	cfg.MaxWorkers = workers
	rt := newRuntime(t, cfg)
	ctx := testCtx(t)
	inputs := numbered(executions)
	started, err := rt.StartMany(ctx, g, inputs)
	require.NoError(t, err)

	// A claim commits its attempts RUNNING before their functions start: RUNNING attempts less
	// the functions returned is never below what the replica runs, whenever it is read.
	claimedNotReturned := func() int64 {
		var running int64
		require.NoError(t, pgtest.DB(t).QueryRowContext(ctx, "SELECT count(*) FROM "+
			pgx.Identifier{cfg.Schema, "computations"}.Sanitize()+" WHERE state = 'RUNNING'").Scan(&running))
		return running - returned.Load()
	}
	// Each function blocks until released; one released lets one more in, until all have run.
	for i := 0; i < executions; i++ {
		select {
		case <-entered:
		case <-ctx.Done():
			t.Fatalf("%d of %d functions ran", i, executions)
		}
		require.LessOrEqual(t, claimedNotReturned(), int64(workers), "attempts claimed whose functions have not returned")
		if i >= workers-1 {
			release <- struct{}{}
		}
	}
	for range workers - 1 {
		release <- struct{}{}
	}
	for i, e := range started {
		v, err := rt.Get(ctx, e.ID, "y", journey.WaitAny())
		require.NoError(t, err)
		require.Equal(t, int64(i), v.Int())
	}
}

// A replica holds at most four times MaxWorkers attempts: the functions running, and those that
// have returned and wait for the completer to record them. With the completer held up, it claims
// up to that bound and no further, however often its dispatcher wakes; then the outcomes go in.
func TestClaimedAttemptsStayUnderFourTimesMaxWorkers(t *testing.T) {
	pgtest.SkipOnCitus(t, "Citus refuses triggers on distributed tables, which the test counts the claims with")
	t.Parallel()
	const workers, bound, executions = 2, 4 * 2, 20
	locked := make(chan struct{})
	g := graph.MustNew("held", "v1", []graph.Node{
		graph.Input("x"),
		graph.Compute("y", graph.Needs("x"), func(ctx context.Context, in graph.Values) (any, error) {
			select {
			case <-locked:
				return in.Int("x"), nil
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}, graph.Heartbeat(50*time.Millisecond, time.Minute)),
	})
	var mu sync.Mutex
	var held []int // the attempts that each heartbeat statement extended
	beat := make(chan struct{}, 1)
	cfg := testConfig(t, g)
	cfg.MaxWorkers = workers
	cfg.Test.Hooks = actors.Hooks{Heartbeating: func(refs []persistence.ClaimRef) {
		mu.Lock()
		held = append(held, len(refs))
		mu.Unlock()
		select {
		case beat <- struct{}{}:
		default:
		}
	}}
	rt := newRuntime(t, cfg)
	ctx := testCtx(t)
	inputs := numbered(executions)
	started, err := rt.StartMany(ctx, g, inputs)
	require.NoError(t, err)

	// Recording an outcome writes its node row SUCCESS: a trigger that waits for an advisory lock
	// that the test holds holds every outcome up, while the claims go on. No function returns
	// before it is taken.
	db := pgtest.DB(t)
	holder, err := db.Conn(ctx)
	require.NoError(t, err)
	defer func() { _ = holder.Close() }()
	_, err = holder.ExecContext(ctx, "SELECT pg_advisory_lock(hashtext($1))", cfg.Schema)
	require.NoError(t, err)
	fn, nodes := pgx.Identifier{cfg.Schema, "hold_outcomes"}.Sanitize(), pgx.Identifier{cfg.Schema, "nodes"}.Sanitize()
	_, err = db.ExecContext(ctx, `CREATE FUNCTION `+fn+`() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN PERFORM pg_advisory_xact_lock_shared(hashtext(TG_TABLE_SCHEMA)); RETURN NEW; END $$`)
	require.NoError(t, err)
	_, err = db.ExecContext(ctx, `CREATE TRIGGER hold_outcomes BEFORE UPDATE ON `+nodes+`
		FOR EACH ROW WHEN (NEW.state = 'SUCCESS') EXECUTE FUNCTION `+fn+`()`)
	require.NoError(t, err)
	close(locked)

	// Watch the heartbeats until one extends as many attempts as the bound, and five more.
	full := -1
	for {
		mu.Lock()
		n := len(held)
		if full < 0 {
			full = slices.IndexFunc(held, func(n int) bool { return n >= bound })
		}
		mu.Unlock()
		if full >= 0 && n > full+5 {
			break
		}
		select {
		case <-beat:
		case <-ctx.Done():
			mu.Lock()
			seen := slices.Clone(held)
			mu.Unlock()
			t.Fatalf("no heartbeat extended %d attempts: %v", bound, seen)
		}
	}
	mu.Lock()
	require.LessOrEqual(t, slices.Max(held), bound, "attempts held, at each heartbeat: %v", held)
	mu.Unlock()
	var running int
	require.NoError(t, db.QueryRowContext(ctx, "SELECT count(*) FROM "+nodes+" WHERE state = 'RUNNING'").Scan(&running))
	require.Equal(t, bound, running, "attempts claimed while the outcomes were held up")

	_, err = holder.ExecContext(ctx, "SELECT pg_advisory_unlock(hashtext($1))", cfg.Schema)
	require.NoError(t, err)
	for i, e := range started {
		v, err := rt.Get(ctx, e.ID, "y", journey.WaitAny())
		require.NoError(t, err)
		require.Equal(t, int64(i), v.Int())
	}
}
