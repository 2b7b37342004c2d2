package persistence

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/uptrace/bun"

	"github.com/journey-go/journey/persistence/machine"
)

// write runs fn on execution id, locked and loaded, with the plan of its write (machine.Begin), in a
// transaction that then applies the plan (finish); after the commit, it does what the plan leaves
// for then (afterCommit). before, if not nil, runs first in the same transaction, ahead of the
// lock. If fn returns an error, nothing is written; machine.ErrNothingToDo says that there was
// nothing to write.
func (s *Store) write(ctx context.Context, id string, before func(ctx context.Context, tx bun.IDB) error,
	fn func(ctx context.Context, t *txn, p *machine.Plan, env machine.Env) error) error {
	if err := CheckText("execution id", id); err != nil {
		return err
	}
	return s.inTxn(ctx, s.db, func(ctx context.Context, t *txn) error {
		if before != nil {
			if err := t.begin(ctx); err != nil {
				return err
			}
			if err := before(ctx, t); err != nil {
				return err
			}
		}
		xs, now, err := s.load(ctx, t, []string{id}, nil, nil)
		if err != nil {
			return err
		}
		env := s.env(ctx, now, xs[0].GraphKey)
		p := machine.Begin(xs[0], env)
		if err := fn(ctx, t, p, env); err != nil {
			return err
		}
		s.mark(t, xs)
		return s.finish(ctx, t, []*machine.Plan{p}, false)
	})
}

// event runs ev on execution id (see write).
func (s *Store) event(ctx context.Context, id string, before func(ctx context.Context, tx bun.IDB) error, ev machine.Event) error {
	return s.write(ctx, id, before, func(_ context.Context, _ *txn, p *machine.Plan, env machine.Env) error { return p.Step(ev, env) })
}

// afterCommit follows the commit of t, whose plans were ps: it logs what the rules asked, fires the
// OnSave events, promotes what the write could not because the promotion lock was busy, wakes the
// map nodes whose children have all ended, and carries the plans' cascades to the children. A
// failure of the last two is logged: the sweep does what they could not (see Store.repair).
func (s *Store) afterCommit(ctx context.Context, t *txn) {
	for _, p := range t.plans {
		for _, w := range p.Warnings() {
			s.logger.Error(w.Msg, w.Args...)
		}
		s.fireSaved(p)
	}
	if t.promoteLater {
		s.promoteAfterCommit(ctx)
	}
	s.advanceDeferred(ctx, t.deferred)
	for _, m := range t.wakes {
		if err := s.wake(ctx, m); err != nil {
			s.logger.Warn("waking a map node whose children have ended failed; the sweep wakes it", "execution_id", m.ID,
				"node", m.Node, "error", err)
		}
	}
	for _, p := range t.plans {
		if c := p.Cascade(); c.Any() {
			if _, err := s.cascade(ctx, p.Exec().ID, c); err != nil {
				s.logger.Warn("carrying a change of a parent to its children failed; the sweep carries it", "execution_id",
					p.Exec().ID, "error", err)
			}
		}
	}
}

// finish applies the plans ps of t: it claims for this replica what they made ready, if claims is
// set and its dispatcher has room, and queues the statements that claim their events, write their
// node rows, the values and attempts they replaced, their executions' cold columns and their
// children's ends, and the notifications. The statements go with the COMMIT, one per table for
// all of ps: a write is one trip to load, one to write. Gated work that the plans made due, or
// whose slot they freed, is promoted by the dispatchers, woken by the write's NOTIFY
// (PayloadPromote); but a batch of outcomes (t.promoteHere), whose ends free slots that the next
// attempts wait for, promotes in its own transaction, after its node rows, which the promotion
// reads. The caller commits, and afterCommit follows.
func (s *Store) finish(ctx context.Context, t *txn, ps []*machine.Plan, claims bool) error {
	promote := false
	for _, p := range ps {
		if claims {
			s.claimLocally(t, p)
		}
		promote = promote || p.Promote()
	}
	t.plans = append(t.plans, ps...)
	t.tail = append(t.tail, s.applySteps(t, ps)...)
	if promote && (t.caller || !t.promoteHere) {
		t.notes = append(t.notes, PayloadPromote) // a dispatcher promotes, once it has committed
	}
	work := false
	var changed []string
	for _, p := range ps {
		work = work || p.Work() || p.LeftAvailable()
		if p.Canceled() {
			t.notes = append(t.notes, PayloadCancel+p.Exec().ID)
		}
		switch {
		case p.Changed() && p.Revision() != p.Loaded().Exec.Revision:
			changed = append(changed, p.Exec().ID+"@"+strconv.FormatInt(p.Revision(), 10))
			if s.handoff != nil && !t.caller {
				t.handing = append(t.handing, p)
			}
		case p.Changed():
			changed = append(changed, p.Exec().ID)
		}
	}
	t.notes = append(t.notes, s.payloads(work, changed)...)
	return nil
}

// applySteps are the statements that write what the plans ps changed: their node rows, inserted
// and updated, the values and attempts they replaced, their executions' cold columns, the events
// they claim and the children's ends they count. A part with nothing to write sends nothing.
func (s *Store) applySteps(t *txn, ps []*machine.Plan) []step {
	var ins, upd, outcome nodeWrites
	var hist historyWrites
	var superseded []*Computation
	var cold coldWrites
	var events eventWrites
	var ends endWrites
	// The rows to insert, to write an outcome to, and to update, gathered first so that each
	// kind's columns are made at their size at once.
	type nodeWrite struct {
		p *machine.Plan
		w machine.NodeWrite
	}
	var rows [3][]nodeWrite
	for _, p := range ps {
		for _, w := range p.Writes() {
			kind := 2
			switch {
			case w.Insert:
				kind = 0
			case w.Outcome:
				kind = 1
			}
			rows[kind] = append(rows[kind], nodeWrite{p, w})
		}
		for _, h := range p.History() {
			hist.add(p, h)
		}
		superseded = append(superseded, p.Superseded()...)
		if p.Cold() {
			cold.add(p)
		}
		for _, e := range p.Events() {
			events.add(p, e)
		}
		if d := p.EndDelta(); d != 0 {
			ends.add(p.Exec().Parent, d)
		}
	}
	for kind, w := range [...]*nodeWrites{&ins, &outcome, &upd} {
		w.reserve(len(rows[kind]))
		for _, r := range rows[kind] {
			w.add(r.p, r.w)
		}
	}
	var steps []step
	if len(ins.ids) > 0 {
		steps = append(steps, s.nodeStep(s.q(nodeInsertQuery), &ins))
	}
	if len(upd.ids) > 0 {
		steps = append(steps, s.nodeStep(s.form(nodeUpdateQuery), &upd))
	}
	if len(outcome.ids) > 0 {
		st := s.nodeStep(s.form(nodeOutcomeQuery), &outcome)
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
	if len(ends.parents) > 0 {
		steps = append(steps, s.endsStep(t, &ends))
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
	plans                                  []*machine.Plan // the plan of each row, for what the statement returns
}

// reserve makes room for n rows, in an allocation a column type: the columns of one type share
// one array, each with a capacity of n. A write of one outcome made 33 arrays one by one.
func (w *nodeWrites) reserve(n int) {
	if n == 0 {
		return
	}
	w.claimHere, w.plans = make(column[pgtype.Bool], 0, n), make([]*machine.Plan, 0, n)
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

// add adds the row nw of plan p.
func (w *nodeWrites) add(p *machine.Plan, nw machine.NodeWrite) {
	e := p.Exec()
	w.lanes, w.ids, w.nodes = append(w.lanes, pgInt(int64(e.Lane))), append(w.ids, pgText(e.ID)), append(w.nodes, pgText(nw.Node))
	w.keys = append(w.keys, pgText(p.GraphKey()))
	w.revs, w.changedAts = append(w.revs, pgInt(nw.Rev)), append(w.changedAts, pgTime(p.Now()))
	w.plans = append(w.plans, p)
	if v := nw.Value; v != nil {
		meta := pgtype.Text{String: string(v.Metadata), Valid: len(v.Metadata) > 0}
		w.values, w.metas = append(w.values, pgText(string(v.Raw))), append(w.metas, meta)
		w.valueRevs, w.setAts = append(w.valueRevs, pgInt(v.Revision)), append(w.setAts, pgTime(v.SetAt))
	} else {
		w.values, w.metas = append(w.values, pgtype.Text{}), append(w.metas, pgtype.Text{})
		w.valueRevs, w.setAts = append(w.valueRevs, pgtype.Int8{}), append(w.setAts, pgtype.Timestamptz{})
	}
	w.hseqs = append(w.hseqs, pgInt(nw.Hseq))
	c := nw.Attempt
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
	w.claimHere = append(w.claimHere, pgtype.Bool{Bool: nw.Claimed, Valid: true})
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

// nodeStep is the statement query of the node writes w, which reads back, into the plans, the
// values as PostgreSQL keeps them (the same JSON, spelled its own way) and the claims' times.
func (s *Store) nodeStep(query string, w *nodeWrites) step {
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
		byID := make(map[string]*machine.Plan, len(w.plans))
		for _, p := range w.plans {
			byID[p.Exec().ID] = p
		}
		for _, r := range got {
			p := byID[r.ExecutionID]
			p.SetStored(r.Node, r.Value)
			if c := p.Latest(r.Node); c != nil && slices.Contains(p.Claimed(), c) {
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

func (w *historyWrites) add(p *machine.Plan, h machine.HistoryRow) {
	var value, meta *string
	if h.Value != nil {
		v := string(h.Value)
		value = &v
	}
	if len(h.Metadata) > 0 {
		m := string(h.Metadata)
		meta = &m
	}
	w.lanes, w.ids, w.nodes = append(w.lanes, p.Exec().Lane), append(w.ids, p.Exec().ID), append(w.nodes, h.Node)
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

// coldWrites are the executions rows to write: archived_at, failure_phase, wake_at, canceled_at,
// paused_at and ended_at, and the revision of a change that no node row carries (archiving).
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
	ended    []*time.Time
}

func (w *coldWrites) add(p *machine.Plan) {
	e := p.Exec()
	w.lanes, w.ids, w.revs = append(w.lanes, e.Lane), append(w.ids, e.ID), append(w.revs, p.Revision())
	w.archived, w.phases, w.wakes = append(w.archived, e.ArchivedAt), append(w.phases, e.FailurePhase), append(w.wakes, p.Wake())
	w.canceled, w.reasons = append(w.canceled, e.CanceledAt), append(w.reasons, e.CancelReason)
	w.paused, w.ended = append(w.paused, e.PausedAt), append(w.ended, e.EndedAt)
}

func (w *coldWrites) args(now any) []any {
	return []any{w.lanes, w.ids, w.revs, w.archived, w.phases, w.wakes, now, w.canceled, w.reasons, w.paused, w.ended}
}

// coldUpdateQuery writes the executions' cold columns.
var coldUpdateQuery = pinLanes(`UPDATE {s}.executions e
	SET revision = r.revision, updated_at = coalesce($7::timestamptz, now()), archived_at = r.archived_at,
		failure_phase = r.failure_phase, wake_at = r.wake_at, canceled_at = r.canceled_at, cancel_reason = r.cancel_reason,
		paused_at = r.paused_at, ended_at = r.ended_at
	FROM unnest($1::smallint[], $2::text[], $3::bigint[], $4::timestamptz[], $5::int[], $6::timestamptz[], $8::timestamptz[], $9::text[],
			$10::timestamptz[], $11::timestamptz[])
		AS r(lane, id, revision, archived_at, failure_phase, wake_at, canceled_at, cancel_reason, paused_at, ended_at)
	WHERE e.lane = r.lane AND e.id = r.id{pin}`, "e")

// eventWrites are the event claims to write.
type eventWrites struct {
	lanes                          []int16
	ids, events, keys, failedNodes []string
	phases                         []int
	at                             []time.Time
}

func (w *eventWrites) add(p *machine.Plan, e machine.EventClaim) {
	key := fmt.Sprintf("%s:%s:%d", p.Exec().ID, e.Event, e.Phase)
	w.lanes, w.ids, w.events = append(w.lanes, p.Exec().Lane), append(w.ids, p.Exec().ID), append(w.events, e.Event)
	w.keys = append(w.keys, key)
	w.failedNodes, w.phases, w.at = append(w.failedNodes, e.FailedNodes), append(w.phases, e.Phase), append(w.at, p.Now())
}

// eventsStep is the statement that claims the events of w, each once per phase whichever
// replicas race, and writes the deliveries of those it claims to the outbox: one per target that
// any replica lists for the event in replica_heartbeats, or that this one can make. If it queued
// any, the write announces them (PayloadNotice) once committed.
func (s *Store) eventsStep(t *txn, w *eventWrites) step {
	args := []any{w.lanes, w.ids, w.events, w.phases, w.keys, w.at, w.failedNodes, s.routes}
	return step{s.q(eventsQuery), args,
		func(br pgx.BatchResults) error {
			var queued int
			if err := br.QueryRow().Scan(&queued); err != nil {
				return fmt.Errorf("claiming %d event(s): %w", len(w.ids), err)
			}
			if queued > 0 {
				t.notes = append(t.notes, PayloadNotice)
			}
			return nil
		}}
}

// eventsQuery claims events, each once per phase whichever replicas race, and writes the
// deliveries of those it claims to the outbox: one per target that any replica lists for the
// event in replica_heartbeats, or that this one can make. It returns how many deliveries it
// queued.
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
			RETURNING 1)
		SELECT count(*) FROM d`

// endWrites are the changes in the count of the ended children of map nodes that the plans of a
// write make (machine.Plan.EndDelta): each child's, with its parent's map node and generation.
type endWrites struct {
	parents, nodes []string
	lanes          []int16
	gens           []int64
	deltas         []int
}

func (w *endWrites) add(p *machine.Parent, delta int) {
	w.parents, w.nodes, w.lanes = append(w.parents, p.ID), append(w.nodes, p.Node), append(w.lanes, LaneOf(p.ID))
	w.gens, w.deltas = append(w.gens, p.Gen), append(w.deltas, delta)
}

// endsStep is the statement that counts the children's ends of w in their map nodes' progress,
// in the transaction of the children's changes: a generation that the node has left behind
// (computed again since) counts nothing. Each map node whose children have then all ended is woken
// once the write has committed (see wake): the child's transaction holds its own execution's lock,
// then the progress row's, and never its parent's, which the node's writers hold. The parents'
// lanes are named, for Citus to send the updates to their shards alone.
func (s *Store) endsStep(t *txn, w *endWrites) step {
	return step{s.q(`UPDATE {s}.map_progress m SET done = m.done + d.delta
		FROM (SELECT lane, parent, node, gen, sum(delta) AS delta
			FROM unnest($1::smallint[], $2::text[], $3::text[], $4::bigint[], $5::int[]) AS d(lane, parent, node, gen, delta)
			GROUP BY lane, parent, node, gen) d
		WHERE m.lane = ANY($1::smallint[]) AND m.lane = d.lane AND m.execution_id = d.parent AND m.node = d.node AND m.gen = d.gen
		RETURNING m.execution_id, m.node, m.done >= m.total AS full`), []any{w.lanes, w.parents, w.nodes, w.gens, w.deltas},
		func(br pgx.BatchResults) error {
			rows, err := br.Query()
			if err != nil {
				return fmt.Errorf("counting the ends of %d child(ren): %w", len(w.parents), err)
			}
			counted, err := scanAll[mapRef](rows)
			if err != nil {
				return fmt.Errorf("counting the ends of %d child(ren): %w", len(w.parents), err)
			}
			for _, m := range counted {
				if m.Full {
					t.wakes = append(t.wakes, *m)
				}
			}
			return nil
		}}
}

// mapRef is a map node of an execution, as endsStep reads it back.
type mapRef struct {
	ID   string `db:"execution_id" bun:"execution_id"`
	Node string `db:"node" bun:"node"`
	Full bool   `db:"full" bun:"full"`
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

// fireSaved hands the OnSave events of a committed plan to the runtime.
func (s *Store) fireSaved(p *machine.Plan) {
	if s.onSave == nil {
		return
	}
	for _, e := range p.Saved() {
		s.onSave(p.Graph(), e)
	}
}
