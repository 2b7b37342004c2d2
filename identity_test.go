package journey_test

import (
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/journey-go/journey"
	"github.com/journey-go/journey/graph"
	"github.com/journey-go/journey/internal/pgtest"
	"github.com/journey-go/journey/persistence"
)

// identityConfig is a replica "shared" whose heartbeat moves every 100ms, and is stale only after
// a minute: whatever tells a live holder from a dead one, it is not staleness.
func identityConfig(t *testing.T, pollOnly bool) (journey.Config, *graph.Graph) {
	t.Helper()
	g := localGraph("identity")
	cfg := testConfig(t, g)
	cfg.ReplicaID, cfg.PollOnly = "shared", pollOnly
	cfg.ReplicaHeartbeatInterval, cfg.ReplicaStaleAfter = 100*time.Millisecond, time.Minute
	return cfg, g
}

// replicaRow reads who holds a replica's row, and since when.
func replicaRow(t *testing.T, schema, id string) (incarnation, holder string, startedAt time.Time) {
	t.Helper()
	err := pgtest.DB(t).QueryRowContext(testCtx(t), `SELECT h.incarnation::text, h.holder, r.started_at FROM `+
		pgx.Identifier{schema, "replica_heartbeats"}.Sanitize()+` r JOIN `+pgx.Identifier{schema, "replica_holders"}.Sanitize()+
		` h ON h.replica_id = r.replica_id WHERE r.replica_id = $1`, id).Scan(&incarnation, &holder, &startedAt)
	require.NoError(t, err)
	return incarnation, holder, startedAt
}

// A second process with a ReplicaID that a live process holds is refused, with an error that
// names the holder and until when its heartbeat keeps the id, and changes nothing: the holder
// keeps its row and runs on. Unless PollOnly, the holder keeps the id's lock; under PollOnly, its
// moving heartbeat tells that it lives.
func TestSecondProcessWithAReplicaIDIsRefused(t *testing.T) {
	t.Parallel()
	for _, pollOnly := range []bool{false, true} {
		t.Run(map[bool]string{false: "listening", true: "poll only"}[pollOnly], func(t *testing.T) {
			t.Parallel()
			cfg, g := identityConfig(t, pollOnly)
			a := newRuntime(t, cfg)
			ctx := testCtx(t)
			incarnation, holder, started := replicaRow(t, cfg.Schema, "shared")
			require.Regexp(t, `^host .+ pid \d+$`, holder)

			b, err := journey.New(ctx, cfg)
			if err == nil {
				require.NoError(t, b.Stop(ctx))
			}
			require.ErrorIs(t, err, journey.ErrReplicaIDInUse)
			require.ErrorContains(t, err, `ReplicaID "shared" is held by `+holder+`, alive, whose heartbeat keeps it until at least`)
			require.ErrorContains(t, err, "give each process a ReplicaID of its own")

			again, _, startedAgain := replicaRow(t, cfg.Schema, "shared")
			require.Equal(t, incarnation, again, "the refused process took nothing")
			require.True(t, started.Equal(startedAgain))
			ex, err := a.Start(ctx, g, journey.WithValues(map[string]any{"x": 1}))
			require.NoError(t, err)
			v, err := a.Get(ctx, ex.ID, "y", journey.WaitAny())
			require.NoError(t, err)
			require.Equal(t, int64(2), v.Int())
		})
	}
}

// A replica that finds its row taken by another process halts: it claims nothing more, writes
// no more heartbeats, and every call returns ErrReplicaIDInUse; its stop leaves the row, and the
// other process's claims, alone.
func TestReplicaThatFindsItsRowTakenHalts(t *testing.T) {
	t.Parallel()
	cfg, g := identityConfig(t, false)
	a, err := journey.New(testCtx(t), cfg)
	require.NoError(t, err)
	ctx := testCtx(t)
	db := pgtest.DB(t)
	table := pgx.Identifier{cfg.Schema, "replica_heartbeats"}.Sanitize()
	const thief = "00000000-0000-4000-8000-00000000beef"
	_, err = db.ExecContext(ctx, `UPDATE `+pgx.Identifier{cfg.Schema, "replica_holders"}.Sanitize()+
		` SET incarnation = $1, holder = 'another process' WHERE replica_id = 'shared'`, thief)
	require.NoError(t, err)
	awaitHalt(t, a, g, journey.ErrReplicaIDInUse, "another process has taken the row of replica shared")
	var beat time.Time
	require.NoError(t, db.QueryRowContext(ctx, `SELECT last_heartbeat FROM `+table+` WHERE replica_id = 'shared'`).Scan(&beat))
	require.NoError(t, a.Stop(ctx))
	incarnation, holder, _ := replicaRow(t, cfg.Schema, "shared")
	require.Equal(t, thief, incarnation, "the stop left the row to its holder")
	require.Equal(t, "another process", holder)
	var after time.Time
	require.NoError(t, db.QueryRowContext(ctx, `SELECT last_heartbeat FROM `+table+` WHERE replica_id = 'shared'`).Scan(&after))
	require.True(t, beat.Equal(after), "no heartbeat since the halt")
}

// A replica of this release refuses a schema migrated for a newer release that it cannot run
// beside, and writes nothing; one that finds the schema moved past it while it runs halts, and
// every call says to stop it and deploy the new release.
func TestReplicaOfARetiredReleaseRefusesAndHalts(t *testing.T) {
	t.Parallel()
	cfg, g := identityConfig(t, false)
	a, err := journey.New(testCtx(t), cfg)
	require.NoError(t, err)
	ctx := testCtx(t)
	db := pgtest.DB(t)
	release := pgx.Identifier{cfg.Schema, "schema_release"}.Sanitize()
	_, err = db.ExecContext(ctx, `UPDATE `+release+` SET oldest = $1, why = 'the row shape changed'`, persistence.Release+1)
	require.NoError(t, err)

	awaitHalt(t, a, g, journey.ErrReleaseRetired, "stop it, and deploy the new release")
	require.NoError(t, a.Stop(ctx))

	other := cfg
	other.ReplicaID = "newcomer"
	_, err = journey.New(ctx, other)
	require.ErrorIs(t, err, journey.ErrReleaseRetired)
	require.ErrorContains(t, err, "(the row shape changed)")
	require.ErrorContains(t, err, "stop it, and deploy the new release")
	var n int
	require.NoError(t, db.QueryRowContext(ctx, `SELECT count(*) FROM `+pgx.Identifier{cfg.Schema, "replica_heartbeats"}.Sanitize()+
		` WHERE replica_id = 'newcomer'`).Scan(&n))
	require.Zero(t, n, "the refused replica wrote nothing")
}

// awaitHalt waits until the replica rt halts, and its calls return an error that wraps sentinel
// and says says.
func awaitHalt(t *testing.T, rt *journey.Runtime, g *graph.Graph, sentinel error, says string) {
	t.Helper()
	waitFor(t, "the replica to halt", func() bool {
		_, err := rt.Start(testCtx(t), g)
		return errors.Is(err, sentinel)
	})
	_, err := rt.Start(testCtx(t), g)
	require.ErrorContains(t, err, says)
}
