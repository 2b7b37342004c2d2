package sweeper

import (
	"context"
	"encoding/json"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/journey-go/journey/graph"
	"github.com/journey-go/journey/internal/clock"
	"github.com/journey-go/journey/internal/persistence"
	"github.com/journey-go/journey/internal/pgtest"
	"github.com/journey-go/journey/migrations"
)

// A pass that leaves retention behind is followed by another at once, not an Interval later:
// with batches of 2, the eleven values replaced past their retention are all deleted after one
// timed pass, in an Interval of an hour.
func TestRetentionBehindSweepsAgainAtOnce(t *testing.T) {
	ctx := context.Background()
	logger := slog.New(slog.DiscardHandler)
	schema := pgtest.Schema(t)
	db := pgtest.BunDB(t, pgtest.URL(t))
	_, err := migrations.Migrate(ctx, db, schema, logger)
	require.NoError(t, err)
	g := graph.MustNew("retention", "v1", []graph.Node{graph.Input("x")})
	clk := clock.NewStub(time.Now())
	store, err := persistence.New(persistence.Config{DB: db, Schema: schema, Graphs: []*graph.Graph{g}, Clock: clk, Logger: logger})
	require.NoError(t, err)
	e, err := store.CreateExecution(ctx, g)
	require.NoError(t, err)
	for x := range 12 {
		_, err := store.SetValues(ctx, e.ID, map[string]json.RawMessage{"x": json.RawMessage(strconv.Itoa(x))}, nil, nil)
		require.NoError(t, err)
	}
	history := func() int {
		var n int
		require.NoError(t, db.NewRaw("SELECT count(*) FROM "+pgx.Identifier{schema, "value_history"}.Sanitize()).Scan(ctx, &n))
		return n
	}
	require.Equal(t, 11, history(), "the values replaced")
	clk.Advance(2 * time.Hour)

	s := New(Config{Store: store, ReplicaID: "r1", Interval: time.Hour, BatchSize: 2, Retention: time.Hour, Logger: logger})
	system := actor.NewActorSystem()
	pid := system.Root.Spawn(s.Props())
	t.Cleanup(func() { _ = system.Root.StopFuture(pid).Wait() })
	system.Root.Send(pid, tick{})
	require.Eventually(t, func() bool { return history() == 0 }, 30*time.Second, 10*time.Millisecond,
		"the passes after the first deleted the rest")
}
