package persistence

import (
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/journey-go/journey/graph"
	"github.com/journey-go/journey/internal/clock"
	"github.com/journey-go/journey/internal/pgtest"
	"github.com/journey-go/journey/migrations"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

type bundle struct {
	db     *bun.DB
	schema string
	store  *Store
	clock  *clock.Stub
	g      *graph.Graph
}

func testGraph(name string) *graph.Graph {
	return graph.MustNew(name, "v1", []graph.Node{
		graph.Input("x"),
		graph.Compute("y", graph.Needs("x"), func(ctx context.Context, in graph.Values) (any, error) { return 1, nil },
			graph.MaxAttempts(2), graph.AbandonAfter(10*time.Second), graph.Heartbeat(time.Second, 3*time.Second),
			graph.Backoff(func(int) time.Duration { return 0 })),
	})
}

// setup gives the test a store on a fresh schema, serving graphs (default: testGraph), with a
// stub clock.
func setup(t *testing.T, graphs ...*graph.Graph) *bundle {
	t.Helper()
	schema := pgtest.Schema(t)
	db := pgtest.BunDB(t, pgtest.URL(t))
	_, err := migrations.Migrate(context.Background(), db, schema, testLogger())
	require.NoError(t, err)
	if len(graphs) == 0 {
		graphs = []*graph.Graph{testGraph("store")}
	}
	b := &bundle{db: db, schema: schema, clock: clock.NewStub(time.Now()), g: graphs[0]}
	b.store = b.newStore(t, Config{Graphs: graphs})
	return b
}

// newStore returns another store on the bundle's schema and clock, as another replica would have.
func (b *bundle) newStore(t *testing.T, cfg Config) *Store {
	t.Helper()
	cfg.DB, cfg.Schema, cfg.Clock, cfg.Logger = b.db, b.schema, b.clock, testLogger()
	s, err := New(cfg)
	require.NoError(t, err)
	require.NoError(t, s.ReadLayout(t.Context()), "on Citus, the store pins its statements to lanes")
	return s
}

func testLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// ready creates n executions whose computation of y is AVAILABLE.
func (b *bundle) ready(t *testing.T, n int) []string {
	t.Helper()
	ids := make([]string, n)
	for i := range ids {
		e, err := b.store.CreateExecution(context.Background(), b.g)
		require.NoError(t, err)
		_, err = b.store.SetValues(context.Background(), e.ID, map[string]json.RawMessage{"x": json.RawMessage(`1`)}, nil, nil)
		require.NoError(t, err)
		ids[i] = e.ID
	}
	return ids
}

func (b *bundle) claimOne(t *testing.T, replica string) *Computation {
	t.Helper()
	got, err := b.store.Claim(context.Background(), replica, 1)
	require.NoError(t, err)
	require.Len(t, got, 1)
	return got[0]
}

func TestUngatedWorkIsAvailableAtOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.ready(t, 1)
	comps, err := b.store.Computations(context.Background(), ids[0])
	require.NoError(t, err)
	require.Len(t, comps, 1)
	require.Equal(t, StateAvailable, comps[0].State, "no sweep is needed before the first claim")
}

func TestConcurrentClaimsNeverOverlap(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const n = 60
	ids := b.ready(t, n)
	var mu sync.Mutex
	seen := map[int64]string{}
	var wg sync.WaitGroup
	for r := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				got, err := b.store.Claim(context.Background(), string(rune('a'+r)), 5)
				require.NoError(t, err)
				if len(got) == 0 {
					return
				}
				mu.Lock()
				for _, c := range got {
					_, dup := seen[c.ID]
					require.False(t, dup, "computation %d claimed twice", c.ID)
					seen[c.ID] = *c.ReplicaID
					require.NotNil(t, c.ClaimToken)
					require.NotNil(t, c.Deadline)
					require.NotNil(t, c.HeartbeatDeadline)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	require.Len(t, seen, n)
	for _, id := range ids {
		e, err := b.store.LoadExecution(context.Background(), id)
		require.NoError(t, err)
		require.Equal(t, int64(2), e.Revision, "one revision for the set, one for the claim")
	}
}

func TestFencedWrites(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	b.ready(t, 1)
	c := b.claimOne(t, "r1")

	forged := *c
	other := "00000000-0000-0000-0000-000000000000"
	forged.ClaimToken = &other
	require.ErrorIs(t, b.store.Complete(ctx, &forged, json.RawMessage(`1`), nil), ErrClaimLost, "a wrong token writes nothing")
	beats, err := b.store.Heartbeat(ctx, "r1", []ClaimRef{forged.Ref()})
	require.NoError(t, err)
	require.Equal(t, BeatLost, beats[c.ID])
	beats, err = b.store.Heartbeat(ctx, "r2", []ClaimRef{c.Ref()})
	require.NoError(t, err)
	require.Equal(t, BeatLost, beats[c.ID], "another replica's heartbeat matches nothing")
	beats, err = b.store.Heartbeat(ctx, "r1", []ClaimRef{c.Ref()})
	require.NoError(t, err)
	require.Equal(t, BeatAlive, beats[c.ID])

	n, err := b.store.Release(ctx, "r2", []ClaimRef{c.Ref()})
	require.NoError(t, err)
	require.Equal(t, 0, n, "another replica releases nothing")
	n, err = b.store.Release(ctx, "r1", []ClaimRef{forged.Ref()})
	require.NoError(t, err)
	require.Equal(t, 0, n, "a wrong token releases nothing")
	n, err = b.store.Release(ctx, "r1", []ClaimRef{c.Ref()})
	require.NoError(t, err)
	require.Equal(t, 1, n)
	again := b.claimOne(t, "r2")
	require.Equal(t, c.Node, again.Node)
	require.Equal(t, c.Attempt, again.Attempt, "a release consumes no attempt")
	require.Equal(t, c.RunAt, again.RunAt, "and keeps the attempt's place in the queue")
	comps, err := b.store.Computations(ctx, c.ExecutionID)
	require.NoError(t, err)
	require.Len(t, comps, 2)
	require.Equal(t, c.ID, comps[0].ID, "the released claim stays in the attempts' history, with its claim's time")
	require.Equal(t, StateCanceled, comps[0].State)
	require.Equal(t, "released: replica r1 stopped; the attempt waits again", *comps[0].Error)
	require.NotNil(t, comps[0].ClaimedAt)
	require.NotEqual(t, *c.ClaimToken, *again.ClaimToken, "each claim has a fresh token")

	require.ErrorIs(t, b.store.Complete(ctx, c, json.RawMessage(`1`), nil), ErrClaimLost, "the released claim cannot write")
	require.ErrorIs(t, b.store.Fail(ctx, c, context.Canceled), ErrClaimLost)
	require.NoError(t, b.store.Complete(ctx, again, json.RawMessage(`42`), nil))
	vals, err := b.store.Values(ctx, c.ExecutionID)
	require.NoError(t, err)
	require.Equal(t, int64(42), vals.Int("y"))
	require.ErrorIs(t, b.store.Complete(ctx, again, json.RawMessage(`43`), nil), ErrClaimLost, "a completion writes once")
	beats, err = b.store.Heartbeat(ctx, "r2", []ClaimRef{again.Ref()})
	require.NoError(t, err)
	require.Equal(t, BeatFinished, beats[again.ID], "a heartbeat that raced its own completion finds it finished, not lost")
	beats, err = b.store.Heartbeat(ctx, "r1", []ClaimRef{c.Ref()})
	require.NoError(t, err)
	require.Equal(t, BeatLost, beats[c.ID], "a released claim is lost, though its row succeeded under another claim")
}

func TestSweepIsSingleFlight(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	opts := func(holder string) SweepOptions {
		return SweepOptions{Holder: holder, LeaseTTL: time.Minute, Limit: 10}
	}
	res, err := b.store.Sweep(ctx, opts("a"))
	require.NoError(t, err)
	require.False(t, res.Skipped)

	res, err = b.store.Sweep(ctx, opts("b"))
	require.NoError(t, err)
	require.True(t, res.Skipped, "a pass runs on one replica at a time")
	res, err = b.store.Sweep(ctx, opts("a"))
	require.NoError(t, err)
	require.False(t, res.Skipped, "the holder renews its lease")

	b.clock.Advance(time.Minute)
	res, err = b.store.Sweep(ctx, opts("b"))
	require.NoError(t, err)
	require.False(t, res.Skipped, "a lease that ran out is taken over: a frozen holder stops nobody for long")
	require.NoError(t, b.store.ReleaseLease(ctx, b.store.SweepLease(), "b"))
	res, err = b.store.Sweep(ctx, opts("a"))
	require.NoError(t, err)
	require.False(t, res.Skipped, "a released lease is free at once")
}

func TestMonitoringViews(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	count := func(view string) int {
		var n int
		require.NoError(t, b.db.NewRaw("SELECT count(*) FROM ?."+view, bun.Ident(b.store.Schema())).Scan(ctx, &n))
		return n
	}
	b.ready(t, 2)
	beat(t, b.store, "r1", time.Minute, true)
	b.claimOne(t, "r1")
	c := b.claimOne(t, "r1")
	require.Equal(t, 2, count("running_computations"))
	require.Zero(t, count("stale_replicas"))
	require.Zero(t, count("reclaim_history"))

	// r1 falls silent: an hour-old heartbeat is stale by its own one-minute limit. The sweep runs
	// at the time of the claims, however long they took, so that only the replica is stale, not
	// the claims' deadlines.
	claimedAt := b.clock.Now()
	b.clock.Set(claimedAt.Add(-time.Hour))
	beat(t, b.store, "r1", time.Minute, false)
	require.Equal(t, 1, count("stale_replicas"))

	b.clock.Set(claimedAt)
	res, err := b.store.Sweep(ctx, SweepOptions{Limit: 10})
	require.NoError(t, err)
	require.Len(t, res.Abandoned, 2)
	require.Zero(t, count("running_computations"))
	require.Equal(t, 2, count("reclaim_history"))
	var reason string
	require.NoError(t, b.db.NewRaw("SELECT reason FROM ?.reclaim_history WHERE id = ?", bun.Ident(b.store.Schema()), c.ID).Scan(ctx, &reason))
	require.Equal(t, ReasonReplica("r1"), reason)
}

func TestParseChange(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in  string
		id  string
		rev int64
	}{
		{"EX1@12", "EX1", 12},
		{"EX1", "EX1", -1},
		{"EX1@x", "EX1", -1},
	} {
		id, rev := ParseChange(tc.in)
		require.Equal(t, tc.id, id, tc.in)
		require.Equal(t, tc.rev, rev, tc.in)
	}
}

// beat writes the heartbeat of replica, as its one process would: start takes its row over.
func beat(t *testing.T, s *Store, replica string, staleAfter time.Duration, start bool) {
	t.Helper()
	res, err := s.ReplicaHeartbeat(context.Background(), replica, testIdentity, staleAfter, start)
	require.NoError(t, err)
	require.False(t, res.Taken)
}

// testIdentity is the process of the tests' replicas.
var testIdentity = Identity{Incarnation: "00000000-0000-4000-8000-000000000001", Holder: "the test", Locked: true}

// recordGraphs records the graph versions that s serves, as a replica's New does, and then
// deletes that replica's heartbeat: no live replica serves them.
func recordGraphs(t *testing.T, s *Store) {
	t.Helper()
	require.NoError(t, s.RecordGraphs(context.Background(), "recorder", testIdentity, time.Minute))
	require.NoError(t, s.DeleteReplica(context.Background(), "recorder", testIdentity.Incarnation))
}
