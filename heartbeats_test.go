package journey_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/journey-go/journey/actors"
	"github.com/journey-go/journey/graph"
	"github.com/journey-go/journey/internal/pgtest"
	"github.com/journey-go/journey/persistence"
)

// beatLog records the heartbeat statements of a replica, with when they were sent.
type beatLog struct {
	mu    sync.Mutex
	at    []time.Time
	added chan struct{} // a signal after each statement
}

func (l *beatLog) hook([]persistence.ClaimRef) {
	l.mu.Lock()
	l.at = append(l.at, time.Now())
	l.mu.Unlock()
	select {
	case l.added <- struct{}{}:
	default:
	}
}

// since counts the statements sent after t.
func (l *beatLog) since(t time.Time) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, at := range l.at {
		if at.After(t) {
			n++
		}
	}
	return n
}

// deadlines reads the heartbeat deadline of every RUNNING computation of the schema.
func deadlines(t *testing.T, schema string) map[int64]time.Time {
	t.Helper()
	rows, err := pgtest.DB(t).QueryContext(testCtx(t), "SELECT id, heartbeat_deadline FROM "+
		pgx.Identifier{schema, "computations"}.Sanitize()+" WHERE state = 'RUNNING'")
	require.NoError(t, err)
	defer rows.Close()
	out := map[int64]time.Time{}
	for rows.Next() {
		var id int64
		var at time.Time
		require.NoError(t, rows.Scan(&id, &at))
		out[id] = at
	}
	require.NoError(t, rows.Err())
	return out
}

// A replica extends the heartbeats of all its running computations in about one statement per
// heartbeat interval, however many run: not one statement per computation, nor one per few.
func TestHeartbeatsOfManyComputationsTakeOneStatementPerInterval(t *testing.T) {
	t.Parallel()
	const (
		n        = 200
		interval = 100 * time.Millisecond
		rounds   = 5 // heartbeat statements to watch
	)
	release := make(chan struct{})
	g := graph.MustNew("many-running", "v1", []graph.Node{
		graph.Input("x"),
		graph.Compute("y", graph.Needs("x"), func(ctx context.Context, in graph.Values) (any, error) {
			select {
			case <-release:
				return in.Int("x"), nil
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}, graph.Heartbeat(interval, time.Minute)),
	})
	beats := &beatLog{added: make(chan struct{}, 1)}
	var started sync.WaitGroup
	started.Add(n)
	cfg := testConfig(t, g)
	cfg.MaxWorkers = n
	cfg.Test.Hooks = actors.Hooks{
		ComputationStarted: func(*persistence.Computation, *actor.PID, *actor.PID) { started.Done() },
		Heartbeating:       beats.hook,
	}
	rt := newRuntime(t, cfg)
	defer close(release) // before the runtime stops: a graceful stop waits for the functions
	ctx := testCtx(t)
	inputs := numbered(n)
	_, err := rt.StartMany(ctx, g, inputs)
	require.NoError(t, err)
	allStarted := make(chan struct{})
	go func() {
		started.Wait()
		close(allStarted)
	}()
	select {
	case <-allStarted:
	case <-ctx.Done():
		t.Fatal("the computations did not all start")
	}

	before := deadlines(t, cfg.Schema)
	require.Len(t, before, n)
	from := time.Now()
	for beats.since(from) < rounds {
		select {
		case <-beats.added:
		case <-ctx.Done():
			t.Fatalf("only %d heartbeat statements were sent", beats.since(from))
		}
	}
	waitFor(t, "every running computation's heartbeat deadline to move", func() bool {
		after := deadlines(t, cfg.Schema)
		for id, at := range before {
			if !after[id].After(at) {
				return false
			}
		}
		return len(after) == n
	})
	elapsed := time.Since(from)
	sent := beats.since(from)
	t.Logf("%d heartbeat statements for %d computations in %v, with a heartbeat interval of %v", sent, n, elapsed, interval)
	// At most one statement per interval, and one more for the edges of the window and one for a
	// retry: the timers fire late on a busy machine, never early.
	require.LessOrEqual(t, float64(sent), elapsed.Seconds()/interval.Seconds()+2,
		"%d heartbeat statements for %d computations in %v, with a heartbeat interval of %v", sent, n, elapsed, interval)
}
