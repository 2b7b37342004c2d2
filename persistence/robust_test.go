package persistence

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/journey-go/journey/graph"
	"github.com/journey-go/journey/internal/pgtest"
)

// Tests for the ways work could get stuck for good, or run twice, that review found.

// keyedGraph: job runs under a concurrency key, the value of input k.
func keyedGraph(name string, opts ...graph.NodeOption) *graph.Graph {
	opts = append([]graph.NodeOption{graph.ConcurrencyKey(func(v graph.Values) string { return v.String("k") }),
		graph.MaxAttempts(2), graph.Backoff(func(int) time.Duration { return 0 })}, opts...)
	return graph.MustNew(name, "v1", []graph.Node{
		graph.Input("k"),
		graph.Compute("job", graph.Needs("k"), func(ctx context.Context, in graph.Values) (any, error) { return 1, nil }, opts...),
	})
}

// start creates an execution of g with its inputs set, and promotes what it made due.
func (b *bundle) start(t *testing.T, g *graph.Graph, inputs map[string]any) string {
	t.Helper()
	ctx := context.Background()
	e, err := b.store.CreateExecution(ctx, g)
	require.NoError(t, err)
	set := map[string]json.RawMessage{}
	for k, v := range inputs {
		raw, err := json.Marshal(v)
		require.NoError(t, err)
		set[k] = raw
	}
	if len(set) > 0 {
		_, err = b.store.SetValues(ctx, e.ID, set, nil, nil)
		require.NoError(t, err)
	}
	// A write promotes no gated work: it announces it (PayloadPromote), and a dispatcher
	// promotes.
	_, err = b.store.PromoteDue(ctx)
	require.NoError(t, err)
	return e.ID
}

// latest returns the newest attempt of node in execution id.
func (b *bundle) latest(t *testing.T, id, node string) *Computation {
	t.Helper()
	all, err := b.store.Computations(context.Background(), id)
	require.NoError(t, err)
	var newest *Computation
	for i := range all {
		if all[i].Node == node {
			newest = &all[i]
		}
	}
	require.NotNil(t, newest, "node %q of %s has an attempt", node, id)
	return newest
}

// exec runs a statement on the bundle's schema ({s}).
func (b *bundle) exec(t *testing.T, query string, args ...any) {
	t.Helper()
	_, err := b.db.NewRaw(b.store.q(query), args...).Exec(context.Background())
	require.NoError(t, err)
}

// claimed claims what is available for replica and returns the attempts by execution.
func (b *bundle) claimed(t *testing.T, replica string) map[string]*Computation {
	t.Helper()
	got, err := b.store.Claim(context.Background(), replica, 100)
	require.NoError(t, err)
	out := map[string]*Computation{}
	for _, c := range got {
		out[c.ExecutionID] = c
	}
	return out
}

// (c) Promotion looks past blocked candidates: 1,001 due attempts blocked on key A do not keep
// the one attempt on key B from running.
func TestPromotionLooksPastBlockedCandidates(t *testing.T) {
	t.Parallel()
	g := keyedGraph("hol")
	b := setup(t, g)
	holder := b.start(t, g, map[string]any{"k": "A"})
	require.Contains(t, b.claimed(t, "r1"), holder, "the first attempt on key A runs")
	b.exec(t, `INSERT INTO {s}.executions (lane, id, graph_name, graph_version)
		SELECT 0, 'blocked-' || g, 'hol', 'v1' FROM generate_series(1, 1001) g`)
	b.exec(t, `INSERT INTO {s}.nodes (lane, execution_id, node, graph_key, rev, changed_at, attempt_id, state, attempt,
			max_attempts, run_at, abandon_after_ms, heartbeat_timeout_ms, concurrency_key, created_at)
		SELECT 0, 'blocked-' || g, 'job', 'hol@v1', 1, now(), g, 'PENDING', 1, 2, now() - interval '1 hour', 60000, 30000,
			'A', now()
		FROM generate_series(1, 1001) g`)

	free := b.start(t, g, map[string]any{"k": "B"})
	require.Equal(t, StateAvailable, b.latest(t, free, "job").State, "key B is free: its attempt is promoted")
	_, err := b.store.PromoteDue(context.Background())
	require.NoError(t, err)
	var available int
	require.NoError(t, b.db.NewRaw(b.store.q(`SELECT count(*) FROM {s}.nodes WHERE state = 'AVAILABLE'`)).Scan(context.Background(), &available))
	require.Equal(t, 1, available, "nothing on the held key A is promoted")
}

// (b) An archived execution holds no gating slot: its waiting attempt is canceled, so it is
// never promoted into a slot that no claim would take.
func TestArchivedExecutionsHoldNoSlot(t *testing.T) {
	t.Parallel()
	g := keyedGraph("archived")
	b := setup(t, g)
	ctx := context.Background()
	first := b.start(t, g, map[string]any{"k": "A"})
	running := b.claimed(t, "r1")[first]
	require.NotNil(t, running)
	archived := b.start(t, g, map[string]any{"k": "A"})
	require.Equal(t, StatePending, b.latest(t, archived, "job").State)
	require.NoError(t, b.store.SetArchived(ctx, archived, true))
	require.Equal(t, StateCanceled, b.latest(t, archived, "job").State, "archiving cancels the waiting attempt")
	next := b.start(t, g, map[string]any{"k": "A"})

	require.NoError(t, b.store.Complete(ctx, running, json.RawMessage(`1`), nil))
	require.Contains(t, b.claimed(t, "r1"), next, "the key passes to the next live execution")

	// Unarchived, the canceled attempt is revived, and waits for the key as before.
	require.NoError(t, b.store.SetArchived(ctx, archived, false))
	revived := b.latest(t, archived, "job")
	require.Equal(t, StatePending, revived.State)
	require.Equal(t, 1, revived.Attempt)
}

// (b) The RUNNING attempt of an archived execution whose replica died is still abandoned, so its
// slot is freed; the retry waits, canceled, until the execution is unarchived.
func TestDeadWorkOfAnArchivedExecutionFreesItsSlot(t *testing.T) {
	t.Parallel()
	g := keyedGraph("deadarchived")
	b := setup(t, g)
	ctx := context.Background()
	orphan := b.start(t, g, map[string]any{"k": "A"})
	require.Contains(t, b.claimed(t, "dead"), orphan) // replica "dead" has no heartbeat row
	require.NoError(t, b.store.SetArchived(ctx, orphan, true))
	waiting := b.start(t, g, map[string]any{"k": "A"})
	require.Equal(t, StatePending, b.latest(t, waiting, "job").State)

	res, err := b.store.Sweep(ctx, SweepOptions{Holder: "r1", Limit: 10})
	require.NoError(t, err)
	require.Len(t, res.Abandoned, 1)
	require.Equal(t, ReasonReplica("dead"), *res.Abandoned[0].Error)
	retry := b.latest(t, orphan, "job")
	require.Equal(t, StateCanceled, retry.State)
	require.Equal(t, 2, retry.Attempt)
	require.Contains(t, b.claimed(t, "r1"), waiting, "the freed key passes on")

	require.NoError(t, b.store.SetArchived(ctx, orphan, false))
	require.Equal(t, StatePending, b.latest(t, orphan, "job").State, "unarchived, the retry waits for the key again")
}

// (d) A sweep never holds the promotion lock while it waits for an execution: a writer that holds
// an execution and then promotes cannot close a cycle with it.
func TestSweepNeverWaitsForAnExecutionWhileHoldingThePromotionLock(t *testing.T) {
	t.Parallel()
	g := keyedGraph("lockorder")
	b := setup(t, g)
	b.store = b.newStore(t, Config{Graphs: []*graph.Graph{g}, LockTimeout: time.Minute})
	ctx := context.Background()
	// Two gated attempts of a dead replica; the sweep takes them in id order (and, before, in
	// execution id order): the writer holds the second.
	var first, second string
	pairs := 0
	for first == "" || first > second {
		first = b.start(t, g, map[string]any{"k": fmt.Sprint("A", pairs)})
		second = b.start(t, g, map[string]any{"k": fmt.Sprint("B", pairs)})
		require.Len(t, b.claimed(t, "dead"), 2)
		pairs++
	}

	writer, err := b.db.BeginTx(ctx, nil)
	require.NoError(t, err)
	defer func() { _ = writer.Rollback() }()
	_, err = writer.NewRaw(b.store.q("SELECT 1 FROM {s}.executions WHERE id = ? FOR UPDATE"), second).Exec(ctx)
	require.NoError(t, err)
	swept := make(chan error, 1)
	var res SweepResult
	go func() {
		var err error
		res, err = b.store.Sweep(ctx, SweepOptions{Holder: "r1", Limit: 1000}) // every pair in one pass
		swept <- err
	}()
	waitFor(t, "the sweep to wait for the second execution", func() bool {
		var waiting int
		require.NoError(t, b.db.NewRaw(`SELECT count(*) FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND query LIKE '%' || ? || '%executions%'`, b.store.quoted).Scan(ctx, &waiting))
		return waiting > 0
	})
	pctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	_, err = writer.NewRaw("SELECT pg_advisory_xact_lock(hashtextextended(?, 0))", b.store.promoteKey).Exec(pctx)
	require.NoError(t, err, "the writer gets the promotion lock: no deadlock")
	require.NoError(t, writer.Commit())
	require.NoError(t, <-swept)
	require.Len(t, res.Abandoned, 2*pairs)
	require.Zero(t, res.Failed)
}

// (f) A heartbeat batch never waits for a locked row: the row is reported busy, not lost, and
// the rest of the batch is extended at once.
func TestHeartbeatSkipsLockedRows(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	b.ready(t, 2)
	one, two := b.claimOne(t, "r1"), b.claimOne(t, "r1")

	tx, err := b.db.BeginTx(ctx, nil)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback() }()
	_, err = tx.NewRaw(b.store.q("SELECT 1 FROM {s}.nodes WHERE lane = ? AND execution_id = ? AND node = ? FOR UPDATE"),
		one.Lane, one.ExecutionID, one.Node).Exec(ctx)
	require.NoError(t, err)

	hctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	b.clock.Advance(time.Second)
	beats, err := b.store.Heartbeat(hctx, "r1", []ClaimRef{one.Ref(), two.Ref()})
	require.NoError(t, err, "the batch does not wait for the locked row")
	require.Equal(t, BeatBusy, beats[one.ID], "a locked row is neither alive nor lost")
	require.Equal(t, BeatAlive, beats[two.ID])
	require.WithinDuration(t, b.clock.Now().Add(3*time.Second), *b.latest(t, two.ExecutionID, "y").HeartbeatDeadline, time.Millisecond)
}

// (f) Concurrent heartbeat batches over the same rows, each in its own order, never deadlock.
func TestHeartbeatBatchesNeverDeadlock(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	b.ready(t, 300)
	got, err := b.store.Claim(ctx, "r1", 300)
	require.NoError(t, err)
	refs := make([]ClaimRef, len(got))
	for i, c := range got {
		refs[i] = c.Ref()
	}
	var wg sync.WaitGroup
	errs := make(chan error, 4*20)
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			mine := append([]ClaimRef(nil), refs...)
			for i := range 20 {
				if (w+i)%2 == 1 {
					for l, r := 0, len(mine)-1; l < r; l, r = l+1, r-1 {
						mine[l], mine[r] = mine[r], mine[l]
					}
				}
				_, err := b.store.Heartbeat(ctx, "r1", mine)
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
}

// (f) A claim never waits for an execution that is being written: it takes other work, and the
// deadlines of what it takes start when it took it.
func TestClaimSkipsExecutionsBeingWritten(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	ids := b.ready(t, 2)
	tx, err := b.db.BeginTx(ctx, nil)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback() }()
	_, err = tx.NewRaw(b.store.q("SELECT 1 FROM {s}.executions WHERE id = ? FOR UPDATE"), ids[0]).Exec(ctx)
	require.NoError(t, err)

	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	got, err := b.store.Claim(cctx, "r1", 10)
	require.NoError(t, err, "the claim does not wait for the locked execution")
	require.Len(t, got, 1)
	require.Equal(t, ids[1], got[0].ExecutionID)
	require.NoError(t, tx.Rollback())
	got, err = b.store.Claim(ctx, "r1", 10)
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Equal(t, ids[0], got[0].ExecutionID, "once written, it is claimed")
}

// (a) Due ticks of graphs this replica does not serve, however many, never hide its own; and an
// execution whose advance fails stops neither the pass nor the others.
func TestWakeDueReachesItsOwnTicks(t *testing.T) {
	t.Parallel()
	mine, theirs := tickGraph("mine"), tickGraph("theirs")
	b := setup(t, mine)
	other := b.newStore(t, Config{Graphs: []*graph.Graph{theirs}})
	ctx := context.Background()
	due := func(s *Store, g *graph.Graph) string { return b.dueTick(t, s, g) }
	for range 5 {
		due(other, theirs) // no replica serving "theirs" is alive
	}
	b.clock.Advance(time.Second) // theirs come due first
	broken := due(b.store, mine)
	b.exec(t, `UPDATE {s}.nodes SET value = '{"not": "a list"}' WHERE execution_id = ? AND node = 'h'`, broken)
	ok := due(b.store, mine)
	b.clock.Advance(2 * time.Minute)

	woken, err := b.store.WakeDue(ctx, 3)
	require.NoError(t, err)
	require.Equal(t, 1, woken)
	require.Equal(t, StateAvailable, b.latest(t, ok, "after").State, "its own due tick advanced the execution")
	ns, err := b.store.NodeState(ctx, broken, "after")
	require.NoError(t, err)
	require.Nil(t, ns.Latest, "the broken execution did not advance")
	var wake time.Time
	require.NoError(t, b.db.NewRaw(b.store.q("SELECT wake_at FROM {s}.executions WHERE id = ?"), broken).Scan(ctx, &wake))
	require.True(t, wake.After(b.clock.Now()), "the broken execution is tried again later, not at the head of every pass")
}

// tickGraph is a graph whose tick t, once start is set, runs the node after.
func tickGraph(name string) *graph.Graph {
	return graph.MustNew(name, "v1", []graph.Node{
		graph.Input("start"),
		graph.TickOnce("t", graph.Needs("start"), func(ctx context.Context, in graph.Values) (time.Time, error) {
			return time.Time{}, nil
		}),
		graph.Historian("h", graph.Needs("start")),
		graph.Compute("after", graph.Needs("t"), func(ctx context.Context, in graph.Values) (any, error) { return 1, nil }),
	})
}

// dueTick starts an execution of g (a tickGraph) on s, and runs its tick, due in a minute.
func (b *bundle) dueTick(t *testing.T, s *Store, g *graph.Graph) string {
	t.Helper()
	ctx := context.Background()
	e, err := s.CreateExecution(ctx, g)
	require.NoError(t, err)
	_, err = s.SetValues(ctx, e.ID, map[string]json.RawMessage{"start": json.RawMessage(`1`)}, nil, nil)
	require.NoError(t, err)
	got, err := s.Claim(ctx, "r-"+g.Name(), 1)
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.NoError(t, s.Complete(ctx, got[0], TickValue(b.clock.Now().Add(time.Minute)), nil))
	return e.ID
}

// A due tick whose advance finds the database out of reach (here its session is terminated, as a
// restart does) is not postponed: the pass ends with the error, and the next one advances it. It
// was put off for a minute, as a broken execution is, and a soak that restarted PostgreSQL found
// it still waiting after its drain.
func TestWakeDuePostponesNothingWhileTheDatabaseIsOutOfReach(t *testing.T) {
	t.Parallel()
	g := tickGraph("cut")
	b := setup(t, g)
	ctx := context.Background()
	id := b.dueTick(t, b.store, g)
	b.clock.Advance(2 * time.Minute)
	b.exec(t, `CREATE FUNCTION {s}.cut() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN PERFORM pg_terminate_backend(pg_backend_pid()); RETURN NEW; END $$`)
	b.exec(t, `CREATE TRIGGER cut BEFORE INSERT OR UPDATE ON {s}.nodes FOR EACH ROW EXECUTE FUNCTION {s}.cut()`)

	woken, err := b.store.WakeDue(ctx, 10)
	require.Error(t, err)
	require.True(t, Unreachable(err), "%v", err)
	require.Zero(t, woken)
	var wake time.Time
	require.NoError(t, b.db.NewRaw(b.store.q("SELECT wake_at FROM {s}.executions WHERE id = ?"), id).Scan(ctx, &wake))
	require.False(t, wake.After(b.clock.Now()), "the tick is still due, not put off: %v", wake)

	b.exec(t, `DROP TRIGGER cut ON {s}.nodes`)
	woken, err = b.store.WakeDue(ctx, 10)
	require.NoError(t, err)
	require.Equal(t, 1, woken)
	require.Equal(t, StateAvailable, b.latest(t, id, "after").State)
}

// (l) A failed or abandoned attempt whose gate no longer holds is not retried, and does not fail
// the execution: it is CANCELED, and the node runs again when its gate next holds.
func TestNoRetryOnceTheGateStoppedHolding(t *testing.T) {
	t.Parallel()
	g := graph.MustNew("gated", "v1", []graph.Node{
		graph.Input("x"),
		graph.Compute("y", graph.When("x", func(v graph.Value) bool { return v.String() == "go" }),
			func(ctx context.Context, in graph.Values) (any, error) { return 1, nil },
			graph.MaxAttempts(1), graph.Backoff(func(int) time.Duration { return 0 })),
	})
	b := setup(t, g)
	ctx := context.Background()
	set := func(id, x string) {
		_, err := b.store.SetValues(ctx, id, map[string]json.RawMessage{"x": json.RawMessage(fmt.Sprintf("%q", x))}, nil, nil)
		require.NoError(t, err)
	}
	failed := b.start(t, g, map[string]any{"x": "go"})
	c := b.claimed(t, "r1")[failed]
	require.NotNil(t, c)
	abandoned := b.start(t, g, map[string]any{"x": "go"})
	require.Contains(t, b.claimed(t, "dead"), abandoned)
	set(failed, "stop")
	set(abandoned, "stop")

	require.NoError(t, b.store.Fail(ctx, c, errors.New("transient")))
	_, err := b.store.Sweep(ctx, SweepOptions{Holder: "r1", Limit: 10})
	require.NoError(t, err)
	for _, id := range []string{failed, abandoned} {
		comps, err := b.store.Computations(ctx, id)
		require.NoError(t, err)
		require.Len(t, comps, 1, "no retry")
		require.Equal(t, StateCanceled, comps[0].State)
		require.Contains(t, *comps[0].Error, "canceled: gate no longer holds")
		claims, err := b.store.Notifications(ctx, id)
		require.NoError(t, err)
		require.Empty(t, claims, "the execution did not fail")
	}
	set(failed, "go")
	require.Equal(t, StateAvailable, b.latest(t, failed, "y").State, "the gate holds again: it runs again")
}

// (g) A Backoff function that panics fails its node, in the sweep as in a write, and the pass goes
// on with the other attempts.
func TestPanickingBackoffFailsOnlyItsNode(t *testing.T) {
	t.Parallel()
	g := graph.MustNew("poison", "v1", []graph.Node{
		graph.Input("x"),
		graph.Compute("y", graph.Needs("x"), func(ctx context.Context, in graph.Values) (any, error) { return 1, nil },
			graph.Backoff(func(int) time.Duration { panic("backoff exploded") })),
	})
	b := setup(t, graph.MustNew("fine", "v1", testGraph("x").Nodes()), g)
	ctx := context.Background()
	var ids []string
	for range 3 {
		ids = append(ids, b.start(t, g, map[string]any{"x": 1}))
	}
	healthy := b.start(t, b.g, map[string]any{"x": 1})
	got := b.claimed(t, "dead")
	require.Len(t, got, 4)
	require.NoError(t, b.store.Fail(ctx, got[ids[0]], errors.New("transient")), "a write recovers it")

	res, err := b.store.Sweep(ctx, SweepOptions{Holder: "r1", Limit: 10})
	require.NoError(t, err)
	require.Len(t, res.Abandoned, 3, "the pass goes on past the panics")
	require.Zero(t, res.Failed)
	for _, id := range ids {
		c := b.latest(t, id, "y")
		require.Equal(t, StateFailed, c.State, "no retry: the node failed for good")
		require.Contains(t, *c.Error, `the Backoff of node "y" panicked: backoff exploded`)
		claims, err := b.store.Notifications(ctx, id)
		require.NoError(t, err)
		require.Len(t, claims, 1, "the failure is announced")
	}
	require.Equal(t, 2, b.latest(t, healthy, "y").Attempt, "the other graph's attempt is retried as usual")
}

// waitFor polls cond until it holds, for state that nothing announces.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	if !pgtest.Poll(30*time.Second, 10*time.Millisecond, cond) {
		t.Fatalf("timed out waiting for %s", what)
	}
}

// Writes that ask for a promotion after their commit while a pass runs share the next pass: eight
// that ask behind one pass make one more, not eight.
func TestPromotionsAfterCommitsShareAPass(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b := setup(t, testGraph("after"))
	s, log, _ := b.tracedStore(t)
	p := s.afterCommits
	p.token <- struct{}{} // a pass is under way
	const writes = 8
	var wg sync.WaitGroup
	for range writes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.promoteAfterCommit(ctx)
		}()
	}
	require.Eventually(t, func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.asked == writes
	}, 20*time.Second, time.Millisecond)
	<-p.token // the pass under way ends; it began before they asked
	wg.Wait()
	passes := 0
	for _, st := range log.sent {
		if strings.Contains(st.sql, "c.concurrency_key IS NULL AND c.max_parallel IS NULL") {
			passes++
		}
	}
	require.Equal(t, 1, passes, "one pass for the eight")
	require.Equal(t, uint64(writes), p.covered)
}
