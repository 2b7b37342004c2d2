package actors

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/journey-go/journey/graph"
	"github.com/journey-go/journey/internal/pgtest"
	"github.com/journey-go/journey/internal/telemetry"
	"github.com/journey-go/journey/migrations"
	"github.com/journey-go/journey/persistence"
)

// One outcome that PostgreSQL refuses (a number beyond jsonb's range, which no check before SQL
// catches) fails the batch's transaction: the others are then recorded, each alone, and that one
// is recorded as its attempt's failure, with the reason, at once.
func TestCompleterIsolatesAnOutcomeTheDatabaseRefuses(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	g := graph.MustNew("batch", "v1", []graph.Node{
		graph.Input("x"),
		graph.Compute("y", graph.Needs("x"), func(ctx context.Context, in graph.Values) (any, error) { return nil, nil }),
	})
	c, _, claimed := completerSetup(ctx, t, g, 3, 0)
	results := []string{`1`, `1e1000000`, `3`}
	replies := make([]chan error, len(claimed))
	for i, cl := range claimed {
		replies[i] = hand(c, persistence.Outcome{C: cl, Result: json.RawMessage(results[i])})
	}
	start := time.Now()
	c.flush()
	require.Less(t, time.Since(start), 10*time.Second, "the refused outcome is not retried until the write timeout")
	for i, reply := range replies {
		err := <-reply
		if i == 1 {
			var failed *persistence.RecordedAsFailure
			require.ErrorAs(t, err, &failed, "the refused outcome is recorded as its attempt's failure")
			continue
		}
		require.NoError(t, err, "outcome %d is recorded", i)
	}
	for i, cl := range claimed {
		ns, err := c.store.NodeState(ctx, cl.ExecutionID, "y")
		require.NoError(t, err)
		if i == 1 {
			require.True(t, ns.Failed(), "the refused outcome fails its attempt")
			require.Equal(t, "the outcome could not be stored: PostgreSQL refused it: value overflows numeric format (SQLSTATE 22003)",
				*ns.Latest.Error)
			continue
		}
		require.Equal(t, persistence.StateSuccess, ns.Latest.State, "outcome %d", i)
		require.JSONEq(t, results[i], string(ns.Value.Raw), "outcome %d", i)
	}
}

// An execution whose row another transaction holds fails the batch after the lock timeout; of its
// outcomes recorded alone, the first waits for the lock again, and the others get its error at
// once, so that the held execution costs two lock timeouts, not one for each of its outcomes.
func TestCompleterWaitsOnceForAHeldExecution(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	nodes := []graph.Node{graph.Input("x")}
	for i := range 10 {
		nodes = append(nodes, graph.Compute(fmt.Sprintf("y%d", i), graph.Needs("x"),
			func(ctx context.Context, in graph.Values) (any, error) { return nil, nil }))
	}
	g := graph.MustNew("wide", "v1", nodes)
	c, ids, claimed := completerSetup(ctx, t, g, 2, 300*time.Millisecond)
	if c.store.Distributed() {
		t.Skip("on Citus the lock timeout reaches the workers through the runtime's session settings, which this " +
			"store's connections lack: TestCompleterGivesUpOnAHeldExecutionAndRecordsOnceItIsFree checks it there")
	}

	holder, err := pgx.Connect(ctx, pgtest.URL(t))
	require.NoError(t, err)
	defer func() { _ = holder.Close(context.Background()) }()
	tx, err := holder.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.Background()) }()
	_, err = tx.Exec(ctx, "SELECT 1 FROM "+pgx.Identifier{c.store.Schema(), "executions"}.Sanitize()+" WHERE lane = $1 AND id = $2 FOR UPDATE",
		persistence.LaneOf(ids[0]), ids[0])
	require.NoError(t, err)

	replies := make([]chan error, len(claimed))
	for i, cl := range claimed {
		replies[i] = hand(c, persistence.Outcome{C: cl, Result: json.RawMessage(`1`)})
	}
	start := time.Now()
	c.flush()
	took := time.Since(start)
	for i, reply := range replies {
		err := <-reply
		if claimed[i].ExecutionID == ids[0] {
			require.ErrorIs(t, err, persistence.ErrLockTimeout, "the held execution's outcomes are retried later")
		} else {
			require.NoError(t, err, "the other execution's outcomes are recorded")
		}
	}
	require.Less(t, took, 2*time.Second, "ten outcomes of the held execution, and it waited for the lock %v", took)
}

// completerSetup returns a completer of a store of its own schema serving g, with n executions
// whose input x is set, and every attempt that this makes ready claimed.
func completerSetup(ctx context.Context, t *testing.T, g *graph.Graph, n int, lockTimeout time.Duration) (*completer, []string, []*persistence.Computation) {
	t.Helper()
	logger := slog.New(slog.DiscardHandler)
	schema := pgtest.Schema(t)
	db := pgtest.BunDB(t, pgtest.URL(t))
	_, err := migrations.Migrate(ctx, db, schema, logger)
	require.NoError(t, err)
	store := newStore(t, persistence.Config{DB: db, Schema: schema, Graphs: []*graph.Graph{g}, Logger: logger,
		LockTimeout: lockTimeout})
	var ids []string
	for range n {
		e, err := store.CreateExecution(ctx, g)
		require.NoError(t, err)
		_, err = store.SetValues(ctx, e.ID, map[string]json.RawMessage{"x": json.RawMessage(`1`)}, nil, nil)
		require.NoError(t, err)
		ids = append(ids, e.ID)
	}
	claimed, err := store.Claim(ctx, "r1", 1000)
	require.NoError(t, err)
	require.Len(t, claimed, n*(len(g.Nodes())-1))
	return &completer{store: store, tel: telemetry.Disabled(), logger: logger, flight: new(inflight)}, ids, claimed
}

// hand puts out in c's batch, as a computation hands it over, and returns the channel of its
// answer.
func hand(c *completer, out persistence.Outcome) chan error {
	reply := make(chan error, 1)
	o := &outcome{out: out, done: func(err error) { reply <- err }}
	c.flight.add(o)
	c.batch = append(c.batch, o)
	return reply
}

// An outcome handed to a completer that stops before it takes it (protoactor drops what a stopped
// actor's mailbox holds) is recorded all the same, alone; one handed after the stop is recorded
// alone at once.
func TestCompleterStopRecordsWhatItLeftBehind(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	g := graph.MustNew("left", "v1", []graph.Node{
		graph.Input("x"),
		graph.Compute("y", graph.Needs("x"), func(ctx context.Context, in graph.Values) (any, error) { return nil, nil }),
	})
	c, _, claimed := completerSetup(ctx, t, g, 2, 0)
	system := NewSystem(slog.New(slog.DiscardHandler))
	t.Cleanup(system.Shutdown)
	pid := system.Root.Spawn(completerProps(c.store, c.tel, c.logger, c.flight))
	env := &computationEnv{store: c.store, flight: c.flight, system: system, completer: pid}
	replies := make([]chan error, len(claimed))
	outs := make([]*outcome, len(claimed))
	for i, cl := range claimed {
		replies[i] = make(chan error, 1)
		outs[i] = &outcome{out: persistence.Outcome{C: cl, Result: json.RawMessage(`7`)}, ctx: ctx,
			done: func(err error) { replies[i] <- err }}
	}
	require.True(t, c.flight.add(outs[0])) // handed, but never sent: as if dropped from the mailbox
	require.NoError(t, system.Root.PoisonFuture(pid).Wait())
	require.False(t, c.flight.add(&outcome{}), "a stopped completer takes nothing")
	env.hand(outs[1])
	for i, reply := range replies {
		select {
		case err := <-reply:
			require.NoError(t, err, "outcome %d", i)
		case <-ctx.Done():
			t.Fatalf("outcome %d was never answered", i)
		}
		ns, err := c.store.NodeState(ctx, claimed[i].ExecutionID, "y")
		require.NoError(t, err)
		require.Equal(t, persistence.StateSuccess, ns.Latest.State, "outcome %d", i)
		require.JSONEq(t, `7`, string(ns.Value.Raw), "outcome %d", i)
	}
}
