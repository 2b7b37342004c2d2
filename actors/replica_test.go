package actors

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/stretchr/testify/require"

	"github.com/journey-go/journey/graph"
	"github.com/journey-go/journey/internal/pgtest"
	"github.com/journey-go/journey/migrations"
	"github.com/journey-go/journey/persistence"
)

func TestFailingReplicaHeartbeatPausesClaiming(t *testing.T) {
	t.Parallel()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	schema := pgtest.Schema(t)
	db := pgtest.BunDB(t, pgtest.URL(t))
	g := graph.MustNew("paused", "v1", []graph.Node{graph.Input("x")})
	// The schema has no tables yet: every heartbeat fails, as if the database were unreachable.
	store, err := persistence.New(persistence.Config{DB: db, Schema: schema, Graphs: []*graph.Graph{g}, Logger: logger})
	require.NoError(t, err)

	system := NewSystem(logger)
	got := make(chan any, 10)
	dispatcher := system.Root.Spawn(actor.PropsFromFunc(func(ctx actor.Context) {
		switch msg := ctx.Message().(type) {
		case Pause, Resume:
			got <- msg
		}
	}))
	replica := system.Root.Spawn(NewReplicaHeartbeat(ReplicaConfig{
		Store: store, ReplicaID: "r1", Interval: 20 * time.Millisecond, StaleAfter: time.Second,
		Dispatcher: dispatcher, Logger: logger,
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
		case <-time.After(10 * time.Second):
			t.Fatal("the dispatcher was told nothing")
			return nil
		}
	}
	require.Equal(t, Pause{}, next(), "a failing heartbeat stops claiming")

	_, err = migrations.Migrate(context.Background(), db, schema, logger)
	require.NoError(t, err)
	require.Equal(t, Resume{}, next(), "claiming resumes once the heartbeat succeeds")
	replicas, err := store.Replicas(context.Background())
	require.NoError(t, err)
	require.Len(t, replicas, 1)
	require.Empty(t, got, "Pause is sent once per outage, not at every failed heartbeat")
}
