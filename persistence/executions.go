package persistence

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"sort"

	"github.com/uptrace/bun"

	"github.com/journey-go/journey/graph"
)

// idAlphabet avoids letters that read alike (I, L, O, U).
const idAlphabet = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"

func newID(prefix string) string {
	b := make([]byte, 20)
	_, _ = rand.Read(b) // crypto/rand.Read never fails
	for i := range b {
		b[i] = idAlphabet[int(b[i])%len(idAlphabet)]
	}
	return prefix + string(b)
}

// CreateExecution starts an execution of g and advances it, so that nodes whose gate holds from
// the start are created at once.
func (s *Store) CreateExecution(ctx context.Context, g *graph.Graph) (*Execution, error) {
	if _, ok := s.Graph(g.Name(), g.Version()); !ok {
		return nil, fmt.Errorf("%w: %q version %q; add it to Config.Graphs", ErrUnknownGraph, g.Name(), g.Version())
	}
	id := newID(g.IDPrefix())
	var exec Execution
	insert := func(ctx context.Context, tx bun.Tx) error {
		_, err := tx.NewRaw(s.q(`INSERT INTO {s}.executions (id, graph_name, graph_version, created_at, updated_at)
			VALUES (?, ?, ?, coalesce(?::timestamptz, now()), coalesce(?::timestamptz, now()))`),
			id, g.Name(), g.Version(), s.clock.NowOrNil(), s.clock.NowOrNil()).Exec(ctx)
		if err != nil {
			return fmt.Errorf("creating execution: %w", err)
		}
		return nil
	}
	err := s.write(ctx, id, insert, func(ctx context.Context, tx bun.Tx, st *execState) error {
		if err := s.advance(ctx, tx, st); err != nil {
			return err
		}
		exec = st.exec
		exec.Revision = st.revision
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &exec, nil
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
	nodes := make([]string, 0, len(set))
	for name := range set {
		nodes = append(nodes, name)
	}
	sort.Strings(nodes)
	var rev int64
	err := s.write(ctx, id, nil, func(ctx context.Context, tx bun.Tx, st *execState) error {
		for _, name := range append(append([]string(nil), nodes...), unset...) {
			if err := checkInput(st.g, name); err != nil {
				return err
			}
		}
		st.revision++ // every change below is at this revision; taken back if nothing changes
		changed := false
		for _, name := range nodes {
			ok, err := s.upsertValue(ctx, tx, st, name, set[name], meta, st.revision)
			if err != nil {
				return err
			}
			changed = changed || ok
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
		err := s.advance(ctx, tx, st)
		rev = st.revision
		return err
	})
	if err != nil {
		return 0, err
	}
	return rev, nil
}

func checkInput(g *graph.Graph, name string) error {
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
	Value  graph.Value  // zero when unset
	Latest *Computation // the newest attempt, nil if none
}

// Failed reports whether the node has used up its attempts with nothing pending.
func (ns NodeState) Failed() bool { return ns.Latest != nil && ns.Latest.failedForGood() }

// NodeState reads a node's value and its newest attempt.
func (s *Store) NodeState(ctx context.Context, id, node string) (NodeState, error) {
	exec, err := s.LoadExecution(ctx, id)
	if err != nil {
		return NodeState{}, err
	}
	g, ok := s.Graph(exec.GraphName, exec.GraphVersion)
	if !ok {
		return NodeState{}, fmt.Errorf("%w: %q version %q", ErrUnknownGraph, exec.GraphName, exec.GraphVersion)
	}
	if _, ok := g.Node(node); !ok {
		return NodeState{}, fmt.Errorf("%w: graph %q has no node %q", ErrUnknownNode, g.Name(), node)
	}
	var ns NodeState
	var rows []valueRow
	err = s.db.NewRaw(s.q(`SELECT node, value, metadata, revision, set_at FROM {s}."values"
		WHERE execution_id = ? AND node = ?`), id, node).Scan(ctx, &rows)
	if err != nil && !isNoRows(err) {
		return ns, fmt.Errorf("reading %q: %w", node, err)
	}
	if len(rows) > 0 {
		ns.Value = rows[0].toValue()
	}
	var comps []*Computation
	err = s.db.NewRaw(s.q(`SELECT * FROM {s}.computations WHERE execution_id = ? AND node = ?
		ORDER BY id DESC LIMIT 1`), id, node).Scan(ctx, &comps)
	if err != nil && !isNoRows(err) {
		return ns, fmt.Errorf("reading computations of %q: %w", node, err)
	}
	if len(comps) > 0 {
		ns.Latest = comps[0]
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
