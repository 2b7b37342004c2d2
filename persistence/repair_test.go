package persistence

import (
	"context"
	"encoding/json"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/journey-go/journey/graph"
	"github.com/journey-go/journey/internal/pgtest"
)

// A crash between a parent's commit and the walk to its children leaves them as they were: the
// repair carries the parent's cancel, pause and archive to them, and wakes a map node that waits
// though its children have all ended.
func TestSweepRepairsWhatACrashLeftAfterACommit(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	child := func(parent string) string {
		e, err := b.store.CreateExecution(ctx, b.g)
		require.NoError(t, err)
		raw, err := json.Marshal(Parent{ID: parent, Node: "y", Gen: 1, Index: 0})
		require.NoError(t, err)
		b.exec(t, `UPDATE {s}.executions SET parent = ?::jsonb WHERE lane = ? AND id = ?`, string(raw), e.Lane, e.ID)
		_, err = b.store.SetValues(ctx, e.ID, map[string]json.RawMessage{"x": json.RawMessage(`1`)}, nil, nil)
		require.NoError(t, err)
		return e.ID
	}
	canceled, paused, archived := b.ready(t, 3)[0], b.ready(t, 1)[0], b.ready(t, 1)[0]
	c1, c2, c3 := child(canceled), child(paused), child(archived)
	// The parents' changes committed, and the replica died before it walked to the children.
	b.exec(t, `UPDATE {s}.executions SET canceled_at = now(), cancel_reason = 'gone' WHERE id = ?`, canceled)
	b.exec(t, `UPDATE {s}.executions SET paused_at = now() WHERE id = ?`, paused)
	b.exec(t, `UPDATE {s}.executions SET archived_at = now() WHERE id = ?`, archived)
	// And a map node whose children have all ended, which its last child's write did not wake.
	waiting := b.ready(t, 1)[0]
	b.exec(t, `UPDATE {s}.nodes SET state = 'WAITING' WHERE execution_id = ? AND node = 'y'`, waiting)
	b.exec(t, `INSERT INTO {s}.map_progress (lane, execution_id, node, gen, sig, total, done) VALUES (?, ?, 'y', 1, '{}', 2, 2)`,
		LaneOf(waiting), waiting)

	repaired, err := b.store.Repair(ctx, 100)
	require.NoError(t, err)
	require.Equal(t, 5, repaired, "three parents' children, a map node, and the archived parent's waiting attempt")
	e, err := b.store.LoadExecution(ctx, c1)
	require.NoError(t, err)
	require.NotNil(t, e.CanceledAt, "the child of the canceled parent is canceled")
	require.Equal(t, "its parent "+canceled+" was canceled: gone", *e.CancelReason)
	e, err = b.store.LoadExecution(ctx, c2)
	require.NoError(t, err)
	require.NotNil(t, e.PausedAt, "the child of the paused parent is paused")
	e, err = b.store.LoadExecution(ctx, c3)
	require.NoError(t, err)
	require.NotNil(t, e.ArchivedAt, "the child of the archived parent is archived")
	ns, err := b.store.NodeState(ctx, waiting, "y")
	require.NoError(t, err)
	require.Equal(t, StateAvailable, ns.Latest.State, "the map node is woken, to collect its children")

	repaired, err = b.store.Repair(ctx, 100)
	require.NoError(t, err)
	require.Equal(t, 0, repaired, "nothing left to repair")
}

// A repair looks at a page of the archived executions at a time, from where the last one stopped:
// waiting work of an archived execution past the first page is canceled by a later repair.
func TestRepairPagesThroughTheArchivedExecutions(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	ids := b.ready(t, 2)
	waiting, template := ids[0], ids[1]
	b.exec(t, `UPDATE {s}.executions SET archived_at = now() WHERE id IN (?, ?)`, waiting, template)
	b.exec(t, `UPDATE {s}.nodes SET state = 'CANCELED' WHERE execution_id = ?`, template)
	// Archived executions with nothing waiting, whose ids sort before those the runtime makes: a
	// page and a half.
	b.exec(t, `INSERT INTO {s}.executions (lane, id, graph_name, graph_version, archived_at)
		SELECT e.lane, '00000000-0000-0000-0000-' || lpad(g::text, 12, '0'), e.graph_name, e.graph_version, e.archived_at
		FROM {s}.executions e, generate_series(1, ?) g WHERE e.id = ?`, archivedPage*3/2, template)

	var repairs int
	for repairs = 1; repairs <= 3; repairs++ {
		_, err := b.store.Repair(ctx, 100)
		require.NoError(t, err)
		if ns, err := b.store.NodeState(ctx, waiting, "y"); err == nil && ns.Latest != nil && ns.Latest.State == StateCanceled {
			break
		}
	}
	require.Equal(t, 2, repairs, "the waiting execution, on the second page, is canceled by the second repair")
}

// The store's transactions are READ COMMITTED whatever the database's default says: the read after
// a lock must see what the lock's last holder committed.
func TestTransactionsAreReadCommittedWhateverTheDefault(t *testing.T) {
	t.Parallel()
	b := setup(t)
	u, err := url.Parse(pgtest.URL(t))
	require.NoError(t, err)
	if u.RawQuery != "" {
		u.RawQuery += "&"
	}
	u.RawQuery += "options=-c%20default_transaction_isolation%3Dserializable"
	db := pgtest.BunDB(t, u.String())
	s, err := New(Config{DB: db, Schema: b.schema, Graphs: []*graph.Graph{b.g}, Clock: b.clock, Logger: testLogger()})
	require.NoError(t, err)
	ctx := context.Background()
	var def string
	require.NoError(t, db.NewRaw("SELECT current_setting('transaction_isolation')").Scan(ctx, &def))
	require.Equal(t, "serializable", def, "the database's default, outside the store")
	var level string
	require.NoError(t, s.inTx(ctx, func(ctx context.Context, tx bun.Tx) error {
		return tx.NewRaw("SELECT current_setting('transaction_isolation')").Scan(ctx, &level)
	}))
	require.Equal(t, "read committed", level)
	level = ""
	require.NoError(t, s.inTxn(ctx, db, func(ctx context.Context, t *txn) error {
		if err := t.begin(ctx); err != nil {
			return err
		}
		return t.NewRaw("SELECT current_setting('transaction_isolation')").Scan(ctx, &level)
	}))
	require.Equal(t, "read committed", level)
}

// A write gives its connection back before what follows its COMMIT takes one (the cascade to
// its children, a wake, a promotion): with a pool of one connection, a pause, a resume, an
// archive and a cancel each return. Held meanwhile, writes as many as the pool's connections
// waited for a second one, for good (the soak's producer did, at 300 executions/s).
func TestAWriteGivesItsConnectionBackBeforeWhatFollows(t *testing.T) {
	t.Parallel()
	b := setup(t)
	db := pgtest.BunDB(t, pgtest.URL(t))
	db.SetMaxOpenConns(1)
	s, err := New(Config{DB: db, Schema: b.schema, Graphs: []*graph.Graph{b.g}, Clock: b.clock, Logger: testLogger()})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, s.ReadLayout(ctx))
	e, err := s.CreateExecution(ctx, b.g)
	require.NoError(t, err)
	require.NoError(t, s.SetPaused(ctx, e.ID, true))
	require.NoError(t, s.SetPaused(ctx, e.ID, false))
	require.NoError(t, s.SetArchived(ctx, e.ID, true))
	require.NoError(t, s.SetArchived(ctx, e.ID, false))
	require.NoError(t, s.Cancel(ctx, e.ID, "test"))
}

// Stranded reads no attempt while every recorded graph version has a live replica, and counts
// the work of a recorded version once none serves it.
func TestStrandedReadsNoAttemptWhileEveryVersionIsServed(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	b.ready(t, 2)
	require.NoError(t, b.store.RecordGraphs(ctx, "r1", testIdentity, time.Minute))
	s, log, _ := b.tracedStore(t)
	stranded, err := s.Stranded(ctx)
	require.NoError(t, err)
	require.Empty(t, stranded)
	for _, st := range log.take() {
		require.NotContains(t, st.sql, ".nodes", "an attempt read while every version is served")
	}

	b.exec(t, `UPDATE {s}.replica_heartbeats SET last_heartbeat = now() - interval '1 hour'`)
	stranded, err = s.Stranded(ctx)
	require.NoError(t, err)
	require.Equal(t, []StrandedVersion{{Key: b.g.Name() + "@" + b.g.Version(), Executions: 2}}, stranded)
}
