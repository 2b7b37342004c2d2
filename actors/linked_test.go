package actors

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/journey-go/journey/graph"
	"github.com/journey-go/journey/internal/clock"
	"github.com/journey-go/journey/internal/pgtest"
	"github.com/journey-go/journey/internal/telemetry"
	"github.com/journey-go/journey/migrations"
	"github.com/journey-go/journey/persistence"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(pgtest.Runner{M: m})
}

// linked is one claimed computation running as an actor, with a probe watching it and its
// watchdog.
type linked struct {
	store      *persistence.Store
	clock      *clock.Stub
	system     *actor.ActorSystem
	self, dog  *actor.PID
	fnCtx      context.Context
	terminated chan *actor.PID
	running    *sync.WaitGroup
}

func setup(t *testing.T) *linked {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	logger := slog.New(slog.DiscardHandler)
	schema := pgtest.Schema(t)
	db := pgtest.BunDB(t, pgtest.URL(t))
	_, err := migrations.Migrate(ctx, db, schema, logger)
	require.NoError(t, err)

	started := make(chan context.Context, 1)
	g := graph.MustNew("linked", "v1", []graph.Node{
		graph.Compute("work", graph.Needs(), func(ctx context.Context, in graph.Values) (any, error) {
			started <- ctx
			<-ctx.Done()
			return nil, ctx.Err()
		}, graph.Heartbeat(20*time.Millisecond, 30*time.Second), graph.AbandonAfter(time.Minute)),
	})
	l := &linked{clock: clock.NewStub(time.Now()), terminated: make(chan *actor.PID, 2), running: new(sync.WaitGroup)}
	l.store = newStore(t, persistence.Config{DB: db, Schema: schema, Graphs: []*graph.Graph{g}, Clock: l.clock, Logger: logger})
	_, err = l.store.CreateExecution(ctx, g)
	require.NoError(t, err)
	claimed, err := l.store.Claim(ctx, "r1", 1)
	require.NoError(t, err)
	require.Len(t, claimed, 1)

	l.system = NewSystem(logger)
	pids := make(chan [2]*actor.PID, 1)
	beats := l.system.Root.Spawn(heartbeatsProps(l.store, "r1", logger, Hooks{}))
	base, stop := context.WithCancel(context.Background()) // so that a failed test does not hang in its cleanup
	flight, workers := new(inflight), newWorkers(2)
	t.Cleanup(workers.close)
	env := &computationEnv{workers: workers, store: l.store, replicaID: "r1", logger: logger, base: base, running: l.running, orphaned: new(atomic.Bool),
		heartbeats: beats, system: l.system, flight: flight, tel: telemetry.Disabled(),
		completer: l.system.Root.Spawn(completerProps(l.store, telemetry.Disabled(), logger, flight)),
		hooks:     Hooks{ComputationStarted: func(_ *persistence.Computation, self, dog *actor.PID) { pids <- [2]*actor.PID{self, dog} }}}
	_, n, _ := l.store.GraphOf(claimed[0])
	spawnComputation(l.system.Root, env, claimed[0], g, n)
	select {
	case p := <-pids:
		l.self, l.dog = p[0], p[1]
	case <-ctx.Done():
		t.Fatal("the computation actor never started")
	}
	select {
	case l.fnCtx = <-started:
	case <-ctx.Done():
		t.Fatal("the computation's function never started")
	}

	probe := l.system.Root.Spawn(actor.PropsFromFunc(func(ctx actor.Context) {
		switch msg := ctx.Message().(type) {
		case *actor.PID:
			ctx.Watch(msg)
		case *actor.Terminated:
			l.terminated <- msg.Who
		}
	}))
	l.system.Root.Send(probe, l.self)
	l.system.Root.Send(probe, l.dog)
	t.Cleanup(func() {
		_ = l.system.Root.PoisonFuture(probe).Wait()
		_ = l.system.Root.PoisonFuture(beats).Wait()
		stop()
		l.running.Wait()
		l.system.Shutdown()
	})
	return l
}

// waitTerminated waits until both actors have ended.
func (l *linked) waitTerminated(t *testing.T) {
	t.Helper()
	seen := map[string]bool{}
	timeout := time.After(20 * time.Second)
	for len(seen) < 2 {
		select {
		case pid := <-l.terminated:
			seen[pid.Id] = true
		case <-timeout:
			t.Fatalf("only %v of the computation and its watchdog ended", seen)
		}
	}
	require.True(t, seen[l.self.Id] && seen[l.dog.Id])
}

func (l *linked) requireCanceled(t *testing.T) {
	t.Helper()
	select {
	case <-l.fnCtx.Done():
	case <-time.After(20 * time.Second):
		t.Fatal("the function's context was not canceled")
	}
}

func TestStoppingTheComputationStopsTheWatchdog(t *testing.T) {
	t.Parallel()
	l := setup(t)
	require.NoError(t, l.system.Root.StopFuture(l.self).Wait())
	l.waitTerminated(t)
	l.requireCanceled(t)
}

func TestKillingTheWatchdogStopsTheComputation(t *testing.T) {
	t.Parallel()
	l := setup(t)
	l.system.Root.Stop(l.dog)
	l.waitTerminated(t)
	l.requireCanceled(t)
}

func TestLostClaimCancelsTheComputation(t *testing.T) {
	t.Parallel()
	l := setup(t)
	l.clock.Advance(2 * time.Minute) // past both deadlines: the sweep abandons the attempt
	// A pass leaves alone a row that is locked, by a heartbeat being written say: the next takes it.
	deadline := time.Now().Add(20 * time.Second)
	for abandoned := 0; abandoned == 0; {
		require.True(t, time.Now().Before(deadline), "no sweep abandoned the attempt")
		res, err := l.store.Sweep(context.Background(), persistence.SweepOptions{Limit: 10})
		require.NoError(t, err)
		abandoned = len(res.Abandoned)
	}
	// The watchdog's next heartbeat matches no row: it cancels the computation.
	l.waitTerminated(t)
	l.requireCanceled(t)
}
