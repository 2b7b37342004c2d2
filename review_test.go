package journey_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/journey-go/journey"
	"github.com/journey-go/journey/graph"
	"github.com/journey-go/journey/internal/clock"
	"github.com/journey-go/journey/internal/pgtest"
	"github.com/journey-go/journey/persistence"
)

// stuckLine is lineGraph whose "stuck" items wait for their context.
func stuckLine() *graph.Graph {
	return lineGraph(func(ctx context.Context, in graph.Values) (any, error) {
		if in.String("sku") == "stuck" {
			<-ctx.Done()
			return nil, ctx.Err()
		}
		return in.String("sku"), nil
	})
}

func childAt(t *testing.T, rt *journey.Runtime, parent string, index int) string {
	t.Helper()
	for _, c := range childrenOf(t, rt, parent) {
		if c.Parent.Index == index {
			return c.ID
		}
	}
	t.Fatalf("no child %d of %s", index, parent)
	return ""
}

// reviewStore is a store on the runtime's schema, as the CLI and the dashboard open it.
func reviewStore(t *testing.T, cfg journey.Config) *persistence.Store {
	t.Helper()
	s, err := persistence.New(persistence.Config{DB: pgtest.BunDB(t, cfg.DatabaseURL), Schema: cfg.Schema})
	require.NoError(t, err)
	return s
}

func waitMap(t *testing.T, rt *journey.Runtime, id string) {
	t.Helper()
	waitFor(t, "the map to wait", func() bool { return countStates(t, rt, id, "charges")[journey.StateWaiting] == 1 })
}

// settler moves a replica's test clock by a millisecond, which runs a sweep pass at once (the
// promotions and abandonments it finds due) and wakes the dispatcher, and waits for a claim that
// began after the pass: what the pass left unclaimable, no claim took.
type settler struct {
	clock  *clock.Stub
	rounds atomic.Int64 // the dispatchers' claim rounds (Config.Test.Hooks.Claimed)
}

// newSettler gives cfg a test clock, and counts its replicas' claim rounds.
func newSettler(cfg *journey.Config) *settler {
	s := &settler{clock: clock.NewStub(time.Now())}
	cfg.Test.Clock = s.clock
	cfg.Test.Hooks.Claimed = func(int) { s.rounds.Add(1) }
	return s
}

func (s *settler) settle(t *testing.T) {
	t.Helper()
	before := s.rounds.Load()
	s.clock.Advance(time.Millisecond)
	// A round under way at the move may have begun before the pass; the next one began after it.
	waitFor(t, "a claim after the sweep pass", func() bool { return s.rounds.Load() >= before+2 })
}

// latestState is the state of node's current attempt.
func latestState(t *testing.T, rt *journey.Runtime, id, node string) journey.ComputationState {
	t.Helper()
	as := attempts(t, rt, id, node)
	if len(as) == 0 {
		return ""
	}
	return as[len(as)-1].State
}

func getSoon(t *testing.T, rt *journey.Runtime, id, node string, d time.Duration, opts ...journey.GetOption) (graph.Value, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(testCtx(t), d)
	defer cancel()
	return rt.Get(ctx, id, node, opts...)
}

// R1: `journey executions cancel` and the dashboard's Cancel (a request) of a map's parent.
func TestReviewCancelRequestReachesChildren(t *testing.T) {
	line := stuckLine()
	order := ordersGraph(line)
	cfg := testConfig(t, order, line)
	rt := newRuntime(t, cfg)
	ctx := testCtx(t)
	ex, err := rt.Start(ctx, order, journey.WithValues(map[string]any{"lines": []map[string]any{
		{"sku": "stuck", "cents": 1}, {"sku": "stuck", "cents": 2}}}))
	require.NoError(t, err)
	waitMap(t, rt, ex.ID)
	store := reviewStore(t, cfg)
	req, err := store.Ask(ctx, ex.ID, persistence.ActionCancel, "customer left")
	require.NoError(t, err)
	req, err = store.AwaitRequest(ctx, req.ID, 20*time.Second)
	require.NoError(t, err)
	require.NotNil(t, req.DoneAt)
	waitFor(t, "the children to be canceled", func() bool {
		for _, c := range childrenOf(t, rt, ex.ID) {
			if c.CanceledAt == nil {
				return false
			}
		}
		return true
	})
	for _, c := range childrenOf(t, rt, ex.ID) {
		require.NotNil(t, c.CanceledAt, "child %d (%s) of the canceled parent still runs", c.Parent.Index, c.ID)
	}
}

// R2: a child archived by a request (`journey executions archive`, the dashboard).
func TestReviewChildArchivedByRequestIsCounted(t *testing.T) {
	line := stuckLine()
	order := ordersGraph(line, graph.CollectFailures())
	cfg := testConfig(t, order, line)
	rt := newRuntime(t, cfg)
	ctx := testCtx(t)
	ex, err := rt.Start(ctx, order, journey.WithValues(map[string]any{"lines": []map[string]any{
		{"sku": "a", "cents": 1}, {"sku": "stuck", "cents": 2}}}))
	require.NoError(t, err)
	waitMap(t, rt, ex.ID)
	store := reviewStore(t, cfg)
	req, err := store.Ask(ctx, childAt(t, rt, ex.ID, 1), persistence.ActionArchive, "")
	require.NoError(t, err)
	_, err = store.AwaitRequest(ctx, req.ID, 20*time.Second)
	require.NoError(t, err)
	_, err = getSoon(t, rt, ex.ID, "charges", 15*time.Second, journey.WaitAny())
	require.NoError(t, err, "the map collects once its archived child has ended (states %v)", countStates(t, rt, ex.ID, "charges"))
}

// R3: a child archived by its own archive node.
func TestReviewChildArchivedByItsArchiveNodeIsCounted(t *testing.T) {
	line := graph.MustNew("line", "v1", []graph.Node{
		graph.Input("sku"), graph.Input("cents"), graph.Input("approved"), graph.Input("rejected"),
		graph.Compute("charged", graph.Needs("sku", "cents", "approved"), func(ctx context.Context, in graph.Values) (any, error) {
			return in.String("sku"), nil
		}),
		graph.Archive("dropped", graph.Needs("rejected")),
	}, graph.CompletesWhen(graph.Needs("charged")))
	order := ordersGraph(line, graph.CollectFailures())
	rt := newRuntime(t, testConfig(t, order, line))
	ctx := testCtx(t)
	ex, err := rt.Start(ctx, order, journey.WithValues(map[string]any{"lines": []map[string]any{
		{"sku": "a", "cents": 1, "approved": true}, {"sku": "b", "cents": 2}}}))
	require.NoError(t, err)
	waitMap(t, rt, ex.ID)
	_, err = rt.Set(ctx, childAt(t, rt, ex.ID, 1), "rejected", true)
	require.NoError(t, err)
	_, err = getSoon(t, rt, ex.ID, "charges", 15*time.Second, journey.WaitAny())
	require.NoError(t, err, "the map collects once its archived child has ended (states %v)", countStates(t, rt, ex.ID, "charges"))
}

// R4: Archive, then Unarchive, of a map's parent.
func TestReviewUnarchivedParentIsNotStuck(t *testing.T) {
	line := stuckLine()
	order := ordersGraph(line, graph.CollectFailures())
	rt := newRuntime(t, testConfig(t, order, line))
	ctx := testCtx(t)
	ex, err := rt.Start(ctx, order, journey.WithValues(map[string]any{"lines": []map[string]any{
		{"sku": "a", "cents": 1}, {"sku": "stuck", "cents": 2}}}))
	require.NoError(t, err)
	waitMap(t, rt, ex.ID)
	require.NoError(t, rt.Archive(ctx, ex.ID))
	require.NoError(t, rt.Unarchive(ctx, ex.ID))
	_, err = getSoon(t, rt, ex.ID, "charges", 15*time.Second, journey.WaitAny())
	require.NoError(t, err, "states %v", countStates(t, rt, ex.ID, "charges"))
}

// R5: a paused parent's map node is claimed and collected when a child's running attempt ends.
func TestReviewPausedParentClaimsNothing(t *testing.T) {
	release := make(chan struct{})
	line := lineGraph(func(ctx context.Context, in graph.Values) (any, error) {
		select {
		case <-release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return in.String("sku"), nil
	})
	order := ordersGraph(line)
	rt := newRuntime(t, testConfig(t, order, line))
	ctx := testCtx(t)
	ex, err := rt.Start(ctx, order, journey.WithValues(map[string]any{"lines": []map[string]any{{"sku": "a", "cents": 1}}}))
	require.NoError(t, err)
	waitMap(t, rt, ex.ID)
	child := childAt(t, rt, ex.ID, 0)
	waitFor(t, "the child to run", func() bool { return countStates(t, rt, child, "charged")[journey.StateRunning] == 1 })
	require.NoError(t, rt.Pause(ctx, ex.ID))
	close(release) // the child's running attempt runs on, and ends
	waitFor(t, "the child to end", func() bool { return countStates(t, rt, child, "charged")[journey.StateSuccess] == 1 })
	// Its end wakes the map node, which waits PAUSED in the paused parent: nothing claims that.
	waitFor(t, "the map node to wait paused", func() bool { return countStates(t, rt, ex.ID, "charges")[journey.StatePaused] == 1 })
	require.Zero(t, countStates(t, rt, ex.ID, "charges")[journey.StateSuccess], "a node of the paused parent was claimed and ran")
}

// R6: SetTx in the application's REPEATABLE READ transaction.
func TestReviewSetTxRepeatableRead(t *testing.T) {
	release := make(chan struct{})
	g := graph.MustNew("rr", "v1", []graph.Node{
		graph.Input("x"),
		graph.Compute("y", graph.Needs("x"), func(ctx context.Context, in graph.Values) (any, error) {
			if in.Int("x") == 1 {
				select {
				case <-release:
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			}
			return in.Int("x") + 1, nil
		}),
	})
	cfg := testConfig(t, g)
	rt := newRuntime(t, cfg)
	ctx := testCtx(t)
	pool, err := pgxpool.New(ctx, cfg.DatabaseURL)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	ex, err := rt.Start(ctx, g, journey.WithValues(map[string]any{"x": 1}))
	require.NoError(t, err)
	waitFor(t, "y to run", func() bool { return countStates(t, rt, ex.ID, "y")[journey.StateRunning] == 1 })

	tx, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.Background()) }()
	_, err = tx.Exec(ctx, "SELECT 1") // the application reads its own rows first
	require.NoError(t, err)

	close(release) // y = 2 commits
	y, err := rt.Get(ctx, ex.ID, "y", journey.WaitAny())
	require.NoError(t, err)
	require.EqualValues(t, 2, y.Int())

	rev, err := rt.SetTx(ctx, tx, ex.ID, "x", 10)
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	t.Logf("y at revision %d, the SetTx's revision %d", y.Revision, rev)
	y2, err := getSoon(t, rt, ex.ID, "y", 10*time.Second, journey.WaitNewerThan(y.Revision))
	require.NoError(t, err, "y is never computed for x = 10 (states %v)", countStates(t, rt, ex.ID, "y"))
	require.EqualValues(t, 11, y2.Int())
	require.Greater(t, rev, y.Revision)
}

// R7: a paused execution's attempt released at a Stop runs on another replica while paused.
func TestReviewReleasedAttemptOfPausedExecutionWaits(t *testing.T) {
	var runs atomic.Int64
	started := make(chan struct{}, 8)
	g := graph.MustNew("rel", "v1", []graph.Node{
		graph.Input("x"),
		graph.Compute("y", graph.Needs("x"), func(ctx context.Context, in graph.Values) (any, error) {
			runs.Add(1)
			started <- struct{}{}
			<-ctx.Done()
			return nil, ctx.Err()
		}),
	})
	cfg := testConfig(t, g)
	a, err := journey.New(context.Background(), cfg)
	require.NoError(t, err)
	ctx := testCtx(t)
	ex, err := a.Start(ctx, g, journey.WithValues(map[string]any{"x": 1}))
	require.NoError(t, err)
	<-started
	require.NoError(t, a.Pause(ctx, ex.ID))
	cfg.ReplicaID = "second"
	b := newRuntime(t, cfg)
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	require.NoError(t, a.Stop(sctx))
	// The released attempt's successor waits PAUSED in the paused execution: nothing claims that.
	waitFor(t, "the released attempt's successor to wait paused", func() bool {
		return latestState(t, b, ex.ID, "y") == journey.StatePaused || runs.Load() > 1
	})
	require.EqualValues(t, 1, runs.Load(), "the paused execution's attempt ran again on another replica (states %v)",
		countStates(t, b, ex.ID, "y"))
}

// lockWaiters counts the sessions waiting for a lock in a statement that names map_progress.
func lockWaiters(t *testing.T, pool *pgxpool.Pool) int {
	t.Helper()
	var n int
	var what string
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT count(*), coalesce(string_agg(wait_event_type || '/' || coalesce(wait_event,'') || ': ' || left(query, 60), ' | '), '') FROM pg_stat_activity
		WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&n, &what))
	t.Logf("waiting: %d %s", n, what)
	return n
}

// R8: a child's end counted while a Recount (a child archived by hand) waits for the progress row.
func TestReviewChildEndDuringRecountIsCounted(t *testing.T) {
	release := make(chan struct{})
	line := lineGraph(func(ctx context.Context, in graph.Values) (any, error) {
		switch in.String("sku") {
		case "stuck":
			<-ctx.Done()
			return nil, ctx.Err()
		case "slow":
			select {
			case <-release:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		return in.String("sku"), nil
	})
	order := ordersGraph(line, graph.CollectFailures())
	cfg := testConfig(t, order, line)
	cfg.LockTimeout = 30 * time.Second
	rt := newRuntime(t, cfg)
	ctx := testCtx(t)
	pool, err := pgxpool.New(ctx, cfg.DatabaseURL)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	ex, err := rt.Start(ctx, order, journey.WithValues(map[string]any{"lines": []map[string]any{
		{"sku": "stuck", "cents": 1}, {"sku": "slow", "cents": 2}}}))
	require.NoError(t, err)
	waitMap(t, rt, ex.ID)
	stuck, slow := childAt(t, rt, ex.ID, 0), childAt(t, rt, ex.ID, 1)
	waitFor(t, "the slow child to run", func() bool { return countStates(t, rt, slow, "charged")[journey.StateRunning] == 1 })

	hold, err := pool.Begin(ctx) // holds the progress row for a moment, as another child's count would
	require.NoError(t, err)
	t.Cleanup(func() { _ = hold.Rollback(context.Background()) })
	_, err = hold.Exec(ctx, "SELECT 1 FROM "+pgx.Identifier{cfg.Schema, "map_progress"}.Sanitize()+" FOR UPDATE")
	require.NoError(t, err)
	close(release) // the slow child completes; its end's count waits for the row
	waitFor(t, "the child's end to wait", func() bool { return lockWaiters(t, pool) == 1 })
	done := make(chan error, 1)
	go func() { done <- rt.Archive(ctx, stuck) }() // its recount waits too, after it
	waitFor(t, "the recount to wait", func() bool { return lockWaiters(t, pool) == 2 })
	require.NoError(t, hold.Commit(ctx))
	require.NoError(t, <-done)
	_, err = getSoon(t, rt, ex.ID, "charges", 15*time.Second, journey.WaitAny())
	var total, counted int
	_ = pool.QueryRow(ctx, "SELECT total, done FROM "+pgx.Identifier{cfg.Schema, "map_progress"}.Sanitize()).Scan(&total, &counted)
	require.NoError(t, err, "both children ended; progress %d of %d; states %v", counted, total, countStates(t, rt, ex.ID, "charges"))
}

// R9: OnSave of a value set by SetTx (and StartTx), once the application commits.
func TestReviewSetTxFiresOnSave(t *testing.T) {
	var saved sync.Map
	g := graph.MustNew("saves", "v1", []graph.Node{
		graph.Input("x"),
		graph.Compute("y", graph.Needs("x"), func(_ context.Context, in graph.Values) (any, error) { return in.Int("x") + 1, nil }),
	}, graph.WithOnSave(func(_ context.Context, e graph.SaveEvent) { saved.Store(e.Node+"="+string(e.Value.Raw), true) }))
	cfg := testConfig(t, g)
	rt := newRuntime(t, cfg)
	ctx := testCtx(t)
	pool, err := pgxpool.New(ctx, cfg.DatabaseURL)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	ex, err := rt.Start(ctx, g)
	require.NoError(t, err)
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	_, err = rt.SetTx(ctx, tx, ex.ID, "x", 5)
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	_, err = rt.Get(ctx, ex.ID, "y", journey.WaitAny())
	require.NoError(t, err)
	// OnSave runs after the commit, in a goroutine of its own.
	waitFor(t, "the saves", func() bool {
		_, y := saved.Load("y=6")
		_, x := saved.Load("x=5")
		return x && y
	})
	_, y := saved.Load("y=6")
	_, x := saved.Load("x=5")
	require.True(t, y, "OnSave of y fired")
	require.True(t, x, "OnSave of x, set by SetTx, never fires")
}

// R10: RateLimit(1, 1h): a claim released at a Stop leaves the window, and the attempt starts
// again at once on another replica: two starts within the hour.
func TestReviewReleasedClaimStaysInTheRateWindow(t *testing.T) {
	var runs atomic.Int64
	started := make(chan struct{}, 8)
	g := graph.MustNew("rated-release", "v1", []graph.Node{
		graph.Input("x"),
		graph.Compute("call", graph.Needs("x"), func(ctx context.Context, in graph.Values) (any, error) {
			runs.Add(1)
			started <- struct{}{}
			<-ctx.Done() // the call to the rate-limited API is under way
			return nil, ctx.Err()
		}, graph.RateLimit(1, time.Hour)),
	})
	cfg := testConfig(t, g)
	settler := newSettler(&cfg)
	a, err := journey.New(context.Background(), cfg)
	require.NoError(t, err)
	ctx := testCtx(t)
	ex, err := a.Start(ctx, g, journey.WithValues(map[string]any{"x": 1}))
	require.NoError(t, err)
	<-started
	cfg.ReplicaID = "second"
	b := newRuntime(t, cfg)
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	require.NoError(t, a.Stop(sctx))
	waitFor(t, "the released attempt's successor", func() bool { return len(attempts(t, b, ex.ID, "call")) == 2 })
	settler.settle(t)
	var claims []time.Time
	for _, c := range attempts(t, b, ex.ID, "call") {
		if c.ClaimedAt != nil {
			claims = append(claims, *c.ClaimedAt)
		}
	}
	require.EqualValues(t, 1, runs.Load(), "starts within the hour; the recorded claims: %v", claims)
}

// R11: Archive, Cancel, then Unarchive: the attempts that archiving canceled come back to life
// in the canceled execution, and run.
func TestReviewUnarchiveRevivesNothingOfACanceledExecution(t *testing.T) {
	var ran sync.Map
	release := make(chan struct{})
	g := graph.MustNew("slot", "v1", []graph.Node{
		graph.Input("x"),
		graph.Compute("y", graph.Needs("x"), func(ctx context.Context, in graph.Values) (any, error) {
			ran.Store(in.Int("x"), true)
			if in.Int("x") == 0 {
				select {
				case <-release:
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			}
			return in.Int("x"), nil
		}, graph.MaxParallel(1)),
	})
	cfg := testConfig(t, g)
	settler := newSettler(&cfg)
	rt := newRuntime(t, cfg)
	ctx := testCtx(t)
	e0, err := rt.Start(ctx, g, journey.WithValues(map[string]any{"x": 0}))
	require.NoError(t, err)
	waitFor(t, "e0 to hold the slot", func() bool { return countStates(t, rt, e0.ID, "y")[journey.StateRunning] == 1 })
	e1, err := rt.Start(ctx, g, journey.WithValues(map[string]any{"x": 1}))
	require.NoError(t, err)
	waitFor(t, "e1 to wait", func() bool { return countStates(t, rt, e1.ID, "y")[journey.StatePending] == 1 })
	require.NoError(t, rt.Archive(ctx, e1.ID))
	require.NoError(t, rt.Cancel(ctx, e1.ID, "customer left"))
	require.NoError(t, rt.Unarchive(ctx, e1.ID))
	close(release)
	_, err = rt.Get(ctx, e0.ID, "y", journey.WaitAny())
	require.NoError(t, err)
	settler.settle(t) // the slot is free: a promotion and a claim would take a revived attempt
	_, ran1 := ran.Load(int64(1))
	require.False(t, ran1, "y of the canceled execution ran (states %v)", countStates(t, rt, e1.ID, "y"))
}

// R12: an attempt completes while the application's transaction holds its execution (SetTx, as
// documented) for longer than the outcome's write timeout: the outcome is thrown away, and the
// work runs again.
func TestReviewCompletionOutlastedBySetTxIsNotRerun(t *testing.T) {
	var runs atomic.Int64
	release := make(chan struct{})
	g := graph.MustNew("held", "v1", []graph.Node{
		graph.Input("x"), graph.Input("note"),
		graph.Compute("y", graph.Needs("x"), func(ctx context.Context, in graph.Values) (any, error) {
			if runs.Add(1) == 1 {
				select {
				case <-release:
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			}
			return "charged", nil // the side effect is done
		}, graph.Heartbeat(200*time.Millisecond, time.Second)),
	})
	cfg := testConfig(t, g)
	rt := newRuntime(t, cfg)
	ctx := testCtx(t)
	pool, err := pgxpool.New(ctx, cfg.DatabaseURL)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	ex, err := rt.Start(ctx, g, journey.WithValues(map[string]any{"x": 1}))
	require.NoError(t, err)
	waitFor(t, "y to run", func() bool { return countStates(t, rt, ex.ID, "y")[journey.StateRunning] == 1 })
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.Background()) }()
	_, err = rt.SetTx(ctx, tx, ex.ID, "note", "a long batch") // the execution is locked until tx ends
	require.NoError(t, err)
	close(release)               // y returns; its outcome waits for the lock
	time.Sleep(35 * time.Second) // longer than a try of the outcome's write: the wall-clock time is the point
	require.NoError(t, tx.Commit(ctx))
	waitFor(t, "y to succeed", func() bool { return latestState(t, rt, ex.ID, "y") == journey.StateSuccess })
	t.Logf("attempts of y: %+v", attempts(t, rt, ex.ID, "y"))
	require.EqualValues(t, 1, runs.Load(), "the work ran again after it had completed")
}
