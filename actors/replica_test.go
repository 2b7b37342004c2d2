package actors

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/journey-go/journey/graph"
	"github.com/journey-go/journey/internal/pgtest"
	"github.com/journey-go/journey/migrations"
	"github.com/journey-go/journey/persistence"
)

// logged is a slog handler that passes each record's message to a channel, so that a test can
// wait for a log line.
type logged chan string

func (l logged) Enabled(context.Context, slog.Level) bool { return true }

func (l logged) Handle(_ context.Context, r slog.Record) error {
	select {
	case l <- r.Message:
	default: // nobody is waiting for more
	}
	return nil
}

func (l logged) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l logged) WithGroup(string) slog.Handler      { return l }

func TestFailingReplicaHeartbeatPausesClaiming(t *testing.T) {
	t.Parallel()
	logger := slog.New(slog.DiscardHandler)
	schema := pgtest.Schema(t)
	db := pgtest.BunDB(t, pgtest.URL(t))
	g := graph.MustNew("paused", "v1", []graph.Node{graph.Input("x")})
	// The table of the heartbeats is gone: every heartbeat fails, as if the database were
	// unreachable, until it is back. (A schema left unmigrated until then would not do: a
	// heartbeat written between two migrations would make the row shape's refuse to run.)
	_, err := migrations.Migrate(context.Background(), db, schema, logger)
	require.NoError(t, err)
	heartbeats := pgx.Identifier{schema, "replica_heartbeats"}.Sanitize()
	_, err = db.ExecContext(context.Background(), "ALTER TABLE "+heartbeats+" RENAME TO gone")
	require.NoError(t, err)
	store := newStore(t, persistence.Config{DB: db, Schema: schema, Graphs: []*graph.Graph{g}, Logger: logger})

	system := NewSystem(logger)
	got := make(chan any, 10)
	dispatcher := system.Root.Spawn(actor.PropsFromFunc(func(ctx actor.Context) {
		switch msg := ctx.Message().(type) {
		case Pause, Resume:
			got <- msg
		}
	}))
	lines := make(logged, 100)
	replica := system.Root.Spawn(NewReplicaHeartbeat(ReplicaConfig{
		// The interval is also each heartbeat's timeout: a busy machine needs some of it.
		Store: store, ReplicaID: "r1", Interval: 100 * time.Millisecond, StaleAfter: time.Second,
		Dispatcher: dispatcher, Logger: slog.New(lines),
		Identity: persistence.Identity{Incarnation: persistence.NewUUID(), Holder: "the test"},
	}))
	t.Cleanup(func() {
		_ = system.Root.PoisonFuture(replica).Wait()
		_ = system.Root.PoisonFuture(dispatcher).Wait()
		system.Shutdown()
	})
	next := func() any {
		select {
		case msg := <-got:
			return msg
		case <-time.After(20 * time.Second):
			t.Fatal("the dispatcher was told nothing")
			return nil
		}
	}
	require.Equal(t, Pause{}, next(), "a failing heartbeat stops claiming")
	waitLogged := func(msg string) {
		timeout := time.After(20 * time.Second)
		for {
			select {
			case line := <-lines:
				if line == msg {
					return
				}
			case <-timeout:
				t.Fatalf("%q was never logged", msg)
			}
		}
	}
	waitLogged("replica heartbeat still failing") // the outage outlasts one heartbeat

	_, err = db.ExecContext(context.Background(), "ALTER TABLE "+pgx.Identifier{schema, "gone"}.Sanitize()+" RENAME TO replica_heartbeats")
	require.NoError(t, err)
	require.Equal(t, Resume{}, next(), "claiming resumes once the heartbeat succeeds, after one Pause per outage, not one per failed heartbeat")
	replicas, err := store.Replicas(context.Background())
	require.NoError(t, err)
	require.Len(t, replicas, 1)
}

// newStore returns a store of cfg that knows its schema's layout, as a runtime's does: on Citus,
// its statements name their lanes.
func newStore(t *testing.T, cfg persistence.Config) *persistence.Store {
	t.Helper()
	s, err := persistence.New(cfg)
	require.NoError(t, err)
	require.NoError(t, s.ReadLayout(t.Context()))
	return s
}
