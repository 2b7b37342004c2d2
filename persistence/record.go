package persistence

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/trace"

	"github.com/journey-go/journey/graph"
)

// Outcome is how one claimed attempt ended, for Record.
type Outcome struct {
	C *Computation
	// Err is the attempt's failure; nil means it succeeded with Result.
	Err error
	// Result is the JSON of the value computed.
	Result json.RawMessage
	// Used holds the upstream revisions the function read.
	Used map[string]int64
	// Span is the attempt's span: the attempts its outcome creates (a retry, the nodes downstream)
	// link to it.
	Span trace.SpanContext
}

// Record records the outcomes of many attempts in one transaction, each fenced by its claim, and
// returns, for each, nil or ErrClaimLost: a lost claim drops its own outcome, not the others. A
// success stores its value unless the node's gate no longer holds (the attempt is then CANCELED);
// a failure is retried with the node's backoff while attempts remain and it is not permanent, else
// the node has failed. Every execution concerned is then advanced.
//
// The fences are one statement, and so are the loads of the executions, their values and their
// newest attempts, the revisions written back and the notifications; the executions are locked in
// id order. An error of the transaction is returned for the whole batch: nothing was written.
// The transaction waits for no lock longer than the store's lock timeout: a batch must not stall
// behind one execution that another transaction holds, while the heartbeats of its attempts, whose
// rows it holds, report them busy. It then fails with ErrLockTimeout, naming what it waited for.
func (s *Store) Record(ctx context.Context, outs []Outcome) ([]error, error) {
	lost := make([]error, len(outs))
	var done []*execState
	err := s.inTxn(ctx, s.workDB(), func(ctx context.Context, t *txn) error {
		// The fences and the loads go in one round trip. The loads take every execution of the
		// batch, in id order, after the computations' rows: an execution whose attempts all lost
		// their claims is dropped below.
		var fenced []int64
		ids := make([]string, len(outs))
		for i, o := range outs {
			ids[i] = o.C.ExecutionID
		}
		loaded, err := s.load(ctx, t, ids, []step{s.fenceAll(outs, &fenced)}, nil)
		if err != nil {
			return err
		}
		won := s.fenced(outs, fenced)
		byID := make(map[string]*execState, len(loaded))
		for i, o := range outs {
			if !won[i] {
				lost[i] = fmt.Errorf("%w: computation %d of %q in %s", ErrClaimLost, o.C.ID, o.C.Node, o.C.ExecutionID)
				continue
			}
			byID[o.C.ExecutionID] = nil
		}
		var sts []*execState
		for _, st := range loaded {
			if _, ok := byID[st.exec.ID]; ok {
				st.claims = true
				byID[st.exec.ID] = st
				sts = append(sts, st)
			}
		}
		if len(sts) == 0 {
			return nil
		}
		// Until its outcome is recorded, an attempt fenced above still runs, as far as advancing
		// the others is concerned: a sibling's advance must not start its node again.
		for i, o := range outs {
			if won[i] {
				running := *o.C
				running.State = StateRunning
				byID[o.C.ExecutionID].latest[o.C.Node] = &running
			}
		}
		ahead, err := s.storeResults(ctx, t, byID, outs, won)
		if err != nil {
			return err
		}
		for i, o := range outs {
			if won[i] {
				octx := trace.ContextWithSpanContext(ctx, o.Span)
				if err := s.recordOne(octx, t, byID[o.C.ExecutionID], o, ahead[i]); err != nil {
					return err
				}
			}
		}
		if err := s.finish(ctx, t, sts); err != nil {
			return err
		}
		done = sts
		return nil
	})
	if hasCode(err, lockNotAvailable) {
		return nil, s.recordGaveUp(ctx, outs, err)
	}
	if err != nil {
		return nil, err
	}
	s.committed(ctx, done)
	return lost, nil
}

// fenceAll is the statement that moves the attempts of outs out of RUNNING, in id order, where
// their claims still hold; it reads the ids of those into fenced.
func (s *Store) fenceAll(outs []Outcome, fenced *[]int64) step {
	n := len(outs)
	ids, replicas, tokens := make([]int64, n), make([]string, n), make([]string, n)
	states, errs, used := make([]string, n), make([]string, n), make([]string, n)
	for i, o := range outs {
		ids[i], replicas[i], tokens[i] = o.C.ID, deref(o.C.ReplicaID), deref(o.C.ClaimToken)
		states[i] = StateSuccess
		if o.Err != nil {
			states[i], errs[i] = StateFailed, storable(o.Err.Error())
		} else if o.Used != nil {
			used[i] = signature(o.Used).String()
		}
	}
	// Each attempt is reached through its primary key alone, in id order: the lateral lookup is
	// fenced by OFFSET 0 from the state test, which would otherwise let the planner reach the rows
	// through a partial index on RUNNING attempts, scanning every running attempt of the replica for
	// each outcome. A generic plan made while that index was small would keep doing so. The
	// attempt of a lost claim is locked too, until the commit, and left as it is.
	//
	// The lock timeout ($8) is set for the rest of the transaction as o is read, before any row is
	// locked, at no statement of its own: set_config is volatile, so o is read once, and whole,
	// before the lateral lookups.
	return step{s.q(`WITH o AS (
			SELECT * FROM unnest($1::bigint[], $2::text[], $3::uuid[], $4::text[], $5::text[], $6::text[])
				AS o(id, replica_id, token, state, error, computed_with)
			WHERE set_config('lock_timeout', $8, true) IS NOT NULL),
		held AS MATERIALIZED (SELECT o.* FROM (SELECT * FROM o ORDER BY o.id) o
			CROSS JOIN LATERAL (SELECT c.state, c.replica_id, c.claim_token FROM {s}.computations c
				WHERE c.id = o.id OFFSET 0 FOR UPDATE) c
			WHERE c.state = 'RUNNING' AND c.replica_id = o.replica_id AND c.claim_token = o.token)
		UPDATE {s}.computations c
		SET state = h.state, error = CASE WHEN h.state = 'FAILED' THEN h.error END,
			computed_with = coalesce(nullif(h.computed_with, '')::jsonb, c.computed_with),
			finished_at = coalesce($7::timestamptz, now())
		FROM held h WHERE c.id = h.id
		RETURNING c.id`),
		[]any{ids, replicas, tokens, states, errs, used, s.clock.NowOrNil(), s.lockTimeoutSetting()},
		func(br pgx.BatchResults) error {
			rows, err := br.Query()
			if err != nil {
				return fmt.Errorf("finishing computations: %w", err)
			}
			*fenced, err = pgx.CollectRows(rows, pgx.RowTo[int64])
			return err
		}}
}

// fenced reports which outcomes of outs fenceAll fenced, and moves their attempts to the state
// it wrote.
func (s *Store) fenced(outs []Outcome, fenced []int64) []bool {
	held := make(map[int64]bool, len(fenced))
	for _, id := range fenced {
		held[id] = true
	}
	won := make([]bool, len(outs))
	for i, o := range outs {
		won[i] = held[o.C.ID]
		if !won[i] {
			continue
		}
		o.C.State = StateSuccess
		if o.Err != nil {
			o.C.State = StateFailed
			msg := storable(o.Err.Error())
			o.C.Error = &msg
		} else if o.Used != nil {
			o.C.ComputedWith = signature(o.Used).String()
		}
	}
	return won
}

// stored is the value of an outcome that storeResults wrote ahead: row is what changed, nil if
// the value was equal to the stored one. more is set on each outcome of a run but its last: its
// execution advances after the last.
type stored struct {
	row  *valueRow
	more bool
}

// storeResults writes ahead, in one statement, the values of the successes that recordOne would
// store as they are: for each execution, the leading run of its outcomes in the batch that a run
// may take (see run.admit), whose k-th recordOne records at the execution's revision plus k, as it
// advances the execution once, after the last. It returns them by outcome index. The others are
// left to recordOne.
func (s *Store) storeResults(ctx context.Context, tx *txn, sts map[string]*execState, outs []Outcome, won []bool) (map[int]*stored, error) {
	var w valueWrites
	var which []int
	runs := map[string]*run{}
	for i, o := range outs {
		if !won[i] {
			continue
		}
		id := o.C.ExecutionID
		r := runs[id]
		if r == nil {
			r = &run{st: sts[id], open: true}
			runs[id] = r
		}
		rev := r.revision()
		if !r.admit(o) {
			r.open = false
			continue
		}
		w.add(id, o.C.Node, o.Result, nil, rev)
		r.members = append(r.members, i)
		which = append(which, i)
	}
	if len(which) == 0 {
		return nil, nil
	}
	rows, err := s.writeValues(ctx, tx, w, sts[w.ids[0]].now)
	if err != nil {
		return nil, err
	}
	type key struct{ id, node string }
	changed := make(map[key]*valueRow, len(rows))
	for _, r := range rows {
		changed[key{r.ExecutionID, r.Node}] = r
	}
	out := make(map[int]*stored, len(which))
	for k, i := range which {
		out[i] = &stored{row: changed[key{w.ids[k], w.nodes[k]}]}
	}
	for _, r := range runs {
		for _, i := range r.members[:max(len(r.members)-1, 0)] {
			out[i].more = true
		}
	}
	return out, nil
}

// run is the leading run of an execution's outcomes in a batch, whose values storeResults writes
// ahead, and which recordOne records with one advance after the last.
type run struct {
	st      *execState
	members []int    // their indexes in the batch
	nodes   []string // their nodes
	open    bool     // it may take more
	// vals are the values as the run leaves them: the execution's, with its members' results at
	// their revisions. They are made when a second member is considered; until then, first is the
	// first member's value.
	vals  graph.Values
	first graph.Value
	// watch are the archives and historians of the graph, and ticks tells whether it has ticks:
	// quiet finds them when it is first asked (watched).
	watch   []graph.Node
	ticks   bool
	watched bool
}

// revision is the revision of the run's next member: recordOne adds one for each outcome.
func (r *run) revision() int64 { return r.st.revision + int64(len(r.members)) + 1 }

// admit reports whether the run may take o, and if so adds its value to the run's values; the
// caller adds o to the members. The run takes a success of a node that is not a mutate, whose gate
// holds on the values as the run leaves them. Past the first, it takes a success of a compute node
// that is not in the run yet, if the advance that the run skips before it would change no value
// (quiet): recorded one at a time, the outcomes would write the same values, at the same
// revisions, and only the attempts that those advances create differ: the run's one advance
// creates them from all its values, as the advance after a Set of several values does.
//
// The gates see a member's result as it was computed, not as PostgreSQL stores it (the same JSON,
// spelled its own way), at the revision recordOne gives it, even if it is equal to the stored
// value, whose revision then stays.
func (r *run) admit(o Outcome) bool {
	if !r.open || o.Err != nil {
		return false
	}
	st := r.st
	n, _ := st.g.Node(o.C.Node)
	if n.Kind() == graph.KindMutate {
		return false
	}
	vals := st.values
	if len(r.members) > 0 {
		if n.Kind() != graph.KindCompute || slices.Contains(r.nodes, n.Name()) {
			return false
		}
		if r.vals == nil {
			r.vals = maps.Clone(st.values)
			r.vals[r.nodes[0]] = r.first
		}
		if !r.quiet() {
			return false
		}
		vals = r.vals
	}
	if ok, err := holds(n, vals); !ok || err != nil {
		return false
	}
	v := graph.Value{Raw: o.Result, Revision: r.revision(), SetAt: st.now}
	if r.vals == nil {
		r.first = v
	} else {
		r.vals[n.Name()] = v
	}
	r.nodes = append(r.nodes, n.Name())
	// Gates see a tick once it comes due, not as it is written: a tick ends the run.
	r.open = n.Kind() == graph.KindCompute
	return true
}

// quiet reports whether advancing the execution on the run's values would change no value: it
// would clear none, archive nothing, record no member in a historian, and find no gate that
// panics. The values before the run were advanced, and quiet was asked before the newest member
// came in: what the advance would change now reads the newest member, or reads the ticks as they
// come due (archives and historians).
func (r *run) quiet() bool {
	g := r.st.g
	if !r.watched {
		r.watched = true
		for _, n := range g.Nodes() {
			switch n.Kind() {
			case graph.KindArchive, graph.KindHistorian:
				r.watch = append(r.watch, n)
			case graph.KindTickOnce, graph.KindTickRecurring:
				r.ticks = true
			}
		}
	}
	due := r.vals
	if r.ticks {
		due = dueOf(r.st, r.vals)
	}
	for _, n := range r.watch {
		if !r.still(n, due) {
			return false
		}
	}
	for _, name := range g.Downstream(r.nodes[len(r.nodes)-1]) {
		if n, _ := g.Node(name); n.Kind() != graph.KindArchive && n.Kind() != graph.KindHistorian && !r.still(n, due) {
			return false
		}
	}
	return true
}

// still reports whether advancing node n on the run's values, due as gates see them to decide
// whether a node may run, would change no value and find no panic.
func (r *run) still(n graph.Node, due graph.Values) bool {
	switch n.Kind() {
	case graph.KindArchive:
		ok, err := holds(n, due)
		return err == nil && (!ok || r.vals.Has(n.Name()))
	case graph.KindHistorian:
		ok, err := holds(n, due)
		return err == nil && (!ok || !slices.ContainsFunc(n.Upstream(), func(up string) bool { return slices.Contains(r.nodes, up) }))
	}
	ok, err := holds(n, r.vals)
	if err != nil || !ok && clearable(n) && r.vals.Has(n.Name()) {
		return false
	}
	if ok && r.ticks {
		_, err = holds(n, due)
	}
	return err == nil
}

// recordOne records one fenced outcome in its execution's state, and advances the execution. pre,
// if not nil, is its value, which storeResults wrote ahead once the node's gate held; if pre.more,
// the execution is advanced after a later outcome of its run instead.
func (s *Store) recordOne(ctx context.Context, tx *txn, st *execState, o Outcome, pre *stored) error {
	c := o.C
	st.revision++
	st.promote = st.promote || c.gated() // its slot is free
	if o.Err != nil {
		return s.afterFailure(ctx, tx, st, c, o.Err, graph.IsPermanent(o.Err))
	}
	if err := s.forgetUndueTicks(ctx, tx, st, c); err != nil {
		return err
	}
	n, _ := st.g.Node(c.Node)
	ok, err := true, error(nil)
	if pre == nil { // storeResults judged the gate of what it wrote
		ok, err = holds(n, st.values)
	}
	switch {
	case err != nil:
		return s.gatePanicked(ctx, tx, st, c, err)
	case !ok:
		if err := s.cancelAttempt(ctx, tx, c, "canceled: gate no longer holds"); err != nil {
			return err
		}
	case n.Kind() == graph.KindMutate:
		if err := s.mutate(ctx, tx, st, n, o.Result); err != nil {
			return err
		}
	case pre != nil:
		if pre.row != nil && pre.row.Revision != st.revision {
			return fmt.Errorf("recording %q of %s: its value was written at revision %d, not %d",
				c.Node, st.exec.ID, pre.row.Revision, st.revision)
		}
		if pre.row != nil {
			st.values[c.Node] = pre.row.toValue()
			st.changed = true
			st.recordSave(c.Node, pre.row.toValue())
		}
	default:
		if _, err := s.upsertValue(ctx, tx, st, c.Node, o.Result, nil, st.revision); err != nil {
			return err
		}
	}
	st.latest[c.Node] = c
	if pre != nil && pre.more {
		return nil // its execution advances after the last outcome of its run
	}
	return s.advance(ctx, tx, st)
}
