// Package actors holds the protoactor-go actors of one replica:
//
//   - the Dispatcher claims AVAILABLE computations, up to MaxWorkers, and spawns a Computation
//     actor for each; LISTEN/NOTIFY wakes it, and a slow poll covers missed notifications;
//   - a Computation runs the user's function in a goroutine, with a context it cancels when it
//     stops, and writes the result through the fenced Store methods;
//   - its Watchdog, a child spawned in Started, registers the claim with the replica's heartbeats
//     and cancels the computation when the claim is lost or can no longer be kept;
//   - the heartbeats extend the heartbeat deadlines of all the registered claims in one UPDATE per
//     tick, about one per heartbeat interval however many computations run;
//   - the replica heartbeat upserts the replica's row, and pauses claiming while it fails;
//   - the delivery actor sends the lifecycle notifications in the outbox;
//   - the Listener holds the dedicated LISTEN connection and fans notifications out.
//
// Every actor that owns others is spawned with a Stop supervisor strategy: a restart would run a
// computation twice. If a computation or its watchdog ends, the other one ends too.
//
// It may import graph, persistence and internal packages, never the root package. It writes no
// SQL: persistence holds all of it.
//
// It is one of the engine's parts, which the project's design card puts at the top level. Its API
// carries no compatibility promise before v1: build on the root package, journey, which wires the
// parts together.
package actors

import (
	"log/slog"
	"time"

	"github.com/asynkron/protoactor-go/actor"
)

// stopStrategy stops a failing child instead of restarting it.
var stopStrategy = actor.NewOneForOneStrategy(0, 0, func(any) actor.Directive { return actor.StopDirective })

// NewSystem returns an actor system whose own logging goes to logger at Warn and above.
func NewSystem(logger *slog.Logger) *actor.ActorSystem {
	return actor.NewActorSystem(
		actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger {
			return slog.New(levelFloor{logger.Handler(), slog.LevelWarn}).With("service", "protoactor")
		}),
		// The dead-letter throttle holds a goroutine for one interval after each dead letter: keep it
		// short, so that a stopped system leaves nothing behind for long.
		actor.WithDeadLetterThrottleInterval(100*time.Millisecond),
	)
}
