package journey

import (
	"context"
	"log/slog"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/journey-go/journey/graph"
	"github.com/journey-go/journey/internal/pgtest"
	"github.com/journey-go/journey/persistence"
)

// A Stop that begins while a Set is committing the work it claimed for its replica waits for that
// work as for any claimed attempt: the dispatcher spawns it once the Set has committed, and, the
// stop having cancelled its context, releases it to AVAILABLE without using an attempt; or, on a
// busy machine, the attempt was claimed and ran to its end before the stop cancelled it. Stop
// returns only then; it never leaves the attempt RUNNING under a replica that is gone.
func TestStopWaitsForTheWorkASetClaimedForItsReplica(t *testing.T) {
	t.Parallel()
	g := graph.MustNew("stop-local", "v1", []graph.Node{
		graph.Input("x"),
		graph.Compute("y", graph.Needs("x"), func(ctx context.Context, in graph.Values) (any, error) {
			return in.Int("x") + 1, nil
		}),
	})
	var target atomic.Pointer[string]
	var rt *Runtime
	inHook := make(chan struct{})
	// Once the server has committed the Set, which holds its reservation, the hook waits until
	// the Stop has closed the replica to new reservations, before the Set hands its attempt over.
	committed := func(handed []string) error {
		if id := target.Load(); id == nil || !slices.Contains(handed, *id) {
			return nil
		}
		close(inHook)
		<-rt.local.Closed()
		return nil
	}
	var err error
	schema := pgtest.Schema(t)
	rt, err = New(context.Background(), Config{
		DatabaseURL: pgtest.URL(t), Schema: schema, Graphs: []*graph.Graph{g},
		PollInterval: 30 * time.Second, SweepInterval: time.Minute, Logger: slog.New(slog.DiscardHandler),
		Test: TestConfig{StoreHooks: persistence.Hooks{Committed: committed}},
	})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ex, err := rt.Start(ctx, g)
	require.NoError(t, err)
	target.Store(&ex.ID)
	set := make(chan error, 1)
	go func() {
		_, err := rt.Set(ctx, ex.ID, "x", 1)
		set <- err
	}()
	<-inHook
	// A stop whose context is already over does not wait to drain.
	over, cancelOver := context.WithCancel(context.Background())
	cancelOver()
	require.NoError(t, rt.Stop(over))
	require.NoError(t, <-set)
	require.False(t, rt.orphaned.Load(), "Stop saw the attempt return")

	var states []string
	rows, err := pgtest.DB(t).QueryContext(ctx, "SELECT state FROM "+pgx.Identifier{schema, "computations"}.Sanitize()+
		" WHERE execution_id = $1 AND coalesce(error, '') NOT LIKE 'released: replica %'", ex.ID)
	require.NoError(t, err)
	defer rows.Close()
	for rows.Next() {
		var s string
		require.NoError(t, rows.Scan(&s))
		states = append(states, s)
	}
	require.NoError(t, rows.Err())
	require.Len(t, states, 1, "one attempt: a release uses none")
	require.Contains(t, []string{persistence.StateAvailable, persistence.StateSuccess}, states[0],
		"released for another replica to run, or finished before the stop; never left RUNNING")
}
