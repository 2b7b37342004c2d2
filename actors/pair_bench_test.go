package actors

import (
	"log/slog"
	"sync"
	"testing"

	"github.com/asynkron/protoactor-go/actor"
)

// BenchmarkActorPair measures what the design's actors cost a computation, with no database and
// no work: a parent spawns a computation actor, which spawns its watchdog as its child; the
// watchdog registers with a heartbeats actor; the computation runs its function (nothing) in a
// goroutine, sends the outcome to a completer, and stops, its watchdog unregistering; the parent
// hears it end. b.N computations, 2,000 at a time, as bench's drain runs them, their mailboxes on
// a replica's workers, in the mailbox of a computation's actors.
func BenchmarkActorPair(b *testing.B) {
	system := NewSystem(slog.New(slog.DiscardHandler))
	w := newWorkers(computationWorkers)
	defer w.close()
	sink := func() actor.Actor { return actor.ReceiveFunc(func(actor.Context) {}) }
	beats := system.Root.Spawn(actor.PropsFromProducer(sink))
	completer := system.Root.Spawn(actor.PropsFromProducer(sink))
	type outcome struct{ n int }
	type done struct{}
	var wg sync.WaitGroup
	dogProps := actor.PropsFromFunc(func(ctx actor.Context) {
		switch ctx.Message().(type) {
		case *actor.Started:
			ctx.Send(beats, registerClaim{})
		case *actor.Stopping:
			ctx.Send(beats, unregisterClaim{})
		}
	}, actor.WithDispatcher(w), actor.WithMailbox(newMailbox))
	compProps := actor.PropsFromFunc(func(ctx actor.Context) {
		switch ctx.Message().(type) {
		case *actor.Started:
			ctx.Spawn(dogProps)
			system, self := ctx.ActorSystem(), ctx.Self()
			go func() { system.Root.Send(self, done{}) }()
		case done:
			ctx.Send(completer, outcome{1})
			ctx.Stop(ctx.Self())
		}
	}, actor.WithSupervisor(stopStrategy), actor.WithDispatcher(w), actor.WithMailbox(newMailbox))
	parent := system.Root.Spawn(actor.PropsFromFunc(func(ctx actor.Context) {
		switch ctx.Message().(type) {
		case int:
			ctx.Spawn(compProps)
		case *actor.Terminated:
			wg.Done()
		}
	}))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i += 2000 {
		n := min(2000, b.N-i)
		wg.Add(n)
		for range n {
			system.Root.Send(parent, 1)
		}
		wg.Wait()
	}
	b.StopTimer()
	_ = system.Root.PoisonFuture(parent).Wait()
	system.Shutdown()
}
