package persistence

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/uptrace/bun"
)

// errNothingToDo rolls back a transaction that found its work done by someone else.
var errNothingToDo = errors.New("nothing to do")

// write runs fn on execution id, locked and loaded, in a transaction that then applies what fn
// changed (finish); after the commit it fires the OnSave events. before, if not nil, runs first
// in the same transaction, ahead of the lock.
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

// committed follows the commit of a write: it logs what the rules asked, fires the OnSave
// events, and promotes what the write could not because the promotion lock was busy.
func (s *Store) committed(ctx context.Context, sts []*execState) {
	later := false
	for _, st := range sts {
		for _, w := range st.warnings {
			s.logger.Error(w.msg, w.args...)
		}
		s.fireSaved(st)
		later = later || st.promoteLater
	}
	if later {
		s.promoteAfterCommit(ctx)
	}
}

// finish applies what the writes of sts changed: it claims for this replica what they made
// ready, as far as its dispatcher has room, claims their events, writes their node rows, the
// values and attempts they replaced, and their executions' cold columns, promotes what they made
// due, and queues the notifications. The statements go with the COMMIT, one per table for all of
// sts, but for a write that promotes gated work, whose node rows go first: the promotion reads
// them. The caller commits and then calls committed.
func (s *Store) finish(ctx context.Context, t *txn, sts []*execState) error {
	promote := false
	for _, st := range sts {
		s.claimLocally(t, st)
		st.claimCompletion()
		promote = promote || st.promote
	}
	steps := s.applySteps(t, sts)
	work := false
	if promote && t.caller {
		t.notes = append(t.notes, PayloadPromote) // see inCaller
		promote = false
	}
	if promote {
		if err := t.send(ctx, steps...); err != nil {
			return err
		}
		steps = nil
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
			if s.handoff != nil && !t.caller {
				t.handing = append(t.handing, st)
			}
		case st.changed:
			changed = append(changed, st.exec.ID)
		}
	}
	t.notes = append(t.notes, s.payloads(work, changed)...)
	t.tail = append(t.tail, steps...)
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

// applySteps are the statements that write what the writes of sts changed: their node rows,
// inserted and updated, the values and attempts they replaced, their executions' cold columns,
// and the events they claim. A part with nothing to write sends nothing.
func (s *Store) applySteps(t *txn, sts []*execState) []step {
	var ins, upd, outcome nodeWrites
	var hist historyWrites
	var superseded []*Computation
	var cold coldWrites
	var events eventWrites
	// The rows to insert, to write an outcome to, and to update, gathered first so that each
	// kind's columns are made at their size at once.
	type nodeWrite struct {
		st   *execState
		node string
		rev  int64
	}
	var rows [3][]nodeWrite
	for _, st := range sts {
		top := st.exec.Revision // the greatest revision a row carries
		for _, node := range st.changedNodes() {
			m := st.marks[node]
			top = max(top, m.rev)
			kind := 2
			switch {
			case m.row == nil:
				kind = 0
			case st.keepsAttempt(node):
				kind = 1
			}
			rows[kind] = append(rows[kind], nodeWrite{st, node, m.rev})
		}
		for _, h := range st.history {
			hist.add(st, h)
		}
		superseded = append(superseded, st.superseded...)
		wake := st.nextWake()
		if st.cold || st.revision > top || !sameTime(wake, st.exec.WakeAt) {
			cold.add(st, wake)
		}
		for _, e := range st.events {
			events.add(st, e)
		}
	}
	for kind, w := range [...]*nodeWrites{&ins, &outcome, &upd} {
		w.reserve(len(rows[kind]))
		for _, r := range rows[kind] {
			w.add(r.st, r.node, r.rev)
		}
	}
	var steps []step
	if len(ins.ids) > 0 {
		steps = append(steps, s.nodeStep(s.q(nodeInsertQuery), &ins, sts))
	}
	if len(upd.ids) > 0 {
		steps = append(steps, s.nodeStep(s.form(nodeUpdateQuery), &upd, sts))
	}
	if len(outcome.ids) > 0 {
		st := s.nodeStep(s.form(nodeOutcomeQuery), &outcome, sts)
		st.args = outcome.outcomeArgs()
		steps = append(steps, st)
	}
	if len(hist.ids) > 0 {
		steps = append(steps, step{s.q(historyInsertQuery), hist.args(), nil})
	}
	if len(superseded) > 0 {
		steps = append(steps, step{s.q(attemptsInsertQuery), attemptColumnsOf(superseded), nil})
	}
	if len(cold.ids) > 0 {
		steps = append(steps, step{s.form(coldUpdateQuery), cold.args(s.clock.NowOrNil()), nil})
	}
	if len(events.ids) > 0 {
		steps = append(steps, s.eventsStep(t, &events))
	}
	return steps
}

// nodeWrites are node rows to write, as the columns of nodeInsertQuery and nodeUpdateQuery: made
// as the arrays pgx encodes (see column), and handed to it by pointer, so that neither a column
// nor its boxing into an argument allocates again as the write is sent.
type nodeWrites struct {
	lanes, revs, hseqs                     column[pgtype.Int8]
	ids, nodes, keys                       column[pgtype.Text]
	changedAts                             column[pgtype.Timestamptz]
	values, metas                          column[pgtype.Text]
	valueRevs                              column[pgtype.Int8]
	setAts                                 column[pgtype.Timestamptz]
	attemptIDs                             column[pgtype.Int8]
	states                                 column[pgtype.Text]
	attempts, maxAttempts                  column[pgtype.Int8]
	replicas, tokens                       column[pgtype.Text]
	runAts, claimedAts, deadlines, beatDLs column[pgtype.Timestamptz]
	lastBeats                              column[pgtype.Timestamptz]
	abandons, beats                        column[pgtype.Int8]
	sigs, errs, ckeys                      column[pgtype.Text]
	maxParallels                           column[pgtype.Int8]
	createdAts, finishedAts, availableAts  column[pgtype.Timestamptz]
	traceparents, rateKeys                 column[pgtype.Text]
	claimHere                              column[pgtype.Bool]
	states_                                []*execState // the state of each row, for what the statement returns
}

// reserve makes room for n rows, in an allocation a column type: the columns of one type share
// one array, each with a capacity of n. A write of one outcome made 33 arrays one by one.
func (w *nodeWrites) reserve(n int) {
	if n == 0 {
		return
	}
	w.claimHere, w.states_ = make(column[pgtype.Bool], 0, n), make([]*execState, 0, n)
	share(n, &w.lanes, &w.revs, &w.hseqs, &w.valueRevs, &w.attemptIDs, &w.attempts, &w.maxAttempts, &w.abandons, &w.beats,
		&w.maxParallels)
	share(n, &w.ids, &w.nodes, &w.keys, &w.values, &w.metas, &w.states, &w.replicas, &w.tokens, &w.sigs, &w.errs, &w.ckeys,
		&w.traceparents, &w.rateKeys)
	share(n, &w.changedAts, &w.setAts, &w.runAts, &w.claimedAts, &w.deadlines, &w.beatDLs, &w.lastBeats, &w.createdAts,
		&w.finishedAts, &w.availableAts)
}

// share makes each of columns an empty slice of capacity n, all in one array.
func share[T any](n int, columns ...*column[T]) {
	all := make(column[T], n*len(columns))
	for i, c := range columns {
		*c = all[i*n : i*n : (i+1)*n]
	}
}

// add adds node of st, whose row changed last at revision rev.
func (w *nodeWrites) add(st *execState, node string, rev int64) {
	w.lanes, w.ids, w.nodes = append(w.lanes, pgInt(int64(st.exec.Lane))), append(w.ids, pgText(st.exec.ID)), append(w.nodes, pgText(node))
	w.keys = append(w.keys, pgText(st.graphKey()))
	w.revs, w.changedAts = append(w.revs, pgInt(rev)), append(w.changedAts, pgTime(st.now))
	w.states_ = append(w.states_, st)
	if v, ok := st.values[node]; ok {
		meta := pgtype.Text{String: string(v.Metadata), Valid: len(v.Metadata) > 0}
		w.values, w.metas = append(w.values, pgText(string(v.Raw))), append(w.metas, meta)
		w.valueRevs, w.setAts = append(w.valueRevs, pgInt(v.Revision)), append(w.setAts, pgTime(v.SetAt))
	} else {
		w.values, w.metas = append(w.values, pgtype.Text{}), append(w.metas, pgtype.Text{})
		w.valueRevs, w.setAts = append(w.valueRevs, pgtype.Int8{}), append(w.setAts, pgtype.Timestamptz{})
	}
	w.hseqs = append(w.hseqs, pgInt(st.marks[node].hseq))
	c := st.latest[node]
	if c == nil {
		var text pgtype.Text
		var n pgtype.Int8
		var t pgtype.Timestamptz
		w.attemptIDs, w.states, w.attempts, w.maxAttempts = append(w.attemptIDs, n), append(w.states, text), append(w.attempts, n), append(w.maxAttempts, n)
		w.replicas, w.tokens, w.runAts, w.claimedAts = append(w.replicas, text), append(w.tokens, text), append(w.runAts, t), append(w.claimedAts, t)
		w.deadlines, w.beatDLs, w.lastBeats = append(w.deadlines, t), append(w.beatDLs, t), append(w.lastBeats, t)
		w.abandons, w.beats, w.sigs, w.errs = append(w.abandons, n), append(w.beats, n), append(w.sigs, text), append(w.errs, text)
		w.ckeys, w.maxParallels, w.createdAts = append(w.ckeys, text), append(w.maxParallels, n), append(w.createdAts, t)
		w.finishedAts, w.availableAts, w.traceparents = append(w.finishedAts, t), append(w.availableAts, t), append(w.traceparents, text)
		w.rateKeys = append(w.rateKeys, text)
		w.claimHere = append(w.claimHere, pgtype.Bool{Bool: false, Valid: true})
		return
	}
	w.attemptIDs, w.states = append(w.attemptIDs, pgInt(c.ID)), append(w.states, pgText(c.State))
	w.attempts, w.maxAttempts = append(w.attempts, pgInt(int64(c.Attempt))), append(w.maxAttempts, pgInt(int64(c.MaxAttempts)))
	w.replicas, w.tokens, w.runAts, w.claimedAts = append(w.replicas, pgTextAt(c.ReplicaID)), append(w.tokens, pgTextAt(c.ClaimToken)), append(w.runAts, pgTime(c.RunAt)), append(w.claimedAts, pgTimeAt(c.ClaimedAt))
	w.deadlines, w.beatDLs, w.lastBeats = append(w.deadlines, pgTimeAt(c.Deadline)), append(w.beatDLs, pgTimeAt(c.HeartbeatDeadline)), append(w.lastBeats, pgTimeAt(c.LastHeartbeatAt))
	w.abandons, w.beats, w.sigs, w.errs = append(w.abandons, pgInt(c.AbandonAfterMS)), append(w.beats, pgInt(c.HeartbeatTimeoutMS)), append(w.sigs, pgText(c.ComputedWith)), append(w.errs, pgTextAt(c.Error))
	w.ckeys, w.maxParallels, w.createdAts = append(w.ckeys, pgTextAt(c.ConcurrencyKey)), append(w.maxParallels, pgIntOf(c.MaxParallel)), append(w.createdAts, pgTime(c.CreatedAt))
	w.finishedAts, w.availableAts, w.traceparents = append(w.finishedAts, pgTimeAt(c.FinishedAt)), append(w.availableAts, pgTimeAt(c.AvailableAt)), append(w.traceparents, pgTextAt(c.Traceparent))
	w.rateKeys = append(w.rateKeys, pgTextAt(c.RateKey))
	w.claimHere = append(w.claimHere, pgtype.Bool{Bool: slices.Contains(st.claimed, c), Valid: true})
}

// args are the arguments of nodeInsertQuery and nodeUpdateQuery, at time now (nil: the
// statement's).
func (w *nodeWrites) args(now any) []any {
	return []any{&w.lanes, &w.ids, &w.nodes, &w.keys, &w.revs, &w.changedAts, &w.values, &w.metas, &w.valueRevs, &w.setAts,
		&w.hseqs, &w.attemptIDs, &w.states, &w.attempts, &w.maxAttempts, &w.replicas, &w.tokens, &w.runAts, &w.claimedAts,
		&w.deadlines, &w.beatDLs, &w.lastBeats, &w.abandons, &w.beats, &w.sigs, &w.errs, &w.ckeys, &w.maxParallels,
		&w.createdAts, &w.finishedAts, &w.availableAts, &w.traceparents, &w.rateKeys, &w.claimHere, now}
}

// outcomeArgs are the arguments of nodeOutcomeQuery.
func (w *nodeWrites) outcomeArgs() []any {
	return []any{&w.lanes, &w.ids, &w.nodes, &w.revs, &w.changedAts, &w.values, &w.metas, &w.valueRevs, &w.setAts, &w.hseqs,
		&w.states, &w.sigs, &w.errs, &w.finishedAts}
}

// nodeRows is the rows of the node writes $1 to $34, at the time $35: an attempt claimed here
// (claim_here) is stamped, with its deadlines, at the time of the statement, which goes with the
// COMMIT, once the write holds its executions' locks (statement_timestamp(), not now(): the
// transaction began before it waited for them). A write that waited longer than a heartbeat
// timeout would otherwise commit its attempts already past their heartbeat deadline.
const nodeRows = `SELECT r.lane, r.execution_id, r.node, r.graph_key, r.rev, r.changed_at, r.value::jsonb, r.metadata::jsonb,
		r.value_rev, r.set_at, r.hseq, r.attempt_id, r.state, r.attempt, r.max_attempts, r.replica_id, r.claim_token::uuid,
		r.run_at,
		CASE WHEN r.claim_here THEN t.at ELSE r.claimed_at END AS claimed_at,
		CASE WHEN r.claim_here THEN t.at + r.abandon_after_ms * interval '1 millisecond' ELSE r.deadline END AS deadline,
		CASE WHEN r.claim_here THEN t.at + r.heartbeat_timeout_ms * interval '1 millisecond' ELSE r.heartbeat_deadline END
			AS heartbeat_deadline,
		CASE WHEN r.claim_here THEN t.at ELSE r.last_heartbeat_at END AS last_heartbeat_at,
		r.abandon_after_ms, r.heartbeat_timeout_ms, r.computed_with::jsonb, r.error, r.concurrency_key, r.max_parallel,
		r.created_at, r.finished_at, r.available_at, r.traceparent, r.rate_key
	FROM unnest($1::smallint[], $2::text[], $3::text[], $4::text[], $5::bigint[], $6::timestamptz[], $7::text[], $8::text[],
			$9::bigint[], $10::timestamptz[], $11::bigint[], $12::bigint[], $13::text[], $14::int[], $15::int[], $16::text[],
			$17::text[], $18::timestamptz[], $19::timestamptz[], $20::timestamptz[], $21::timestamptz[], $22::timestamptz[],
			$23::bigint[], $24::bigint[], $25::text[], $26::text[], $27::text[], $28::int[], $29::timestamptz[],
			$30::timestamptz[], $31::timestamptz[], $32::text[], $33::text[], $34::boolean[])
		AS r(lane, execution_id, node, graph_key, rev, changed_at, value, metadata, value_rev, set_at, hseq, attempt_id, state,
			attempt, max_attempts, replica_id, claim_token, run_at, claimed_at, deadline, heartbeat_deadline,
			last_heartbeat_at, abandon_after_ms, heartbeat_timeout_ms, computed_with, error, concurrency_key, max_parallel,
			created_at, finished_at, available_at, traceparent, rate_key, claim_here),
		(SELECT coalesce($35::timestamptz, statement_timestamp()) AS at) t`

// nodeReturning is what the node writes return: the values as PostgreSQL keeps them, and the
// claims' times.
const nodeReturning = ` RETURNING n.execution_id, n.node, n.value, n.claimed_at, n.deadline, n.heartbeat_deadline, n.last_heartbeat_at`

// nodeInsertQuery inserts the node rows that the writes make.
var nodeInsertQuery = `INSERT INTO {s}.nodes AS n (` + strings.Join(nodeColumns, ", ") + `) ` + nodeRows + nodeReturning

// nodeUpdateQuery updates the node rows that the writes change. A row whose attempt runs under the
// same claim after the write (its value changed, say) keeps the heartbeats that reached it
// meanwhile: the write loaded it before them.
var nodeUpdateQuery = pinLanes(`UPDATE {s}.nodes n SET `+nodeSet+` FROM (`+nodeRows+`) r
	WHERE n.lane = r.lane AND n.execution_id = r.execution_id AND n.node = r.node{pin}`+nodeReturning, "n")

// nodeOutcomeQuery updates the node rows whose attempt stays the one loaded, claimed as it was
// (see keepsAttempt): their value, and their attempt's outcome. It sends 14 arrays where
// nodeUpdateQuery sends 33, and PostgreSQL unnests each into a store of its own: in a drain, the
// completions' UPDATE took 25 µs a row, 11 of them unnesting the arrays nothing changed. The
// heartbeat columns are left as they are: a heartbeat may have extended them since the load.
var nodeOutcomeQuery = pinLanes(`UPDATE {s}.nodes n SET rev = r.rev, changed_at = r.changed_at, value = r.value::jsonb,
		metadata = r.metadata::jsonb, value_rev = r.value_rev, set_at = r.set_at, hseq = r.hseq, state = r.state,
		computed_with = r.computed_with::jsonb, error = r.error, finished_at = r.finished_at
	FROM unnest($1::smallint[], $2::text[], $3::text[], $4::bigint[], $5::timestamptz[], $6::text[], $7::text[], $8::bigint[],
			$9::timestamptz[], $10::bigint[], $11::text[], $12::text[], $13::text[], $14::timestamptz[])
		AS r(lane, execution_id, node, rev, changed_at, value, metadata, value_rev, set_at, hseq, state, computed_with, error,
			finished_at)
	WHERE n.lane = r.lane AND n.execution_id = r.execution_id AND n.node = r.node{pin}`+nodeReturning, "n")

// nodeSet sets every column of a node row to r's, but its key.
var nodeSet = func() string {
	var b strings.Builder
	for _, c := range nodeColumns {
		switch c {
		case "lane", "execution_id", "node":
			continue
		case "heartbeat_deadline", "last_heartbeat_at":
			fmt.Fprintf(&b, "%s = CASE WHEN n.state = 'RUNNING' AND r.state = 'RUNNING' AND n.claim_token = r.claim_token "+
				"THEN n.%s ELSE r.%s END, ", c, c, c)
		default:
			fmt.Fprintf(&b, "%s = r.%s, ", c, c)
		}
	}
	return strings.TrimSuffix(b.String(), ", ")
}()

// nodeStep is the statement query of the node writes w, which reads back, into the states, the
// values as PostgreSQL keeps them (the same JSON, spelled its own way) and the claims' times.
func (s *Store) nodeStep(query string, w *nodeWrites, sts []*execState) step {
	return step{query, w.args(s.clock.NowOrNil()), func(br pgx.BatchResults) error {
		rows, err := br.Query()
		if err != nil {
			return fmt.Errorf("writing %d node row(s): %w", len(w.ids), err)
		}
		type written struct { // its times are pgtype's, which pgx scans with no allocation each
			ExecutionID       string             `db:"execution_id"`
			Node              string             `db:"node"`
			Value             json.RawMessage    `db:"value"`
			ClaimedAt         pgtype.Timestamptz `db:"claimed_at"`
			Deadline          pgtype.Timestamptz `db:"deadline"`
			HeartbeatDeadline pgtype.Timestamptz `db:"heartbeat_deadline"`
			LastHeartbeatAt   pgtype.Timestamptz `db:"last_heartbeat_at"`
		}
		got, err := scanAll[written](rows)
		if err != nil {
			return fmt.Errorf("writing %d node row(s): %w", len(w.ids), err)
		}
		byID := make(map[string]*execState, len(sts))
		for _, st := range sts {
			byID[st.exec.ID] = st
		}
		for _, r := range got {
			st := byID[r.ExecutionID]
			if v, ok := st.values[r.Node]; ok && r.Value != nil {
				v.Raw = r.Value
				st.values[r.Node] = v
			}
			if c := st.latest[r.Node]; c != nil && slices.Contains(st.claimed, c) {
				c.ClaimedAt, c.Deadline = timeOf(&r.ClaimedAt), timeOf(&r.Deadline)
				c.HeartbeatDeadline, c.LastHeartbeatAt = timeOf(&r.HeartbeatDeadline), timeOf(&r.LastHeartbeatAt)
			}
		}
		return nil
	}}
}

// historyWrites are value_history entries to insert.
type historyWrites struct {
	lanes         []int16
	ids, nodes    []string
	values, metas []*string
	revs, hseqs   []int64
	changedAts    []time.Time
}

func (w *historyWrites) add(st *execState, h historyRow) {
	var value, meta *string
	if h.Value != nil {
		v := string(h.Value)
		value = &v
	}
	if len(h.Metadata) > 0 {
		m := string(h.Metadata)
		meta = &m
	}
	w.lanes, w.ids, w.nodes = append(w.lanes, st.exec.Lane), append(w.ids, st.exec.ID), append(w.nodes, h.Node)
	w.values, w.metas, w.revs = append(w.values, value), append(w.metas, meta), append(w.revs, h.Revision)
	w.hseqs, w.changedAts = append(w.hseqs, h.Hseq), append(w.changedAts, h.ChangedAt)
}

func (w *historyWrites) args() []any {
	return []any{w.lanes, w.ids, w.nodes, w.values, w.metas, w.revs, w.hseqs, w.changedAts}
}

// historyInsertQuery inserts the values replaced and the clearings.
const historyInsertQuery = `INSERT INTO {s}.value_history (lane, execution_id, node, value, metadata, revision, hseq, changed_at)
	SELECT lane, execution_id, node, value::jsonb, metadata::jsonb, revision, hseq, changed_at
	FROM unnest($1::smallint[], $2::text[], $3::text[], $4::text[], $5::text[], $6::bigint[], $7::bigint[], $8::timestamptz[])
		AS h(lane, execution_id, node, value, metadata, revision, hseq, changed_at)`

// attemptsInsertQuery inserts attempts that later attempts of their node replaced, with the
// columns attemptColumnsOf gives.
const attemptsInsertQuery = `INSERT INTO {s}.attempts (lane, execution_id, node, graph_key, attempt_id, state, attempt,
		max_attempts, replica_id, claim_token, run_at, claimed_at, deadline, heartbeat_deadline, last_heartbeat_at,
		abandon_after_ms, heartbeat_timeout_ms, computed_with, error, concurrency_key, max_parallel, created_at, finished_at,
		available_at, traceparent, rate_key)
	SELECT lane, execution_id, node, graph_key, attempt_id, state, attempt, max_attempts, replica_id, claim_token::uuid, run_at,
		claimed_at, deadline, heartbeat_deadline, last_heartbeat_at, abandon_after_ms, heartbeat_timeout_ms,
		computed_with::jsonb, error, concurrency_key, max_parallel, created_at, finished_at, available_at, traceparent, rate_key
	FROM unnest($1::smallint[], $2::text[], $3::text[], $4::text[], $5::bigint[], $6::text[], $7::int[], $8::int[], $9::text[],
			$10::text[], $11::timestamptz[], $12::timestamptz[], $13::timestamptz[], $14::timestamptz[], $15::timestamptz[],
			$16::bigint[], $17::bigint[], $18::text[], $19::text[], $20::text[], $21::int[], $22::timestamptz[],
			$23::timestamptz[], $24::timestamptz[], $25::text[], $26::text[])
		AS a(lane, execution_id, node, graph_key, attempt_id, state, attempt, max_attempts, replica_id, claim_token, run_at,
			claimed_at, deadline, heartbeat_deadline, last_heartbeat_at, abandon_after_ms, heartbeat_timeout_ms,
			computed_with, error, concurrency_key, max_parallel, created_at, finished_at, available_at, traceparent, rate_key)`

// attemptColumnsOf returns the columns of cs, as attemptsInsertQuery's arguments.
func attemptColumnsOf(cs []*Computation) []any {
	n := len(cs)
	lanes, ids, nodes, keys := make([]int16, n), make([]string, n), make([]string, n), make([]string, n)
	attemptIDs, states, attempts, maxAttempts := make([]int64, n), make([]string, n), make([]int, n), make([]int, n)
	replicas, tokens := make([]*string, n), make([]*string, n)
	runAts, claimedAts, deadlines, beatDLs, lastBeats := make([]time.Time, n), make([]*time.Time, n), make([]*time.Time, n), make([]*time.Time, n), make([]*time.Time, n)
	abandons, beats, sigs, errs, ckeys := make([]int64, n), make([]int64, n), make([]string, n), make([]*string, n), make([]*string, n)
	maxParallels, createdAts, finishedAts, availableAts, traceparents := make([]*int, n), make([]time.Time, n), make([]*time.Time, n), make([]*time.Time, n), make([]*string, n)
	rateKeys := make([]*string, n)
	for i, c := range cs {
		lanes[i], ids[i], nodes[i], keys[i] = c.Lane, c.ExecutionID, c.Node, c.GraphKey
		attemptIDs[i], states[i], attempts[i], maxAttempts[i] = c.ID, c.State, c.Attempt, c.MaxAttempts
		replicas[i], tokens[i] = c.ReplicaID, c.ClaimToken
		runAts[i], claimedAts[i], deadlines[i], beatDLs[i], lastBeats[i] = c.RunAt, c.ClaimedAt, c.Deadline, c.HeartbeatDeadline, c.LastHeartbeatAt
		abandons[i], beats[i], sigs[i], errs[i], ckeys[i] = c.AbandonAfterMS, c.HeartbeatTimeoutMS, cmp.Or(c.ComputedWith, "{}"), c.Error, c.ConcurrencyKey
		maxParallels[i], createdAts[i], finishedAts[i], availableAts[i], traceparents[i] = c.MaxParallel, c.CreatedAt, c.FinishedAt, c.AvailableAt, c.Traceparent
		rateKeys[i] = c.RateKey
	}
	return []any{lanes, ids, nodes, keys, attemptIDs, states, attempts, maxAttempts, replicas, tokens, runAts, claimedAts,
		deadlines, beatDLs, lastBeats, abandons, beats, sigs, errs, ckeys, maxParallels, createdAts, finishedAts, availableAts,
		traceparents, rateKeys}
}

// coldWrites are the executions rows to write: archived_at, failure_phase and wake_at, and the
// revision of a change that no node row carries (archiving).
type coldWrites struct {
	lanes    []int16
	ids      []string
	revs     []int64
	archived []*time.Time
	phases   []int
	wakes    []*time.Time
	canceled []*time.Time
	reasons  []*string
	paused   []*time.Time
}

func (w *coldWrites) add(st *execState, wake *time.Time) {
	w.lanes, w.ids, w.revs = append(w.lanes, st.exec.Lane), append(w.ids, st.exec.ID), append(w.revs, st.revision)
	w.archived, w.phases, w.wakes = append(w.archived, st.exec.ArchivedAt), append(w.phases, st.exec.FailurePhase), append(w.wakes, wake)
	w.canceled, w.reasons = append(w.canceled, st.exec.CanceledAt), append(w.reasons, st.exec.CancelReason)
	w.paused = append(w.paused, st.exec.PausedAt)
}

func (w *coldWrites) args(now any) []any {
	return []any{w.lanes, w.ids, w.revs, w.archived, w.phases, w.wakes, now, w.canceled, w.reasons, w.paused}
}

// coldUpdateQuery writes the executions' cold columns.
var coldUpdateQuery = pinLanes(`UPDATE {s}.executions e
	SET revision = r.revision, updated_at = coalesce($7::timestamptz, now()), archived_at = r.archived_at,
		failure_phase = r.failure_phase, wake_at = r.wake_at, canceled_at = r.canceled_at, cancel_reason = r.cancel_reason,
		paused_at = r.paused_at
	FROM unnest($1::smallint[], $2::text[], $3::bigint[], $4::timestamptz[], $5::int[], $6::timestamptz[], $8::timestamptz[], $9::text[],
			$10::timestamptz[])
		AS r(lane, id, revision, archived_at, failure_phase, wake_at, canceled_at, cancel_reason, paused_at)
	WHERE e.lane = r.lane AND e.id = r.id{pin}`, "e")

// eventClaim is a lifecycle event that a write claims: the failure of a phase, or the
// completion; a failure keeps the nodes that had failed, as JSON.
type eventClaim struct {
	Event       string
	Phase       int
	FailedNodes string
}

// eventWrites are the event claims to write.
type eventWrites struct {
	lanes                          []int16
	ids, events, keys, failedNodes []string
	phases                         []int
	at                             []time.Time
	// ends are the events that end a child execution (completed, failed, canceled), by their
	// idempotency keys, each with its parent's map node: a claim of one counts the child's end in
	// the node's progress (see reportsQuery).
	ends endWrites
}

// endWrites are the ends of child executions, for reportsQuery.
type endWrites struct {
	keys, parents, nodes []string
	lanes                []int16
	gens                 []int64
}

func (w *eventWrites) add(st *execState, e eventClaim) {
	key := fmt.Sprintf("%s:%s:%d", st.exec.ID, e.Event, e.Phase)
	w.lanes, w.ids, w.events = append(w.lanes, st.exec.Lane), append(w.ids, st.exec.ID), append(w.events, e.Event)
	w.keys = append(w.keys, key)
	w.failedNodes, w.phases, w.at = append(w.failedNodes, e.FailedNodes), append(w.phases, e.Phase), append(w.at, st.now)
	if p := st.exec.Parent; p != nil && (e.Event == EventCompleted || e.Event == EventFailed || e.Event == EventCanceled) {
		r := &w.ends
		r.keys, r.parents, r.nodes = append(r.keys, key), append(r.parents, p.ID), append(r.nodes, p.Node)
		r.lanes, r.gens = append(r.lanes, LaneOf(p.ID)), append(r.gens, p.Gen)
	}
}

// eventsStep is the statement that claims the events of w, each once per phase whichever
// replicas race, and writes the deliveries of those it claims to the outbox: one per target that
// any replica lists for the event in replica_heartbeats, or that this one can make. If it queued
// any, the write announces them (PayloadNotice) once committed.
func (s *Store) eventsStep(t *txn, w *eventWrites) step {
	args := []any{w.lanes, w.ids, w.events, w.phases, w.keys, w.at, w.failedNodes, s.routes}
	query := eventsQuery + eventsTail
	if len(w.ends.keys) > 0 {
		query = reportsQuery
		args = append(args, w.ends.keys, w.ends.lanes, w.ends.parents, w.ends.nodes, w.ends.gens)
	}
	return step{s.q(query), args,
		func(br pgx.BatchResults) error {
			var queued, woken int
			if err := br.QueryRow().Scan(&queued, &woken); err != nil {
				return fmt.Errorf("claiming %d event(s): %w", len(w.ids), err)
			}
			if queued > 0 {
				t.notes = append(t.notes, PayloadNotice)
			}
			if woken > 0 {
				t.notes = append(t.notes, PayloadWork)
			}
			return nil
		}}
}

// eventsQuery claims events, each once per phase whichever replicas race, and writes the
// deliveries of those it claims to the outbox: one per target that any replica lists for the
// event in replica_heartbeats, or that this one can make. It returns how many deliveries it
// queued, and 0 map nodes woken (see reportsQuery).
const eventsQuery = `WITH c AS (
			INSERT INTO {s}.notification_claims (lane, execution_id, event, phase, idempotency_key, claimed_at, failed_nodes)
			SELECT lane, execution_id, event, phase, idempotency_key, claimed_at, nullif(failed_nodes, '')::jsonb
			FROM unnest($1::smallint[], $2::text[], $3::text[], $4::int[], $5::text[], $6::timestamptz[], $7::text[])
				AS c(lane, execution_id, event, phase, idempotency_key, claimed_at, failed_nodes)
			ON CONFLICT DO NOTHING
			RETURNING lane, event, idempotency_key, claimed_at),
		d AS (INSERT INTO {s}.notification_deliveries (lane, idempotency_key, target, next_attempt_at, created_at)
			SELECT c.lane, c.idempotency_key, substr(r.route, length(c.event) + 2), c.claimed_at, c.claimed_at
			FROM c, (SELECT unnest(targets) AS route FROM {s}.replica_heartbeats UNION SELECT unnest($8::text[])) AS r
			WHERE starts_with(r.route, c.event || ' ')
			ORDER BY c.idempotency_key, r.route
			RETURNING 1)`

// eventsTail ends eventsQuery.
const eventsTail = `
		SELECT (SELECT count(*) FROM d), 0`

// reportsQuery is eventsQuery, which also counts the end of each child execution that it claims,
// once, in its parent's map node's progress ($9 to $13: the claims' keys, and the parents' lanes,
// ids, nodes and generations): a claim that another write made first counts nothing, and a child
// of a generation that the node has left behind (recomputed since) counts nothing either. The
// last end of a generation makes the node, if it waits, AVAILABLE, to collect the results; it
// returns how many it woke. The child's transaction holds its own execution's lock, then the
// progress row's, then the node row's: the node's writers, which hold the parent's lock, never
// wait for a child's. The parents' lanes are named, for Citus to send the updates to their shards
// alone.
var reportsQuery = eventsQuery + `,
		r AS (SELECT e.lane, e.parent, e.node, e.gen, count(*) AS n
			FROM c JOIN unnest($9::text[], $10::smallint[], $11::text[], $12::text[], $13::bigint[]) AS e(key, lane, parent, node, gen)
				ON e.key = c.idempotency_key
			GROUP BY e.lane, e.parent, e.node, e.gen),
		p AS (UPDATE {s}.map_progress m SET done = m.done + r.n FROM r
			WHERE m.lane = ANY($10::smallint[]) AND m.lane = r.lane AND m.execution_id = r.parent AND m.node = r.node AND m.gen = r.gen
			RETURNING m.lane, m.execution_id, m.node, m.done >= m.total AS full),
		w AS (` + wakeMaps("(SELECT coalesce(min(at), now()) AS now FROM unnest($6::timestamptz[]) AS at)", "ANY($10::smallint[])") + `)
		SELECT (SELECT count(*) FROM d), (SELECT count(*) FROM w)`

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
