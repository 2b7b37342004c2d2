package persistence

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/journey-go/journey/graph"
)

// idAlphabet avoids letters that read alike (I, L, O, U).
const idAlphabet = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"

// newID returns prefix and 20 characters of idAlphabet: the first 10 write the time in
// milliseconds, the last 10 are random (50 bits). Ids made later sort after, so new rows go to the
// right edge of the indexes keyed by execution id, where their pages are already in cache, rather
// than to a random page of each; ids made in the same millisecond differ by their random part.
func newID(prefix string, now time.Time) string {
	var b [20]byte
	_, _ = rand.Read(b[10:]) // crypto/rand.Read never fails
	for i := 10; i < len(b); i++ {
		b[i] = idAlphabet[int(b[i])%len(idAlphabet)]
	}
	ms := uint64(now.UnixMilli())
	for i := 9; i >= 0; i-- {
		b[i] = idAlphabet[ms%uint64(len(idAlphabet))]
		ms /= uint64(len(idAlphabet))
	}
	return prefix + string(b[:])
}

// CreateExecution starts an execution of g with no values, and advances it, so that nodes whose
// gate holds from the start are created at once.
func (s *Store) CreateExecution(ctx context.Context, g *graph.Graph) (*Execution, error) {
	execs, err := s.CreateExecutions(ctx, g, []map[string]json.RawMessage{nil})
	if err != nil {
		return nil, err
	}
	return execs[0], nil
}

// CreateExecutions starts one execution of g for each item, in the order given, in one
// transaction, and returns them in that order. Each execution is what CreateExecution, then
// SetValues with the item's values, would make: advanced at revision 0 with no values, then given
// the item's values as one change, at the next revision (1), and advanced again. A nil or empty
// item starts an execution with no values. The caller has checked every item: its nodes are
// inputs of g (CheckInput), and its values can be stored (CheckValue). With no items,
// it writes nothing.
//
// It is built for bulk: the executions go in with one statement, and their values and history
// with another. The call sends one NOTIFY for the work it makes available, whatever the number of
// executions, and none for the executions' values: no one can be waiting on an execution before
// it exists.
func (s *Store) CreateExecutions(ctx context.Context, g *graph.Graph, items []map[string]json.RawMessage) ([]*Execution, error) {
	rg, ok := s.Graph(g.Name(), g.Version())
	if !ok {
		return nil, fmt.Errorf("%w: %q version %q; add it to Config.Graphs", ErrUnknownGraph, g.Name(), g.Version())
	}
	if len(items) == 0 {
		return []*Execution{}, nil
	}
	ids := make([]string, len(items))
	now := time.Now()
	revisions := make([]int64, len(items)) // where each usually ends; finish writes any other
	for i, item := range items {
		ids[i] = newID(g.IDPrefix(), now)
		if len(item) > 0 {
			revisions[i] = 1
		}
	}
	var rows []*Execution
	insert := step{s.q(`INSERT INTO {s}.executions (id, graph_name, graph_version, revision, created_at, updated_at)
		SELECT e.id, $1, $2, e.revision, t.now, t.now
		FROM unnest($3::text[], $4::bigint[]) AS e(id, revision),
			(SELECT coalesce($5::timestamptz, now()) AS now) t
		RETURNING *`), []any{g.Name(), g.Version(), ids, revisions, s.clock.NowOrNil()}, collect(&rows)}
	// Advancing a new execution with no values does nothing when no gate holds on no values. Then
	// nothing waits on what the INSERT returns, and it goes with the BEGIN and the COMMIT: one
	// round trip.
	idle := !slices.ContainsFunc(items, func(item map[string]json.RawMessage) bool { return len(item) > 0 }) &&
		startsIdle(rg)
	var states []*execState
	err := s.inTxn(ctx, func(ctx context.Context, t *txn) error {
		if idle {
			t.tail = append(t.tail, insert)
			return nil
		}
		if err := t.send(ctx, insert); err != nil {
			return fmt.Errorf("creating executions: %w", err)
		}
		// A new execution's state is known without loading it, and needs no lock: no one else
		// sees it before the commit. As CreateExecution does, advance it with no values first.
		states = make([]*execState, len(ids))
		for i, e := range inOrder(rows, ids) {
			st := &execState{exec: *e, g: rg, now: e.CreatedAt, values: graph.Values{}, latest: map[string]*Computation{},
				caller: true}
			if err := s.advance(ctx, t, st); err != nil {
				return err
			}
			states[i] = st
		}
		if err := s.setStartValues(ctx, t, states, items); err != nil {
			return err
		}
		// Then, as SetValues does, advance those given values again. finish notifies the
		// dispatchers and promotes gated work once for all of them; no one can be waiting on an
		// execution before it exists.
		for i, st := range states {
			if len(items[i]) > 0 {
				err := s.advance(ctx, t, st)
				if len(items) > 1 && errors.Is(err, ErrInvalidValue) {
					err = fmt.Errorf("inputs[%d]: %w", i, err)
				}
				if err != nil {
					return err
				}
			}
			st.changed = false
		}
		return s.finish(ctx, t, states)
	})
	if err != nil {
		return nil, err
	}
	if idle {
		return inOrder(rows, ids), nil
	}
	s.committed(ctx, states)
	execs := make([]*Execution, len(states))
	for i, st := range states {
		execs[i] = &st.exec
		execs[i].Revision = st.revision - int64(len(st.claimed)) // the write's, before the claims it made
	}
	return execs, nil
}

// inOrder returns the executions in the order of their ids.
func inOrder(execs []*Execution, ids []string) []*Execution {
	byID := make(map[string]*Execution, len(execs))
	for _, e := range execs {
		byID[e.ID] = e
	}
	ordered := make([]*Execution, len(ids))
	for i, id := range ids {
		ordered[i] = byID[id]
	}
	return ordered
}

// startsIdle reports whether advancing a new execution of g with no values does nothing: no gate
// holds on no values, nor does the graph's completion, and none panics.
func startsIdle(g *graph.Graph) bool {
	none := graph.Values{}
	if c := g.CompletesWhen(); c != nil {
		if ok, err := recovered("the completion gate", func() bool { return c.Holds(none) }); ok || err != nil {
			return false
		}
	}
	for _, name := range g.Order() {
		n, _ := g.Node(name)
		if n.Kind() == graph.KindInput {
			continue
		}
		if ok, err := holds(n, none); ok || err != nil {
			return false
		}
	}
	return true
}

// setStartValues gives each new execution its item's values, as one change at its next revision,
// and records them in the history: one statement for all of them.
func (s *Store) setStartValues(ctx context.Context, tx *txn, states []*execState, items []map[string]json.RawMessage) error {
	var w valueWrites
	byID := make(map[string]*execState, len(states))
	for i, st := range states {
		if len(items[i]) == 0 {
			continue
		}
		st.revision++
		byID[st.exec.ID] = st
		for _, name := range slices.Sorted(maps.Keys(items[i])) {
			w.add(st.exec.ID, name, items[i][name], nil, st.revision)
		}
	}
	if len(w.ids) == 0 {
		return nil
	}
	rows, err := s.writeValues(ctx, tx, w, states[0].now)
	if err != nil {
		return err
	}
	for _, r := range rows {
		st := byID[r.ExecutionID]
		st.values[r.Node] = r.toValue()
		st.changed = true
		st.recordSave(r.Node, r.toValue())
	}
	return nil
}

// LoadExecution reads an execution.
func (s *Store) LoadExecution(ctx context.Context, id string) (*Execution, error) {
	exec := new(Execution)
	err := s.db.NewRaw(s.q("SELECT * FROM {s}.executions WHERE id = ?"), id).Scan(ctx, exec)
	if isNoRows(err) {
		return nil, fmt.Errorf("%w: %q", ErrNotFound, id)
	}
	if err != nil {
		return nil, fmt.Errorf("loading execution %s: %w", id, err)
	}
	return exec, nil
}

// SetValues sets and unsets input values in one transaction, at one new revision, and advances the
// execution. Values equal to the stored ones (and with the same metadata) change nothing. It
// returns the execution's revision afterwards.
func (s *Store) SetValues(ctx context.Context, id string, set map[string]json.RawMessage, meta json.RawMessage, unset []string) (int64, error) {
	// The values go with the lock and the loads, in one round trip, at the execution's next
	// revision: the loads see them. A node that is not an input rolls them back.
	var w valueWrites
	for _, name := range slices.Sorted(maps.Keys(set)) {
		w.add(id, name, set[name], meta, 0)
	}
	var then []step
	var written []*valueRow
	if len(w.ids) > 0 {
		then = append(then, s.writeValuesStep(w, s.clock.NowOrNil(), &written))
	}
	var rev int64
	err := s.write(ctx, id, nil, then, func(ctx context.Context, tx *txn, st *execState) error {
		st.caller = true
		for _, name := range append(slices.Clone(w.nodes), unset...) {
			if err := CheckInput(st.g, name); err != nil {
				return err
			}
		}
		st.revision++ // every change below is at this revision; taken back if nothing changes
		changed := len(written) > 0
		for _, r := range written {
			st.recordSave(r.Node, r.toValue())
		}
		for _, name := range unset {
			if !st.values.Has(name) {
				continue
			}
			if err := s.deleteValue(ctx, tx, st, name); err != nil {
				return err
			}
			changed = true
		}
		if !changed {
			st.revision--
			rev = st.revision
			return nil
		}
		st.changed = true
		err := s.advance(ctx, tx, st)
		rev = st.revision
		return err
	})
	if err != nil {
		return 0, err
	}
	return rev, nil
}

// CheckInput reports why node name of g cannot be set: it is not in the graph (ErrUnknownNode),
// or it is not an input (ErrNotInput).
func CheckInput(g *graph.Graph, name string) error {
	n, ok := g.Node(name)
	if !ok {
		return fmt.Errorf("%w: graph %q has no node %q", ErrUnknownNode, g.Name(), name)
	}
	if n.Kind() != graph.KindInput {
		return fmt.Errorf("%w: %q is a %s node; only input nodes can be set", ErrNotInput, name, n.Kind())
	}
	return nil
}

// Values reads every value of an execution.
func (s *Store) Values(ctx context.Context, id string) (graph.Values, error) {
	if _, err := s.LoadExecution(ctx, id); err != nil {
		return nil, err
	}
	vals, err := s.valuesOf(ctx, s.db, []string{id})
	return vals[id], err
}

// NodeState is what Get needs to know about one node.
type NodeState struct {
	Value graph.Value // zero when unset
	// Latest is the newest attempt, nil if none: its ID, State, Attempt and Error only.
	Latest *Computation
	// Revision is the execution's revision when it was read, before the value and the attempt.
	Revision int64
}

// Failed reports whether the node has used up its attempts with nothing pending.
func (ns NodeState) Failed() bool { return ns.Latest != nil && ns.Latest.failedForGood() }

// NodeState reads a node's value and its newest attempt, in one prepared statement: a Get that
// waits makes it at each wakeup.
func (s *Store) NodeState(ctx context.Context, id, node string) (NodeState, error) {
	var (
		name, version string
		ns            NodeState
		raw, meta     []byte
		valueRev      *int64
		setAt         *time.Time
		attemptID     *int64
		state, errMsg *string
		attempt       *int
	)
	err := s.withPgx(ctx, func(pg *pgx.Conn) error {
		return pg.QueryRow(ctx, s.q(`SELECT e.graph_name, e.graph_version, e.revision,
				v.value, v.metadata, v.revision, v.set_at, c.id, c.state, c.attempt, c.error
			FROM {s}.executions e
			LEFT JOIN {s}."values" v ON v.execution_id = e.id AND v.node = $2
			LEFT JOIN LATERAL (SELECT id, state, attempt, error FROM {s}.computations
				WHERE execution_id = e.id AND node = $2 ORDER BY id DESC LIMIT 1) c ON true
			WHERE e.id = $1`), id, node).Scan(&name, &version, &ns.Revision,
			&raw, &meta, &valueRev, &setAt, &attemptID, &state, &attempt, &errMsg)
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return NodeState{}, fmt.Errorf("%w: %q", ErrNotFound, id)
	}
	if err != nil {
		return NodeState{}, fmt.Errorf("reading node %q of %s: %w", node, id, err)
	}
	g, ok := s.Graph(name, version)
	if !ok {
		return NodeState{}, fmt.Errorf("%w: %q version %q", ErrUnknownGraph, name, version)
	}
	if _, ok := g.Node(node); !ok {
		return NodeState{}, fmt.Errorf("%w: graph %q has no node %q", ErrUnknownNode, g.Name(), node)
	}
	if valueRev != nil {
		ns.Value = graph.Value{Raw: raw, Revision: *valueRev, SetAt: *setAt, Metadata: meta}
	}
	if attemptID != nil {
		ns.Latest = &Computation{ID: *attemptID, State: *state, Attempt: *attempt, Error: errMsg}
	}
	return ns, nil
}

// Computations lists every attempt of an execution, oldest first.
func (s *Store) Computations(ctx context.Context, id string) ([]Computation, error) {
	if _, err := s.LoadExecution(ctx, id); err != nil {
		return nil, err
	}
	var comps []Computation
	err := s.db.NewRaw(s.q("SELECT * FROM {s}.computations WHERE execution_id = ? ORDER BY id"), id).Scan(ctx, &comps)
	if err != nil && !isNoRows(err) {
		return nil, fmt.Errorf("listing computations of %s: %w", id, err)
	}
	return comps, nil
}

// StateCounts counts the computations of the schema in each state, for tests and monitoring.
func (s *Store) StateCounts(ctx context.Context) (map[string]int, error) {
	var rows []struct {
		State string `bun:"state"`
		N     int    `bun:"n"`
	}
	err := s.db.NewRaw(s.q("SELECT state, count(*) AS n FROM {s}.computations GROUP BY state")).Scan(ctx, &rows)
	if err != nil && !isNoRows(err) {
		return nil, fmt.Errorf("counting computations: %w", err)
	}
	out := make(map[string]int, len(rows))
	for _, r := range rows {
		out[r.State] = r.N
	}
	return out, nil
}
