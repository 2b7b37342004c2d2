package persistence

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"math"
	mrand "math/rand/v2"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/journey-go/journey/graph"
	"github.com/journey-go/journey/internal/pgtest"
	"github.com/journey-go/journey/migrations"
)

// upToDate reads the insights of q until the reading is up to date (Pending 0): a reading rolls
// for insightsBudget and leaves the rest to the next, so how far one gets depends on the
// machine's load.
func upToDate(t *testing.T, s *Store, q InsightsQuery) *Insights {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for {
		ins, err := s.Insights(ctx, q)
		require.NoError(t, err)
		if ins.Pending == 0 {
			return ins
		}
		require.NoError(t, ctx.Err(), "the insights stayed %d minutes behind", ins.Pending)
	}
}

// rollAll rolls until no marked minute is left, with the same patience as upToDate.
func rollAll(t *testing.T, s *Store) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for {
		left, err := s.RollInsights(ctx, "", time.Second)
		require.NoError(t, err)
		if left == 0 {
			return
		}
		require.NoError(t, ctx.Err(), "the roll left %d minutes", left)
	}
}

// A Set and an archiving neither create an execution nor end an attempt: they mark their minute,
// and the next roll brings its cells up to date, though it is long past the watermark.
func TestWritesMarkTheirMinuteForTheRoll(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	require.NoError(t, b.store.RecordGraphs(ctx, "replica-a", testIdentity, time.Minute))
	ids := make([]string, 3)
	for i := range ids {
		e, err := b.store.CreateExecution(ctx, b.g)
		require.NoError(t, err)
		ids[i] = e.ID
	}
	read := func() []int64 {
		ins := upToDate(t, b.store, InsightsQuery{Graph: "store", Since: 24 * time.Hour}.WithDefaults())
		return []int64{ins.Executions, ins.Nodes[0].Reached}
	}
	require.Equal(t, []int64{3, 0}, read())

	past := func() {
		b.clock.Advance(10 * time.Minute)
		rollAll(t, b.store)
	}
	past()
	_, err := b.store.SetValues(ctx, ids[0], map[string]json.RawMessage{"x": json.RawMessage(`1`)}, nil, nil)
	require.NoError(t, err)
	require.Equal(t, []int64{3, 1}, read())
	past()
	require.NoError(t, b.store.SetArchived(ctx, ids[1], true))
	require.Equal(t, []int64{2, 1}, read())
}

// In the background, the roll leaves the minute still filling and the one before, and a minute
// rolled again too soon for what its last roll cost; a reading rolls them all.
func TestBackgroundRollLeavesFillingAndCostlyMinutes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	require.NoError(t, b.store.RecordGraphs(ctx, "replica-a", testIdentity, time.Minute))
	e, err := b.store.CreateExecution(ctx, b.g)
	require.NoError(t, err)
	roll := func() int {
		left, err := b.store.RollInsights(ctx, "", RollInBackground)
		require.NoError(t, err)
		return left
	}
	cells := func() (n int) {
		require.NoError(t, b.db.NewRaw(b.store.q("SELECT count(*) FROM {s}.insight_cells")).Scan(ctx, &n))
		return n
	}
	require.Equal(t, 1, roll())
	require.Zero(t, cells())

	b.clock.Advance(3 * time.Minute)
	require.Zero(t, roll())
	require.Positive(t, cells())

	// The last roll of that minute "took" a minute: it waits ten.
	_, err = b.db.NewRaw(b.store.q("UPDATE {s}.insight_minutes SET cost_ms = 60000")).Exec(ctx)
	require.NoError(t, err)
	_, err = b.store.SetValues(ctx, e.ID, map[string]json.RawMessage{"x": json.RawMessage(`1`)}, nil, nil)
	require.NoError(t, err)
	require.Equal(t, 1, roll())
	ins := upToDate(t, b.store, InsightsQuery{Graph: "store"}.WithDefaults())
	require.EqualValues(t, 1, ins.Nodes[0].Reached)
	b.clock.Advance(10 * time.Minute)
	require.Zero(t, roll())
}

// In the background, a minute whose executions' attempts ended since the last roll is left to
// settle while it is younger than settleFor: the minutes of a burst are rolled once, after it.
// Past settleFor it is rolled however busy, and a reading rolls it at once.
func TestBackgroundRollLetsBusyMinutesSettle(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	require.NoError(t, b.store.RecordGraphs(ctx, "replica-a", testIdentity, time.Minute))
	began := b.clock.Now()
	b.ready(t, 2)
	roll := func() int {
		left, err := b.store.RollInsights(ctx, "", RollInBackground)
		require.NoError(t, err)
		return left
	}
	end := func() {
		_, err := b.store.Record(ctx, []Outcome{{C: b.claimOne(t, "replica-a"), Result: json.RawMessage(`1`)}})
		require.NoError(t, err)
	}
	b.clock.Advance(3 * time.Minute)
	require.Zero(t, roll(), "no attempt has ended: the minute is rolled")

	b.clock.Advance(time.Minute) // past what the last roll's cost asks to wait
	end()
	require.Equal(t, 1, roll(), "an attempt of the minute ended since the last roll: the minute settles")

	b.clock.Set(began.Add(settleFor + time.Minute))
	end()
	require.Zero(t, roll(), "past settleFor, a minute is rolled though its attempts still end")

	ins := upToDate(t, b.store, InsightsQuery{Graph: "store", Since: 24 * time.Hour}.WithDefaults())
	i := slices.IndexFunc(ins.Nodes, func(n NodeInsight) bool { return n.Node == "y" })
	require.EqualValues(t, 2, ins.Nodes[i].Reached)
}

// A duration's bin, as the roll computes it, gives it back within 9%.
func TestHistogramBinsGiveDurationsBack(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, d := range []time.Duration{700 * time.Microsecond, 40 * time.Millisecond, time.Second, 90 * time.Minute, 240 * time.Hour} {
		var bin int
		require.NoError(t, b.db.NewRaw("SELECT "+binOf("? * interval '1 microsecond'"), d.Microseconds()).Scan(context.Background(), &bin))
		got := histogram{bin: 3}.quantile(0.5)
		require.InEpsilon(t, float64(d), float64(got), 0.09, "%v came back as %v (bin %d)", d, got, bin)
	}
	h := histogram{10: 50, 80: 45, 90: 5}
	require.Equal(t, histogram{10: 1}.quantile(1), h.quantile(0.5))
	require.Equal(t, histogram{80: 1}.quantile(1), h.quantile(0.95))
	require.Zero(t, histogram{}.quantile(0.5))
}

// A reading answers while another holds the roll's lock, without waiting for it, and says that
// its answer is not up to date; once the lock is free, it is.
func TestReadingDoesNotWaitForABusyRoll(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	require.NoError(t, b.store.RecordGraphs(ctx, "replica-a", testIdentity, time.Minute))
	_, err := b.store.CreateExecution(ctx, b.g)
	require.NoError(t, err)
	tx, err := b.db.BeginTx(ctx, nil)
	require.NoError(t, err)
	_, err = tx.ExecContext(ctx, "SELECT pg_advisory_xact_lock(hashtextextended(?, 0))", b.store.rollLockKey())
	require.NoError(t, err)

	q := InsightsQuery{Graph: "store"}.WithDefaults()
	ins, err := b.store.Insights(ctx, q)
	require.NoError(t, err)
	require.Positive(t, ins.Pending)
	require.Zero(t, ins.Executions)

	require.NoError(t, tx.Rollback())
	ins = upToDate(t, b.store, q)
	require.EqualValues(t, 1, ins.Executions)
}

// pauseAfter makes each statement that does event (INSERT, UPDATE…) on table of the bundle's
// schema wait at its end, in its transaction, until release is called (or the test ends).
// waiting blocks until a transaction waits there, and returns its backend's pid.
func (b *bundle) pauseAfter(t *testing.T, event, table string) (waiting func() int, release func()) {
	t.Helper()
	ctx := context.Background()
	key := mrand.Int32()
	conn, err := b.db.Conn(ctx)
	require.NoError(t, err)
	_, err = conn.ExecContext(ctx, "SELECT pg_advisory_lock(?)", key)
	require.NoError(t, err)
	released := false
	release = func() {
		if !released {
			released = true
			_, err := conn.ExecContext(ctx, "SELECT pg_advisory_unlock(?)", key)
			require.NoError(t, err)
			require.NoError(t, conn.Close())
		}
	}
	t.Cleanup(release)
	b.exec(t, fmt.Sprintf(`CREATE FUNCTION {s}.pause() RETURNS trigger LANGUAGE plpgsql
		AS $$ BEGIN PERFORM pg_advisory_xact_lock_shared(%d); RETURN NULL; END $$`, key))
	b.exec(t, fmt.Sprintf(`CREATE TRIGGER pause AFTER %s ON {s}.%s FOR EACH STATEMENT EXECUTE FUNCTION {s}.pause()`, event, table))
	waiting = func() (pid int) {
		waitFor(t, "a transaction paused after "+event+" on "+table, func() bool {
			err := b.db.NewRaw(`SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND classid = 0 AND objid = ?::oid
				AND objsubid = 1 AND NOT granted`, key).Scan(ctx, &pid)
			if isNoRows(err) {
				return false
			}
			require.NoError(t, err)
			return true
		})
		return pid
	}
	return waiting, release
}

// async runs fn in a goroutine, and returns the channel of its error.
func async(fn func() error) <-chan error {
	done := make(chan error, 1)
	go func() { done <- fn() }()
	return done
}

// waitEndedOrBlocked waits until the call whose error done brings has ended (it then gives the
// error back in the returned channel), or until a statement waits for a lock that the backend
// pid holds.
func (b *bundle) waitEndedOrBlocked(t *testing.T, done <-chan error, pid int) <-chan error {
	t.Helper()
	again := make(chan error, 1)
	waitFor(t, "the roll to end, or to wait for the paused write", func() bool {
		select {
		case err := <-done:
			again <- err
			return true
		default:
		}
		var n int
		require.NoError(t, b.db.NewRaw(`SELECT count(*) FROM pg_stat_activity WHERE ? = ANY(pg_blocking_pids(pid))`,
			pid).Scan(context.Background(), &n))
		return n > 0
	})
	if len(again) == 0 {
		return done
	}
	return again
}

// A write that marks a minute already marked holds the mark until it commits: a roll that claims
// the minute meanwhile waits for it, and then counts it. Without the lock, the roll deleted the
// mark and recomputed the minute before the write committed, and the write was never counted.
func TestRollWaitsForAWriteThatHoldsItsMark(t *testing.T) {
	pgtest.SkipOnCitus(t, "Citus refuses triggers on distributed tables, which the test holds its write with")
	t.Parallel()
	g := graph.MustNew("marks", "v1", []graph.Node{graph.Input("x"), graph.Input("z")})
	b := setup(t, g)
	ctx := context.Background()
	recordGraphs(t, b.store)
	e, err := b.store.CreateExecution(ctx, g)
	require.NoError(t, err)
	reached := func() []int64 {
		ins := upToDate(t, b.store, InsightsQuery{Graph: "marks"}.WithDefaults())
		return []int64{ins.Nodes[0].Reached, ins.Nodes[1].Reached}
	}
	require.Equal(t, []int64{0, 0}, reached())
	b.clock.Advance(10 * time.Minute) // the watermark passes the execution's creation
	require.Equal(t, []int64{0, 0}, reached())
	_, err = b.store.SetValues(ctx, e.ID, map[string]json.RawMessage{"x": json.RawMessage(`1`)}, nil, nil)
	require.NoError(t, err) // its minute is marked

	// A Set of z marks the minute again, and pauses after it, before its COMMIT.
	waiting, release := b.pauseAfter(t, "INSERT", "nodes")
	set := async(func() error {
		_, err := b.store.SetValues(ctx, e.ID, map[string]json.RawMessage{"z": json.RawMessage(`1`)}, nil, nil)
		return err
	})
	writer := waiting()
	rolled := b.waitEndedOrBlocked(t, async(func() error {
		_, err := b.store.RollInsights(ctx, "", 10*time.Second)
		return err
	}), writer)
	release()
	require.NoError(t, <-set)
	require.NoError(t, <-rolled)
	require.Equal(t, []int64{1, 1}, reached(), "the Set of z is counted")
}

// A move holds the marks of both versions until it commits: a roll that claims them meanwhile
// waits, and then counts the moved executions under the new version alone.
func TestRollWaitsForAMoveThatHoldsItsMarks(t *testing.T) {
	pgtest.SkipOnCitus(t, "Citus refuses triggers on distributed tables, which the test holds its move with")
	t.Parallel()
	v1 := graph.MustNew("moving", "v1", []graph.Node{graph.Input("x")})
	v2 := graph.MustNew("moving", "v2", []graph.Node{graph.Input("x"), graph.Input("z")})
	b := setup(t, v1, v2)
	ctx := context.Background()
	recordGraphs(t, b.store)
	var ids []string
	for _, g := range []*graph.Graph{v1, v1, v2} {
		e, err := b.store.CreateExecution(ctx, g)
		require.NoError(t, err)
		ids = append(ids, e.ID)
	}
	executions := func() []int64 {
		var out []int64
		for _, version := range []string{"v1", "v2"} {
			ins := upToDate(t, b.store, InsightsQuery{Graph: "moving", Version: version}.WithDefaults())
			out = append(out, ins.Executions)
		}
		return out
	}
	require.Equal(t, []int64{2, 1}, executions())
	b.clock.Advance(10 * time.Minute)
	require.Equal(t, []int64{2, 1}, executions())
	for _, id := range []string{ids[0], ids[2]} { // the minute is marked under both versions
		_, err := b.store.SetValues(ctx, id, map[string]json.RawMessage{"x": json.RawMessage(`1`)}, nil, nil)
		require.NoError(t, err)
	}

	waiting, release := b.pauseAfter(t, "UPDATE", "executions")
	moved := async(func() error {
		n, err := b.store.MoveVersion(ctx, "moving", "v1", "v2")
		if err == nil && n != 2 {
			err = fmt.Errorf("moved %d executions, not 2", n)
		}
		return err
	})
	mover := waiting()
	rolled := b.waitEndedOrBlocked(t, async(func() error {
		_, err := b.store.RollInsights(ctx, "", 10*time.Second)
		return err
	}), mover)
	release()
	require.NoError(t, <-moved)
	require.NoError(t, <-rolled)
	require.Equal(t, []int64{0, 3}, executions(), "the moved executions count under v2 alone")
}

// Retention deletes history that insights count (a replaced value tells when its node had its
// first value): it marks the minutes of the executions concerned, and the next reading counts
// what is left.
func TestRetentionMarksTheMinutesOfWhatItDeletes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	recordGraphs(t, b.store)
	e, err := b.store.CreateExecution(ctx, b.g)
	require.NoError(t, err)
	set := func(v string) {
		_, err := b.store.SetValues(ctx, e.ID, map[string]json.RawMessage{"x": json.RawMessage(v)}, nil, nil)
		require.NoError(t, err)
	}
	toReach := func() time.Duration {
		ins := upToDate(t, b.store, InsightsQuery{Graph: "store"}.WithDefaults())
		require.EqualValues(t, 1, ins.Nodes[0].Reached)
		return ins.Nodes[0].ToReachP50
	}
	set(`1`)
	b.clock.Advance(time.Hour)
	set(`2`)
	b.clock.Advance(10 * time.Minute)
	require.Less(t, toReach(), time.Millisecond, "x had its first value as the execution started")

	deleted, _, err := b.store.prune(ctx, 30*time.Minute, 100)
	require.NoError(t, err)
	require.Positive(t, deleted)
	require.InEpsilon(t, float64(time.Hour), float64(toReach()), 0.09, "the first value of x left is the one set an hour in")
}

// A write marks its minutes in their key's order, which the roll's claim follows too: two writes
// that took the same marks in different orders could each hold one that the other waits for.
func TestMarksAreTakenInKeyOrder(t *testing.T) {
	t.Parallel()
	g := graph.MustNew("marks", "v1", []graph.Node{graph.Input("x")})
	b := setup(t, g)
	ctx := context.Background()
	var settings []Setting
	var minutes []string
	for range 12 {
		e, err := b.store.CreateExecution(ctx, g)
		require.NoError(t, err)
		settings = append(settings, Setting{ID: e.ID, Set: map[string]json.RawMessage{"x": json.RawMessage(`1`)}})
		minutes = append(minutes, e.CreatedAt.UTC().Format("15:04"))
		b.clock.Advance(time.Minute)
	}
	slices.Reverse(settings)
	b.exec(t, `CREATE TABLE {s}.mark_log (n serial PRIMARY KEY, minute timestamptz NOT NULL)`)
	b.exec(t, `CREATE FUNCTION {s}.log_mark() RETURNS trigger LANGUAGE plpgsql
		AS $$ BEGIN INSERT INTO {s}.mark_log (minute) VALUES (NEW.minute); RETURN NEW; END $$`)
	b.exec(t, `CREATE TRIGGER log_mark BEFORE INSERT ON {s}.insight_marks FOR EACH ROW EXECUTE FUNCTION {s}.log_mark()`)
	_, err := b.store.SetValuesOf(ctx, settings)
	require.NoError(t, err)
	var logged []string
	require.NoError(t, b.db.NewRaw(b.store.q(`SELECT to_char(minute AT TIME ZONE 'UTC', 'HH24:MI') FROM {s}.mark_log ORDER BY n`)).
		Scan(ctx, &logged))
	require.Equal(t, minutes, logged, "the marks are taken oldest minute first")
}

// A move is refused while attempts of the version it moves from run: their outcomes would be
// recorded by a version that is not theirs. It changes nothing, and goes once they have ended.
func TestMoveVersionRefusesWhileAttemptsRun(t *testing.T) {
	t.Parallel()
	v1 := testGraph("store")
	v2 := graph.MustNew("store", "v2", append(v1.Nodes(), graph.Input("z")))
	b := setup(t, v1, v2)
	ctx := context.Background()
	recordGraphs(t, b.store)
	id := b.ready(t, 1)[0]
	c := b.claimOne(t, "r1")

	_, err := b.store.MoveVersion(ctx, "store", "v1", "v2")
	require.ErrorIs(t, err, ErrBadRequest)
	require.ErrorContains(t, err, `graph "store" version "v1" has 1 attempt(s) running`)
	require.ErrorContains(t, err, "wait for them to end, or for the sweeper to abandon them")
	e, err := b.store.LoadExecution(ctx, id)
	require.NoError(t, err)
	require.Equal(t, "v1", e.GraphVersion, "nothing was moved")

	require.NoError(t, b.store.Complete(ctx, c, json.RawMessage(`1`), map[string]int64{"x": 1}))
	n, err := b.store.MoveVersion(ctx, "store", "v1", "v2")
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
}

// A replica that starts serving the version a move moves from, while the move runs, is seen by
// the move's transaction: the move is refused, and changes nothing.
func TestMoveVersionSeesAReplicaThatStartsServingMeanwhile(t *testing.T) {
	t.Parallel()
	v1 := graph.MustNew("moving", "v1", []graph.Node{graph.Input("x")})
	v2 := graph.MustNew("moving", "v2", []graph.Node{graph.Input("x"), graph.Input("z")})
	b := setup(t, v1, v2)
	ctx := context.Background()
	recordGraphs(t, b.store)
	e, err := b.store.CreateExecution(ctx, v1)
	require.NoError(t, err)

	waiting, release := b.pauseAfter(t, "UPDATE", "executions")
	moved := async(func() error {
		_, err := b.store.MoveVersion(ctx, "moving", "v1", "v2")
		return err
	})
	waiting()
	late := b.newStore(t, Config{Graphs: []*graph.Graph{v1}})
	beat(t, late, "late", time.Minute, true)
	release()
	err = <-moved
	require.ErrorIs(t, err, ErrBadRequest)
	require.ErrorContains(t, err, `graph "moving" version "v1" is still served by replica(s) late`)
	got, err := b.store.LoadExecution(ctx, e.ID)
	require.NoError(t, err)
	require.Equal(t, "v1", got.GraphVersion, "nothing was moved")
}

// A reader whose role cannot see when other roles' transactions began (a dashboard's role, granted
// by journey migrate -grant) keeps the watermark behind them all the same: an execution created
// by a transaction that stays open across its rolls is counted once it commits.
func TestWatermarkStaysBehindTransactionsOfOtherRoles(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	role := "jt_insights_" + strings.ToLower(rand.Text()[:8])
	b.exec(t, "CREATE ROLE "+role+" LOGIN")
	t.Cleanup(func() { // before the schema's drop: DROP OWNED revokes the role's grants
		_, err := b.db.ExecContext(context.Background(), "DROP OWNED BY "+role+"; DROP ROLE "+role)
		assert.NoError(t, err)
	})
	require.NoError(t, migrations.Grant(ctx, b.db, b.schema, role))
	u, err := url.Parse(pgtest.URL(t))
	require.NoError(t, err)
	u.User = url.User(role)
	reader, err := New(Config{DB: pgtest.BunDB(t, u.String()), Schema: b.schema, Graphs: []*graph.Graph{b.g}, Clock: b.clock,
		Logger: testLogger()})
	require.NoError(t, err)
	recordGraphs(t, b.store)
	_, err = b.store.CreateExecution(ctx, b.g)
	require.NoError(t, err)
	executions := func() int64 {
		ins := upToDate(t, reader, InsightsQuery{Graph: "store"}.WithDefaults())
		return ins.Executions
	}
	require.EqualValues(t, 1, executions())

	waiting, release := b.pauseAfter(t, "INSERT", "executions")
	created := async(func() error {
		_, err := b.store.CreateExecution(ctx, b.g)
		return err
	})
	writer := waiting()
	var began *time.Time
	require.NoError(t, reader.db.NewRaw("SELECT xact_start FROM pg_stat_activity WHERE pid = ?", writer).Scan(ctx, &began))
	require.Nil(t, began, "the reader's role cannot see when the creation began")
	b.clock.Advance(10 * time.Minute)
	require.EqualValues(t, 1, executions())
	require.EqualValues(t, 1, executions())
	release()
	require.NoError(t, <-created)
	require.EqualValues(t, 2, executions(), "the execution created in the open transaction is counted")
}

// The watermark stays behind the transactions in progress that began since the last roll looked,
// passes those in progress for longer than rollLagCap, and catches up on their rows once they
// have ended.
func TestNextWatch(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	at := t0.Add

	r, w := nextWatch(nil, sight{At: t0, Xmin: 100, Vxids: []string{"3/1"}})
	require.Equal(t, rollRange{CatchXmin: 100}, r, "the first roll marks every row")
	require.Equal(t, watch{Watermark: at(-watchMargin), At: t0, Vxids: []string{"3/1"}, Since: []time.Time{{}},
		Xmins: []int64{100}}, w, "a transaction in progress at the first roll may have begun at any time: it is long")

	// 3/1 goes on, 4/7 begins after the roll looked, 3/1 ends, then 4/7.
	r, w = nextWatch(&w, sight{At: at(10 * time.Second), Xmin: 105, Vxids: []string{"3/1", "4/7"}})
	require.Equal(t, rollRange{From: at(-watchMargin), CatchUp: at(-watchMargin), CatchXmin: 105}, r)
	require.Equal(t, at(-watchMargin), w.Watermark, "behind 4/7, which began after the last roll looked")
	require.Equal(t, []time.Time{{}, at(-watchMargin)}, w.Since)
	r, w = nextWatch(&w, sight{At: at(20 * time.Second), Xmin: 106, Vxids: []string{"4/7"}})
	require.Equal(t, rollRange{From: at(-watchMargin), CatchUp: time.Time{}, CatchXmin: 100}, r,
		"3/1 has ended: its rows, from any time, of its transaction ids on")
	require.Equal(t, at(-watchMargin), w.Watermark)
	r, w = nextWatch(&w, sight{At: at(2 * time.Minute), Xmin: 110, Vxids: []string{"4/7"}})
	require.Equal(t, rollRange{From: at(-watchMargin), CatchUp: at(-watchMargin), CatchXmin: 110}, r)
	require.Equal(t, at(2*time.Minute-watchMargin), w.Watermark, "4/7 has been in progress for longer than rollLagCap")
	r, w = nextWatch(&w, sight{At: at(3 * time.Minute), Xmin: 4294967290, Vxids: []string{}})
	require.Equal(t, rollRange{From: at(2*time.Minute - watchMargin), CatchUp: at(-watchMargin), CatchXmin: 105}, r,
		"4/7 has ended: its rows since it began, of its transaction ids on (ids wrap around)")
	require.Equal(t, watch{Watermark: at(3*time.Minute - watchMargin), At: at(3 * time.Minute), Vxids: []string{},
		Since: []time.Time{}, Xmins: []int64{}}, w)
}

// A window or a bucket that the series cannot hold is refused, naming the limit, before anything
// is rolled.
func TestInsightsRefuseAWindowTheyCannotHold(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	recordGraphs(t, b.store)
	_, err := b.store.CreateExecution(ctx, b.g)
	require.NoError(t, err)
	for _, tc := range []struct {
		q    InsightsQuery
		want string
	}{
		{InsightsQuery{Since: math.MaxInt64}, "an insights window or bucket is 100 years (876000h0m0s) at most"},
		{InsightsQuery{Since: time.Hour, Bucket: math.MaxInt64 / time.Minute * time.Minute}, "100 years (876000h0m0s) at most"},
		{InsightsQuery{Since: MaxInsightsWindow, Bucket: time.Minute}, "an insights series holds 10000 buckets at most: " +
			"a window of 876000h0m0s in buckets of 1m0s would take 52560000; use a larger bucket"},
	} {
		tc.q.Graph = "store"
		_, err := b.store.Insights(ctx, tc.q.WithDefaults())
		require.ErrorIs(t, err, ErrBadRequest)
		require.ErrorContains(t, err, tc.want)
	}
	var rolled int
	require.NoError(t, b.db.NewRaw(b.store.q("SELECT count(*) FROM {s}.insight_watch")).Scan(ctx, &rolled))
	require.Zero(t, rolled, "nothing was rolled")
	ins, err := b.store.Insights(ctx, InsightsQuery{Graph: "store", Since: MaxInsightsWindow}.WithDefaults())
	require.NoError(t, err, "the longest window, in the default bucket")
	require.EqualValues(t, 1, ins.Executions)
	require.Len(t, ins.Series, 5215)
}
