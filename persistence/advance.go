package persistence

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"

	"github.com/journey-go/journey/graph"
	"github.com/journey-go/journey/internal/telemetry"
)

// execState is an execution loaded for writing: the caller holds the lock on its executions row
// until the transaction ends.
type execState struct {
	exec   Execution
	g      *graph.Graph
	now    time.Time
	values graph.Values
	latest map[string]*Computation // the newest attempt of each node
	// created are the attempts made that finish inserts, all in one statement: nothing reads them
	// from the table before the commit. Their ID is 0.
	created []*Computation
	// claimed are the attempts made that this replica claimed as it made them (see Local).
	claimed []*Computation

	revision int64             // the revision to write back at the end
	saved    []graph.SaveEvent // OnSave events to fire after commit
	work     bool              // a computation became AVAILABLE: NOTIFY the dispatchers
	changed  bool              // a value or a node's outcome changed: NOTIFY the waiters
	promote  bool              // a gated attempt was created or freed a slot: promote now
	// caller: the write is a caller's Set or Start, which a concurrency key that cannot be stored
	// fails (ErrInvalidValue), changing nothing; elsewhere such a key fails its node.
	caller bool
	// claims: the write claims for this replica the attempts it makes ready, as far as its
	// dispatcher has free workers (Store.claimLocally): a caller's Set or Start, or a completion.
	claims bool
	// promoteLater: the promotion lock was busy, so promotion runs after the commit instead.
	promoteLater bool
	// promoteByCaller: the caller promotes once after many writes (a sweep pass after its
	// abandonments), so a busy promotion lock is not waited for after this write's commit.
	promoteByCaller bool
	// requeueAt, when set, is the run_at of an abandoned attempt whose retry is being created: a
	// retry without backoff is due since then, and keeps that attempt's place in the queue.
	requeueAt *time.Time
}

type valueRow struct {
	ExecutionID string          `bun:"execution_id"`
	Node        string          `bun:"node"`
	Value       json.RawMessage `bun:"value"`
	Metadata    json.RawMessage `bun:"metadata"`
	Revision    int64           `bun:"revision"`
	SetAt       time.Time       `bun:"set_at"`
}

func (r valueRow) toValue() graph.Value {
	return graph.Value{Raw: r.Value, Revision: r.Revision, SetAt: r.SetAt, Metadata: r.Metadata}
}

// write runs fn on execution id, locked and loaded, in a transaction that then writes the
// execution back (finish); after the commit it fires the OnSave events. before, if not nil, runs
// first in the same transaction: a fenced write that must lock its computation row before the
// execution is locked, as the lock order demands.
func (s *Store) write(ctx context.Context, id string, before func(ctx context.Context, tx bun.IDB) error,
	fn func(ctx context.Context, tx *txn, st *execState) error) error {
	if err := CheckText("execution id", id); err != nil {
		return err
	}
	var done []*execState
	err := s.inTxn(ctx, s.db, func(ctx context.Context, t *txn) error {
		if before != nil {
			if err := t.begin(ctx); err != nil {
				return err
			}
			if err := before(ctx, t); err != nil {
				return err
			}
		}
		sts, err := s.load(ctx, t, []string{id}, nil, nil)
		if err != nil {
			return err
		}
		if err := fn(ctx, t, sts[0]); err != nil {
			return err
		}
		s.mark(t, sts)
		if err := s.finish(ctx, t, sts); err != nil {
			return err
		}
		done = sts
		return nil
	})
	if err != nil {
		return err
	}
	s.committed(ctx, done)
	return nil
}

// committed follows the commit of a write: it fires the OnSave events, and promotes what the
// write could not because the promotion lock was busy.
func (s *Store) committed(ctx context.Context, sts []*execState) {
	later := false
	for _, st := range sts {
		s.fireSaved(st)
		later = later || st.promoteLater
	}
	if later {
		s.promoteAfterCommit(ctx)
	}
}

// lockedExecution is an executions row locked for writing, with the transaction's time.
type lockedExecution struct {
	Execution
	Now time.Time `bun:"tx_now" db:"tx_now"`
}

// load locks the executions ids, in id order so that two writers of several executions never
// wait on each other, and reads what advancing them needs: their values, and the newest attempt
// of each node. before, the lock, then, and the reads go in one round trip (with the BEGIN, if it
// has not gone), one statement per table whatever the number of executions. It returns their
// states in id order; an id may be given twice.
func (s *Store) load(ctx context.Context, t *txn, ids []string, before, then []step) ([]*execState, error) {
	ids = slices.Compact(slices.Sorted(slices.Values(ids)))
	var rows []*lockedExecution
	var vals []*valueRow
	var latest []*Computation
	// A new slice: appending to before would write into the caller's array.
	steps := slices.Concat(before, []step{{s.q(`SELECT ` + cols("e", executionColumns) + `, coalesce($1::timestamptz, now()) AS tx_now FROM {s}.executions e
			WHERE e.id = ANY($2::text[]) ORDER BY e.id FOR UPDATE`), []any{s.clock.NowOrNil(), ids}, collect(&rows)}}, then)
	err := t.send(ctx, append(steps,
		step{s.q(`SELECT execution_id, node, value, metadata, revision, set_at FROM {s}."values"
			WHERE execution_id = ANY($1::text[])`), []any{ids}, collect(&vals)},
		step{s.q(latestAttemptsQuery), []any{ids, s.computed[0], s.computed[1]}, collect(&latest)},
	)...)
	if err != nil {
		return nil, fmt.Errorf("loading executions %s: %w", strings.Join(ids, ", "), err)
	}
	if len(rows) < len(ids) {
		for i, id := range ids {
			if i >= len(rows) || rows[i].ID != id {
				return nil, fmt.Errorf("%w: %q", ErrNotFound, id)
			}
		}
	}
	sts := make([]*execState, len(rows))
	byID := make(map[string]*execState, len(sts))
	for i, row := range rows {
		g, ok := s.Graph(row.GraphName, row.GraphVersion)
		if !ok {
			return nil, fmt.Errorf("%w: execution %s belongs to graph %q version %q, which this replica does not serve",
				ErrUnknownGraph, row.ID, row.GraphName, row.GraphVersion)
		}
		sts[i] = &execState{exec: row.Execution, g: g, now: row.Now, revision: row.Revision,
			values: graph.Values{}, latest: map[string]*Computation{}}
		byID[row.ID] = sts[i]
	}
	for _, v := range vals {
		byID[v.ExecutionID].values[v.Node] = v.toValue()
	}
	for _, c := range latest {
		byID[c.ExecutionID].latest[c.Node] = c
	}
	return sts, nil
}

// latestAttemptsQuery reads the newest attempt of each node of executions $1 that is not an
// input, given as the arrays of graph keys $2 and node names $3. It reads one index entry per
// node: the cost does not grow with the attempts an execution has made.
var latestAttemptsQuery = `SELECT ` + cols("c", computationColumns) + ` FROM {s}.executions e
	JOIN unnest($2::text[], $3::text[]) AS n(graph_key, node) ON n.graph_key = e.graph_name || '@' || e.graph_version
	CROSS JOIN LATERAL (SELECT ` + cols("", computationColumns) + ` FROM {s}.computations
		WHERE execution_id = e.id AND node = n.node ORDER BY id DESC LIMIT 1) c
	WHERE e.id = ANY($1::text[])`

// valuesOf reads the values of executions ids. Each has an entry, empty if it has no values.
func (s *Store) valuesOf(ctx context.Context, db bun.IDB, ids []string) (map[string]graph.Values, error) {
	var rows []valueRow
	err := db.NewRaw(s.q(`SELECT execution_id, node, value, metadata, revision, set_at FROM {s}."values"
		WHERE execution_id = ANY(?::text[])`), pgdialect.Array(ids)).Scan(ctx, &rows)
	if err != nil && !isNoRows(err) {
		return nil, fmt.Errorf("loading values of %s: %w", strings.Join(ids, ", "), err)
	}
	vals := make(map[string]graph.Values, len(ids))
	for _, id := range ids {
		vals[id] = graph.Values{}
	}
	for _, r := range rows {
		vals[r.ExecutionID][r.Node] = r.toValue()
	}
	return vals, nil
}

// upsertValue writes a node's value at revision rev unless it equals the stored one. It reports
// whether anything changed; the caller owns the execution's revision.
func (s *Store) upsertValue(ctx context.Context, tx *txn, st *execState, node string, raw, meta json.RawMessage, rev int64) (bool, error) {
	var w valueWrites
	w.add(st.exec.ID, node, raw, meta, rev)
	rows, err := s.writeValues(ctx, tx, w, st.now)
	if err != nil || len(rows) == 0 {
		return false, err
	}
	st.values[node] = rows[0].toValue()
	st.changed = true
	st.recordSave(node, rows[0].toValue())
	return true, nil
}

// valueWrites are values to write, as the columns of writeValues' statement.
type valueWrites struct {
	ids, nodes, raws, metas []string // a metadata of "" is none
	revs                    []int64
}

func (w *valueWrites) add(id, node string, raw, meta json.RawMessage, rev int64) {
	w.ids, w.nodes, w.raws = append(w.ids, id), append(w.nodes, node), append(w.raws, string(raw))
	w.metas, w.revs = append(w.metas, string(meta)), append(w.revs, rev)
}

// writeValuesQuery writes values, at most one per execution and node, in one statement, each
// unless it equals the stored one, and moves each value it replaces to the history, with its place
// there (history_id). It returns the rows that changed. A revision of 0 is the execution's
// revision plus one: the writer holds the execution's row, and writes back that revision.
const writeValuesQuery = `WITH i AS (SELECT * FROM unnest(?::text[], ?::text[], ?::jsonb[], ?::text[], ?::bigint[])
			WITH ORDINALITY AS i(execution_id, node, value, metadata, revision, ord)),
	old AS (SELECT v.execution_id, v.node, v.value, v.metadata, v.revision, v.set_at, v.history_id FROM {s}."values" v JOIN i ON v.execution_id = i.execution_id AND v.node = i.node),
	v AS (INSERT INTO {s}."values" AS v (execution_id, node, value, metadata, revision, set_at)
		SELECT i.execution_id, i.node, i.value, nullif(i.metadata, '')::jsonb,
			coalesce(nullif(i.revision, 0), e.revision + 1), coalesce(?::timestamptz, now())
		FROM i JOIN {s}.executions e ON e.id = i.execution_id ORDER BY i.ord
		ON CONFLICT (execution_id, node) DO UPDATE
		SET value = excluded.value, metadata = excluded.metadata, revision = excluded.revision, set_at = excluded.set_at,
			history_id = excluded.history_id
		WHERE v.value IS DISTINCT FROM excluded.value OR v.metadata IS DISTINCT FROM excluded.metadata
		RETURNING execution_id, node, value, metadata, revision, set_at),
	h AS (INSERT INTO {s}.value_history (id, execution_id, node, value, metadata, revision, changed_at)
		SELECT old.history_id, old.execution_id, old.node, old.value, old.metadata, old.revision, old.set_at
		FROM old JOIN v ON v.execution_id = old.execution_id AND v.node = old.node)
	SELECT * FROM v`

// writeValues runs writeValuesQuery in t: it writes w at time now.
func (s *Store) writeValues(ctx context.Context, t *txn, w valueWrites, now time.Time) ([]*valueRow, error) {
	var rows []*valueRow
	if err := t.send(ctx, s.writeValuesStep(w, now, &rows)); err != nil {
		return nil, fmt.Errorf("writing %d value(s): %w", len(w.ids), err)
	}
	return rows, nil
}

// writeValuesStep is writeValuesQuery as a step of a batch, at time now (nil: the transaction's
// time). It reads the rows that changed into rows.
func (s *Store) writeValuesStep(w valueWrites, now any, rows *[]*valueRow) step {
	return step{s.writeValuesSQL, []any{w.ids, w.nodes, w.raws, w.metas, w.revs, now}, collect(rows)}
}

// recordSave queues the OnSave event of a value written, if its node or the graph has a callback.
func (st *execState) recordSave(node string, v graph.Value) {
	if n, ok := st.g.Node(node); ok && (n.Settings().OnSave != nil || st.g.OnSave() != nil) {
		st.saved = append(st.saved, graph.SaveEvent{ExecutionID: st.exec.ID, Graph: st.g.Name(), Node: node, Value: v})
	}
}

// deleteValue clears a node's value: it moves the value to the history, and records the
// clearing there after it.
func (s *Store) deleteValue(ctx context.Context, tx *txn, st *execState, node string) error {
	_, err := tx.NewRaw(s.q(`WITH d AS (DELETE FROM {s}."values" WHERE execution_id = ? AND node = ?
			RETURNING history_id, execution_id, node, value, metadata, revision, set_at),
		moved AS (INSERT INTO {s}.value_history (id, execution_id, node, value, metadata, revision, changed_at)
			SELECT history_id, execution_id, node, value, metadata, revision, set_at FROM d)
		INSERT INTO {s}.value_history (execution_id, node, revision, changed_at) SELECT execution_id, node, ?, ? FROM d`),
		st.exec.ID, node, st.revision, st.now).Exec(ctx)
	if err != nil {
		return fmt.Errorf("clearing value %q: %w", node, err)
	}
	delete(st.values, node)
	st.changed = true
	return nil
}

// advance evaluates every gate against the current values, until nothing changes:
//   - it clears the values of compute and mutate nodes whose gate no longer holds;
//   - it creates a computation for each compute, mutate or tick node whose gate holds and whose
//     upstream revisions differ from those of its newest attempt, and for each recurring tick whose
//     due time has passed;
//   - it records the tracked changes of historians, and archives the execution when an archive
//     node's gate holds.
//
// Gates see two views of the values. Whether a node may run is judged on the due view, where a
// tick counts as provided only once its time has come; whether a value must be cleared is judged
// on all values, where a tick counts once it is set at all, so a paused tick wipes nothing.
//
// An archived execution gets no new computations; Unarchive advances it again. A gate that panics
// fails its node, and the others advance as usual.
func (s *Store) advance(ctx context.Context, tx *txn, st *execState) error {
	for again := true; again; {
		again = false
		due := st.dueView()
		for _, name := range st.g.Order() {
			n, _ := st.g.Node(name)
			changed, err := s.advanceNode(ctx, tx, st, n, due)
			var panicked *gatePanic
			if errors.As(err, &panicked) {
				err = s.failNode(ctx, tx, st, n, panicked.err)
			}
			if err != nil {
				return err
			}
			again = again || changed
		}
	}
	return nil
}

// gatePanic is a gate's panic on its way to failing the node.
type gatePanic struct{ err error }

func (p *gatePanic) Error() string { return p.err.Error() }

// advanceNode advances one node, and reports whether it changed a value that other gates read.
func (s *Store) advanceNode(ctx context.Context, tx *txn, st *execState, n graph.Node, due graph.Values) (bool, error) {
	name := n.Name()
	gate := func(vals graph.Values) (bool, error) {
		ok, err := holds(n, vals)
		if err != nil {
			return false, &gatePanic{err}
		}
		return ok, nil
	}
	switch n.Kind() {
	case graph.KindInput:
		return false, nil
	case graph.KindHistorian:
		if ok, err := gate(due); !ok {
			return false, err
		}
		return s.recordHistory(ctx, tx, st, n)
	case graph.KindArchive:
		if ok, err := gate(due); !ok || st.values.Has(name) {
			return false, err
		}
		return true, s.archiveByNode(ctx, tx, st, name)
	}
	if ok, err := gate(st.values); !ok {
		if err != nil || !clearable(n) || !st.values.Has(name) {
			return false, err
		}
		st.revision++
		return true, s.deleteValue(ctx, tx, st, name)
	}
	if ok, err := gate(due); !ok {
		return false, err
	}
	latest := st.latest[name]
	if st.exec.ArchivedAt != nil || latest != nil && latest.active() {
		return false, nil
	}
	sig := signature(Signature(n, due))
	if latest != nil && parseSignature(latest.ComputedWith).equal(sig) {
		if latest.failedForGood() {
			return false, nil // its attempts at these upstream revisions are used up
		}
		upToDate := st.values.Has(name) || !clearable(n)
		nextCycle := n.Kind() == graph.KindTickRecurring && st.tickDue(name)
		if latest.State == StateSuccess && upToDate && !nextCycle {
			return false, nil
		}
	}
	c, err := s.insertComputation(ctx, tx, st, n, 1, sig, 0)
	if err != nil {
		return false, err
	}
	st.latest[name] = c
	return false, nil
}

// failNode records that a node failed for good without running: its gate panicked. It does so
// once per upstream revisions, as a FAILED attempt with the cause, and claims the failure event.
// A node with an attempt under way is left to that attempt.
func (s *Store) failNode(ctx context.Context, tx *txn, st *execState, n graph.Node, cause error) error {
	sig := signature(Signature(n, st.dueView()))
	latest := st.latest[n.Name()]
	if latest != nil && (latest.active() || latest.failedForGood() && parseSignature(latest.ComputedWith).equal(sig)) {
		return nil
	}
	s.logger.Error("user code panicked; the node has failed", "execution_id", st.exec.ID, "node", n.Name(), "error", cause)
	msg := storable(cause.Error())
	c := new(Computation)
	err := tx.NewRaw(s.q(`INSERT INTO {s}.computations
		(execution_id, graph_key, node, state, attempt, max_attempts, run_at, abandon_after_ms,
		 heartbeat_timeout_ms, computed_with, error, created_at, finished_at)
		VALUES (?, ?, ?, 'FAILED', 1, ?, ?, ?, ?, ?::jsonb, ?, ?, ?)
		RETURNING `+cols("", computationColumns)),
		st.exec.ID, GraphKey(st.exec.GraphName, st.exec.GraphVersion), n.Name(), n.Settings().MaxAttempts, st.now,
		n.Settings().AbandonAfter.Milliseconds(), n.Settings().HeartbeatTimeout.Milliseconds(), sig.String(), msg,
		st.now, st.now).Scan(ctx, c)
	if err != nil {
		return fmt.Errorf("recording the failure of %q: %w", n.Name(), err)
	}
	st.revision++
	return s.nodeFailed(ctx, tx, st, c, cause)
}

// clearable reports whether invalidation clears the node's value. Historian, archive and tick
// values are never cleared, and neither are mutate targets, which are inputs.
func clearable(n graph.Node) bool {
	return n.Kind() == graph.KindCompute || n.Kind() == graph.KindMutate
}

// insertComputation creates an attempt. It is AVAILABLE at once, unless it must wait for delay,
// a concurrency key or a parallel limit: then it is PENDING, and a gated one is promoted before
// the transaction ends if a slot is free. In an archived execution it is CANCELED at once, until
// Unarchive revives it. If the node's ConcurrencyKey panics, or returns a key that cannot be
// stored (see checkKey), the node fails; but a caller's write (st.caller) fails instead.
func (s *Store) insertComputation(ctx context.Context, tx *txn, st *execState, n graph.Node, attempt int, sig signature, delay time.Duration) (*Computation, error) {
	set := n.Settings()
	var key *string
	var keyErr error
	if set.ConcurrencyKey != nil {
		var k string
		k, keyErr = recovered("the ConcurrencyKey of node "+quote(n.Name()), func() string { return set.ConcurrencyKey(st.values) })
		if err := checkKey(k); keyErr == nil && err != nil {
			keyErr = fmt.Errorf("the ConcurrencyKey of node %s returned a key that cannot be stored: %w; "+
				"a key is valid UTF-8 with no NUL character, at most %d bytes", quote(n.Name()), err, maxKeyBytes)
			if st.caller {
				return nil, fmt.Errorf("%w: %w", ErrInvalidValue, keyErr)
			}
		}
		if k != "" && keyErr == nil {
			key = &k
		}
	}
	var maxParallel *int
	if set.MaxParallel > 0 {
		maxParallel = &set.MaxParallel
	}
	state := StateAvailable
	runAt := st.now
	if st.requeueAt != nil && delay <= 0 {
		runAt = *st.requeueAt
	}
	var errText *string
	var finishedAt *time.Time
	switch {
	case keyErr != nil:
		msg := storable(keyErr.Error())
		state, errText, finishedAt = StateFailed, &msg, &st.now
	case st.exec.ArchivedAt != nil:
		reason := ReasonArchived
		state, errText, finishedAt = StateCanceled, &reason, &st.now
		if delay > 0 {
			runAt = st.now.Add(delay)
		}
	case delay > 0:
		state, runAt = StatePending, st.now.Add(delay)
	case key != nil || maxParallel != nil:
		state = StatePending
		st.promote = true
	}
	c := &Computation{ExecutionID: st.exec.ID, GraphKey: GraphKey(st.exec.GraphName, st.exec.GraphVersion),
		Node: n.Name(), State: state, Attempt: attempt, MaxAttempts: set.MaxAttempts, RunAt: runAt,
		AbandonAfterMS: set.AbandonAfter.Milliseconds(), HeartbeatTimeoutMS: set.HeartbeatTimeout.Milliseconds(),
		ComputedWith: sig.String(), ConcurrencyKey: key, MaxParallel: maxParallel, Error: errText,
		CreatedAt: st.now, FinishedAt: finishedAt, Traceparent: telemetry.Traceparent(ctx)}
	if state == StateAvailable {
		c.AvailableAt = &st.now
	}
	if state == StateFailed || state == StatePending && c.gated() {
		// The promotion and the failure event read it from the table, before the commit.
		err := tx.NewRaw(s.q(`INSERT INTO {s}.computations
			(execution_id, graph_key, node, state, attempt, max_attempts, run_at, abandon_after_ms,
			 heartbeat_timeout_ms, computed_with, concurrency_key, max_parallel, error, created_at, finished_at,
			 traceparent)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?::jsonb, ?, ?, ?, ?, ?, ?)
			RETURNING `+cols("", computationColumns)),
			c.ExecutionID, c.GraphKey, c.Node, c.State, c.Attempt, c.MaxAttempts, c.RunAt, c.AbandonAfterMS,
			c.HeartbeatTimeoutMS, c.ComputedWith, c.ConcurrencyKey, c.MaxParallel, c.Error, c.CreatedAt,
			c.FinishedAt, c.Traceparent).Scan(ctx, c)
		if err != nil {
			return nil, fmt.Errorf("creating computation of %q: %w", n.Name(), err)
		}
	} else {
		st.created = append(st.created, c) // inserted with the COMMIT, by finish
	}
	switch state {
	case StateAvailable:
		st.work = true
	case StateFailed:
		s.logger.Error("the node's concurrency key failed; the node has failed", "execution_id", st.exec.ID, "node", n.Name(), "error", keyErr)
		if err := s.nodeFailed(ctx, tx, st, c, keyErr); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// finish writes the executions' revisions back, claims their events, promotes what their writes
// made due, and queues the notifications, each for all of sts at once. The attempts created and
// the revisions go with the COMMIT, in one statement; the notifications follow it (see notes). The caller commits and
// then calls committed.
func (s *Store) finish(ctx context.Context, t *txn, sts []*execState) error {
	var ids, wakes []string
	var revs []int64
	var setWake []bool
	promote := false
	for _, st := range sts {
		s.claimLocally(t, st)
		if err := s.claimCompletion(ctx, t, st); err != nil {
			return err
		}
		promote = promote || st.promote
		wake := st.nextWake()
		moved := !sameTime(wake, st.exec.WakeAt)
		if !moved && st.revision == st.exec.Revision {
			continue
		}
		w := ""
		if wake != nil {
			w = wake.Format(time.RFC3339Nano)
		}
		ids, revs, wakes, setWake = append(ids, st.exec.ID), append(revs, st.revision), append(wakes, w), append(setWake, moved)
	}
	work := false
	if promote {
		n, err := s.promoteGated(ctx, t, sts[0].now, false)
		switch {
		case errors.Is(err, errPromotionBusy):
			sts[0].promoteLater = !sts[0].promoteByCaller
		case err != nil:
			return err
		}
		work = n > 0
	}
	var changed []string
	for _, st := range sts {
		work = work || st.work || st.leftAvailable()
		switch {
		case st.changed && st.revision != st.exec.Revision:
			changed = append(changed, st.exec.ID+"@"+strconv.FormatInt(st.revision, 10))
			if s.handoff != nil {
				t.handing = append(t.handing, st)
			}
		case st.changed:
			changed = append(changed, st.exec.ID)
		}
	}
	t.notes = append(t.notes, s.payloads(work, changed)...)
	created, n := createdColumns(sts)
	if claim, ok := s.claimStep(t); ok {
		t.tail = append(t.tail, claim)
	}
	if n == 0 && len(ids) == 0 {
		return nil
	}
	t.atCommit(s.q(finishQuery), append(created, s.clock.NowOrNil(), ids, revs, wakes, setWake)...)
	return nil
}

// leftAvailable reports whether the execution has an AVAILABLE attempt after the write: a claim
// that ran while the write held the execution's row skipped it, and waits for the write's
// NOTIFY, which must then announce work, though the write made none. A sibling's completion is
// such a write: without it, attempts beyond the free workers waited for the poll.
func (st *execState) leftAvailable() bool {
	for _, c := range st.latest {
		if c.State == StateAvailable {
			return true
		}
	}
	return false
}

// finishQuery ends a write: it inserts the attempts created ($1 to $17, in the order they were
// made), and writes the executions' revisions and wake times back ($18 to $22). A part whose
// arrays are empty does nothing.
const finishQuery = `WITH created AS (
		INSERT INTO {s}.computations
			(execution_id, graph_key, node, state, attempt, max_attempts, run_at, abandon_after_ms,
			 heartbeat_timeout_ms, computed_with, concurrency_key, max_parallel, error, created_at, finished_at,
			 available_at, traceparent)
		SELECT execution_id, graph_key, node, state, attempt, max_attempts, run_at, abandon_after_ms,
			heartbeat_timeout_ms, computed_with::jsonb, concurrency_key, max_parallel, error, created_at, finished_at,
			available_at, traceparent
		FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::int[], $6::int[], $7::timestamptz[],
			$8::bigint[], $9::bigint[], $10::text[], $11::text[], $12::int[], $13::text[], $14::timestamptz[],
			$15::timestamptz[], $16::timestamptz[], $17::text[]) WITH ORDINALITY AS c(execution_id, graph_key, node,
			state, attempt, max_attempts, run_at, abandon_after_ms, heartbeat_timeout_ms, computed_with,
			concurrency_key, max_parallel, error, created_at, finished_at, available_at, traceparent, ord)
		ORDER BY ord
	), revised AS (
		UPDATE {s}.executions e
		SET revision = r.revision,
			updated_at = CASE WHEN r.revision <> e.revision THEN coalesce($18::timestamptz, now()) ELSE e.updated_at END,
			wake_at = CASE WHEN r.set_wake THEN nullif(r.wake_at, '')::timestamptz ELSE e.wake_at END
		FROM unnest($19::text[], $20::bigint[], $21::text[], $22::boolean[]) AS r(id, revision, wake_at, set_wake)
		WHERE e.id = r.id
	)
	SELECT`

// createdColumns returns the columns of the attempts that sts created, as finishQuery's first 17
// arguments, and their number.
func createdColumns(sts []*execState) ([]any, int) {
	var cs []*Computation
	for _, st := range sts {
		cs = append(cs, st.created...)
	}
	var ids, keys, nodes, states, sigs []string
	var attempts, maxAttempts []int
	var runAts, createdAts []time.Time
	var abandons, beats []int64
	var ckeys, errs []*string
	var maxParallels []*int
	var finishedAts, availableAts []*time.Time
	var traceparents []*string
	for _, c := range cs {
		ids, keys, nodes, states = append(ids, c.ExecutionID), append(keys, c.GraphKey), append(nodes, c.Node), append(states, c.State)
		attempts, maxAttempts, runAts = append(attempts, c.Attempt), append(maxAttempts, c.MaxAttempts), append(runAts, c.RunAt)
		abandons, beats, sigs = append(abandons, c.AbandonAfterMS), append(beats, c.HeartbeatTimeoutMS), append(sigs, c.ComputedWith)
		ckeys, maxParallels, errs = append(ckeys, c.ConcurrencyKey), append(maxParallels, c.MaxParallel), append(errs, c.Error)
		createdAts, finishedAts = append(createdAts, c.CreatedAt), append(finishedAts, c.FinishedAt)
		availableAts, traceparents = append(availableAts, c.AvailableAt), append(traceparents, c.Traceparent)
	}
	return []any{ids, keys, nodes, states, attempts, maxAttempts, runAts, abandons, beats, sigs, ckeys, maxParallels,
		errs, createdAts, finishedAts, availableAts, traceparents}, len(cs)
}

// maxPayload is the longest NOTIFY payload sent: PostgreSQL's limit is 8000 bytes.
const maxPayload = 7900

// payloads returns the NOTIFY payloads of a write: that work is available if work is set, and
// the changes, in as few payloads as their size allows. A change is an execution id, followed by
// @ and its new revision when it has one.
func (s *Store) payloads(work bool, changed []string) []string {
	var payloads []string
	if work {
		payloads = append(payloads, PayloadWork)
	}
	var p strings.Builder
	for len(changed) > 0 {
		p.Reset()
		p.WriteString(PayloadExecution)
		p.WriteString(changed[0])
		changed = changed[1:]
		for len(changed) > 0 && p.Len()+1+len(changed[0]) <= maxPayload {
			p.WriteByte(',')
			p.WriteString(changed[0])
			changed = changed[1:]
		}
		payloads = append(payloads, p.String())
	}
	return payloads
}

// fireSaved hands the OnSave events of a committed transaction to the runtime.
func (s *Store) fireSaved(st *execState) {
	if s.onSave == nil || st == nil {
		return
	}
	for _, e := range st.saved {
		s.onSave(st.g, e)
	}
}
