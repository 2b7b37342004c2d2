package persistence

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"

	"github.com/journey-go/journey/graph"
	"github.com/journey-go/journey/persistence/machine"
)

// CreateExecution starts an execution of g with no values, and advances it, so that nodes whose
// gate holds from the start are created at once.
func (s *Store) CreateExecution(ctx context.Context, g *graph.Graph) (*Execution, error) {
	execs, err := s.CreateExecutions(ctx, g, []map[string]json.RawMessage{nil}, nil, nil, nil)
	if err != nil {
		return nil, err
	}
	return execs[0], nil
}

// NewID returns a new id for an execution of g with key ("" for none), in the lane of its key, or
// a random one. A caller that chooses the ids of its starts before it writes them
// (CreateExecutions, Write) may write them again when a COMMIT's outcome is unknown
// (ErrOutcomeUnknown): a start whose execution an earlier try made gets that execution, and
// starts nothing more.
func (s *Store) NewID(g *graph.Graph, key string) string {
	if g.Singleton() {
		key = graph.SingletonKey
	}
	lane := randomLane()
	if key != "" {
		lane = laneOfKey(g.Name(), key)
	}
	return newID(g.IDPrefix(), lane, time.Now())
}

// CreateExecutions starts one execution of g for each item, in the order given, in one
// transaction, and returns them in that order. Each execution is what CreateExecution, then
// SetValues with the item's values, would make: advanced at revision 0 with no values, then given
// the item's values as one change, at the next revision (1), and advanced again. A nil or empty
// item starts an execution with no values. The caller has checked every item: its nodes are
// inputs of g (CheckInput), and its values can be stored (CheckValue). With no items,
// it writes nothing.
//
// ids, nil or one per item ("" for a new one), are the executions' ids (see NewID): an item whose execution an
// earlier call with its id made returns that execution, as it is, and writes nothing. keys, nil
// or one per item, gives the items their keys ("" for none); every item of a Singleton graph has
// SingletonKey. An item whose key an unarchived execution of a graph of the same name
// holds, committed before or concurrently, starts nothing: its execution is that one, with
// Existing set, and its values are not applied; so is an item whose key an earlier item holds.
// A key that cannot go into SQL is a *TextError, and nothing is written.
//
// It is built for bulk: the executions go in with one statement, and their values and history
// with another. The call sends one NOTIFY for the work it makes available, whatever the number of
// executions, and none for the executions' values: no one can be waiting on an execution before
// it exists.
func (s *Store) CreateExecutions(ctx context.Context, g *graph.Graph, items []map[string]json.RawMessage, keys, ids []string, prios []int16) ([]*Execution, error) {
	return s.createExecutions(ctx, s.own, g, items, keys, ids, prios)
}

// CreateExecutionsIn is CreateExecutions in tx, a transaction of the application's (see
// inCaller): the executions exist, and their work runs, once it commits.
func (s *Store) CreateExecutionsIn(ctx context.Context, tx Caller, g *graph.Graph, items []map[string]json.RawMessage, keys, ids []string, prios []int16) ([]*Execution, error) {
	return s.createExecutions(ctx, s.inCaller(tx), g, items, keys, ids, prios)
}

// createExecutions is CreateExecutions, in the transaction of in.
func (s *Store) createExecutions(ctx context.Context, in run, g *graph.Graph, items []map[string]json.RawMessage, keys, ids []string, prios []int16) ([]*Execution, error) {
	rg, ok := s.Graph(g.Name(), g.Version())
	if !ok {
		return nil, fmt.Errorf("%w: %q version %q; add it to Config.Graphs", ErrUnknownGraph, g.Name(), g.Version())
	}
	if len(items) == 0 {
		return []*Execution{}, nil
	}
	ins, err := s.newInserts(slices.Repeat([]*graph.Graph{g}, len(items)), keys, ids, prios)
	if err != nil {
		return nil, err
	}
	// Advancing a new execution with no values does nothing when no gate holds on no values. Then
	// nothing waits on what the INSERT returns, and it goes with the BEGIN and the COMMIT: one
	// round trip. A keyed one waits for what its INSERT found.
	idle := !slices.ContainsFunc(items, func(item map[string]json.RawMessage) bool { return len(item) > 0 }) &&
		s.StartsIdle(g) && ins.keys == nil
	var plans []*machine.Plan
	var started []int // the item of each plan
	err = in(ctx, func(ctx context.Context, t *txn) error {
		if idle {
			t.tail = append(t.tail, s.insertSteps(ins)...)
			return nil
		}
		var err error
		plans, started, err = s.startIn(ctx, t, rg, items, ins)
		return err
	})
	if err != nil {
		return nil, err
	}
	if idle {
		ins.found()
		return ins.execs, nil
	}
	return ins.started(plans, started), nil
}

// started returns the executions of ins, once the plans of those it made, of the items started,
// are written.
func (ins *inserts) started(plans []*machine.Plan, started []int) []*Execution {
	for j, p := range plans {
		e := *p.Exec()
		e.Revision = p.Revision() - int64(len(p.Claimed())) // the write's, before the claims it made
		ins.execs[started[j]] = &e
	}
	return ins.execs
}

// startIn inserts the executions of ins in t, of rg, the graph as the store serves it, and starts
// each one with its values, items[i] (machine.Start); it returns the plans of those it made, and
// the item of each. An execution that held its key already, or that an earlier try made, is left
// as it is. A new execution's state is known without loading it, and needs no lock: no one else
// sees it before the commit.
func (s *Store) startIn(ctx context.Context, t *txn, rg *graph.Graph, items []map[string]json.RawMessage, ins *inserts) ([]*machine.Plan, []int, error) {
	if err := s.insert(ctx, t, ins); err != nil {
		return nil, nil, err
	}
	var plans []*machine.Plan
	var started []int // the item of each plan
	for i, e := range ins.execs {
		if !ins.made[i] {
			continue
		}
		x := loaded(*e, rg, nil)
		env := s.env(ctx, e.CreatedAt, x.GraphKey)
		p, err := machine.Step(x, machine.Start{Values: items[i]}, env)
		for _, ev := range ins.follow {
			if err == nil {
				err = p.Step(ev, env)
			}
		}
		if len(items) > 1 && errors.Is(err, ErrInvalidValue) {
			err = fmt.Errorf("inputs[%d]: %w", i, err)
		}
		if err != nil {
			return nil, nil, err
		}
		plans, started = append(plans, p), append(started, i)
	}
	return plans, started, s.finish(ctx, t, plans, !t.caller)
}

// maxKeyRounds bounds the rounds of a keyed insert (see Store.insert).
const maxKeyRounds = 3

// inserts are the executions that a write starts, and, once it has sent insertSteps, each
// one's execution.
type inserts struct {
	ids   []string
	gs    []*graph.Graph
	keys  []string // one per start, "" for none; nil when no start has a key
	prios []int16  // one per start (journey.WithPriority), or nil for none
	// parents are the starts' Parent, as JSON, one per start, or nil for none (see StartChildren).
	parents []string
	// follow are the events each execution takes once started: its parent's pause or archive.
	follow []machine.Event
	// execs holds the execution of each start that has been found: the one it inserted, or the
	// one that held its key, or that an earlier try of the start made; made tells which it
	// inserted. pending are the others.
	execs   []*Execution
	made    []bool
	pending []int
	// rows and holders are what the last insertSteps read: the rows inserted or found by their
	// ids, and the executions that hold the keys.
	rows    []*insertedExecution
	holders []*Execution
}

// newInserts gives each execution to start, of gs[i] with key keys[i] (keys nil or one per start,
// "" for none), its id, ids[i], or a new one (NewID) if ids is nil or ids[i] is "", and checks the
// keys.
func (s *Store) newInserts(gs []*graph.Graph, keys, ids []string, prios []int16) (*inserts, error) {
	if keys != nil && len(keys) != len(gs) {
		return nil, fmt.Errorf("persistence: %d keys for %d executions", len(keys), len(gs))
	}
	if ids != nil && len(ids) != len(gs) {
		return nil, fmt.Errorf("persistence: %d ids for %d executions", len(ids), len(gs))
	}
	if prios != nil && len(prios) != len(gs) {
		return nil, fmt.Errorf("persistence: %d priorities for %d executions", len(prios), len(gs))
	}
	if !slices.ContainsFunc(prios, func(p int16) bool { return p != 0 }) {
		prios = nil
	}
	ins := &inserts{ids: make([]string, len(gs)), gs: gs, prios: prios, execs: make([]*Execution, len(gs)), made: make([]bool, len(gs))}
	for i, g := range gs {
		key := ""
		if keys != nil {
			key = keys[i]
		}
		ins.ids[i] = s.NewID(g, key)
		if len(ids) > i && ids[i] != "" {
			if err := CheckText("execution id", ids[i]); err != nil {
				return nil, err
			}
			ins.ids[i] = ids[i]
		}
		ins.pending = append(ins.pending, i)
		if g.Singleton() {
			key = graph.SingletonKey
		}
		if key == "" {
			continue
		}
		if err := CheckText("key", key); err != nil {
			if len(gs) > 1 {
				err = fmt.Errorf("inputs[%d]: %w", i, err)
			}
			return nil, err
		}
		if ins.keys == nil {
			ins.keys = make([]string, len(gs))
		}
		ins.keys[i] = key
	}
	return ins, nil
}

// prio is the priority of start i.
func (ins *inserts) prio(i int) int16 {
	if ins.prios == nil {
		return 0
	}
	return ins.prios[i]
}

// key is the key of start i, "" if none.
func (ins *inserts) key(i int) string {
	if ins.keys == nil {
		return ""
	}
	return ins.keys[i]
}

// insert sends insertSteps in t until every start has its execution: a key's holder archived
// between the INSERT and the read leaves the start pending, and the next round inserts it.
func (s *Store) insert(ctx context.Context, t *txn, ins *inserts) error {
	for round := 1; ; round++ {
		if err := t.send(ctx, s.insertSteps(ins)...); err != nil {
			return fmt.Errorf("creating executions: %w", err)
		}
		if !ins.found() {
			return nil
		}
		if round == maxKeyRounds {
			i := ins.pending[0]
			return fmt.Errorf("starting an execution of %q with key %q: the executions that held the key were archived "+
				"each time it looked, %d times; try again", ins.gs[i].Name(), ins.keys[i], round)
		}
	}
}

// insertSteps are the statements that insert the pending starts, and read what found needs.
// The INSERT skips a start whose id an execution has, which an earlier try of the same start
// made (see NewID), and returns that execution beside those it inserts, each marked as such. It
// skips a key that an unarchived execution holds, or that a concurrent transaction inserts
// (waiting for its commit), and one row goes in for each graph name and key, in key order: two
// writers that insert the same keys wait for each other in one order, never in a cycle. With
// keys, a second statement reads the holders of the keys: its snapshot, taken after the INSERT,
// sees the executions that concurrent transactions committed while the INSERT waited, which the
// INSERT's own does not.
func (s *Store) insertSteps(ins *inserts) []step {
	var ids, names, versions, keys, heldKeys, heldNames []string
	var lanes, prios []int16
	var parents []string
	seen := map[[2]string]bool{}
	pending := ins.pending
	if ins.keys != nil {
		pending = slices.SortedStableFunc(slices.Values(ins.pending), func(a, b int) int {
			return strings.Compare(ins.keys[a], ins.keys[b])
		})
	}
	if s.citus { // a statement a lane, in lane order: a key's executions are in its lane
		pending = slices.SortedStableFunc(slices.Values(pending), func(a, b int) int {
			return cmp.Compare(LaneOf(ins.ids[a]), LaneOf(ins.ids[b]))
		})
	}
	for _, i := range pending {
		g, key := ins.gs[i], ins.key(i)
		if key != "" {
			if seen[[2]string{g.Name(), key}] {
				continue
			}
			seen[[2]string{g.Name(), key}] = true
			heldKeys, heldNames = append(heldKeys, key), append(heldNames, g.Name())
		}
		ids, names, versions = append(ids, ins.ids[i]), append(names, g.Name()), append(versions, g.Version())
		keys, lanes = append(keys, key), append(lanes, LaneOf(ins.ids[i]))
		if ins.prios != nil {
			prios = append(prios, ins.prios[i])
		}
		if ins.parents != nil {
			parents = append(parents, ins.parents[i])
		}
	}
	var steps []step
	for i, j := 0, 0; i < len(ids); i = j {
		j = s.runEnd(lanes, i)
		// The priorities are an empty array when every start has none, which unnest pads.
		var prio []int16
		if prios != nil {
			prio = prios[i:j]
		}
		var parent []string
		if parents != nil {
			parent = parents[i:j]
		}
		steps = append(steps, step{s.q(`WITH e AS (SELECT lane, id, graph_name, graph_version, key, priority, parent, ord
				FROM unnest($1::smallint[], $2::text[], $3::text[], $4::text[], $5::text[], $7::smallint[], $8::text[])
				WITH ORDINALITY AS e(lane, id, graph_name, graph_version, key, priority, parent, ord)),
			made AS (INSERT INTO {s}.executions (lane, id, graph_name, graph_version, revision, key, priority, parent, created_at, updated_at)
				SELECT e.lane, e.id, e.graph_name, e.graph_version, 0, nullif(e.key, ''), coalesce(e.priority, 0), nullif(e.parent, '')::jsonb, t.now, t.now
				FROM e, (SELECT coalesce($6::timestamptz, now()) AS now) t
				ORDER BY e.ord
				ON CONFLICT DO NOTHING
				RETURNING ` + cols("", executionColumns) + `)
		SELECT ` + cols("", executionColumns) + `, true AS made FROM made
		UNION ALL
		SELECT ` + s.executionRead("x", s.pinned("n", "$1")) + `, false FROM ` + executionKeys("$1", "$2") + ` k
		JOIN {s}.executions x ON x.lane = k.lane AND x.id = k.id WHERE x.id NOT IN (SELECT id FROM made)` + s.pinned("x", "$1")),
			[]any{lanes[i:j], ids[i:j], names[i:j], versions[i:j], keys[i:j], s.clock.NowOrNil(), orEmpty(prio), orEmpty(parent)}, collect(&ins.rows)})
	}
	if ins.keys == nil {
		return steps
	}
	// One probe of the key's index per key (OFFSET 0 keeps the lateral join): the generic plan of
	// a join read every keyed execution, 0.48 ms a call after 10,000 of them.
	if !s.citus {
		return append(steps, step{s.q(`SELECT ` + cols("e", executionColumns) + ` FROM unnest($1::text[], $2::text[]) AS k(key, graph_name),
		LATERAL (SELECT ` + s.executionRead("e", "") + ` FROM {s}.executions e WHERE e.key = k.key AND e.graph_name = k.graph_name
			AND e.key IS NOT NULL AND e.archived_at IS NULL OFFSET 0) e`), []any{heldKeys, heldNames}, collect(&ins.holders)})
	}
	// On Citus, a key is looked for in its lane, as its index leads with the lane.
	type laneKeys struct{ keys, names []string }
	byLane := map[int16]*laneKeys{}
	for k, key := range heldKeys {
		lane := laneOfKey(heldNames[k], key)
		if byLane[lane] == nil {
			byLane[lane] = &laneKeys{}
		}
		byLane[lane].keys, byLane[lane].names = append(byLane[lane].keys, key), append(byLane[lane].names, heldNames[k])
	}
	for _, lane := range slices.Sorted(maps.Keys(byLane)) {
		// More than the pairs, maybe, which found leaves out.
		steps = append(steps, step{s.q(`SELECT ` + s.executionRead("e", " AND n.lane = $3") + ` FROM {s}.executions e
			WHERE e.lane = $3 AND e.key = ANY($1::text[]) AND e.graph_name = ANY($2::text[]) AND e.archived_at IS NULL`),
			[]any{byLane[lane].keys, byLane[lane].names, lane}, collect(&ins.holders)})
	}
	return steps
}

// insertedExecution is a row that insertSteps' INSERT returns: an execution, and whether the
// INSERT made it, or an earlier try of its start did.
type insertedExecution struct {
	Execution
	Made bool `db:"made"`
}

// found takes what insertSteps read: the execution of each pending start, the one it inserted,
// or the one an earlier try of the start made, or the one that holds its key (then with Existing
// set, as it is for a start whose key an earlier start inserted). It reports whether starts are
// still pending, whose keys no execution held when read.
func (ins *inserts) found() bool {
	byID := make(map[string]*insertedExecution, len(ins.rows))
	for _, e := range ins.rows {
		byID[e.ID] = e
	}
	held := make(map[[2]string]*Execution, len(ins.holders))
	for _, e := range ins.holders {
		held[[2]string{e.GraphName, deref(e.Key)}] = e
	}
	var pending []int
	for _, i := range ins.pending {
		if e := byID[ins.ids[i]]; e != nil {
			ins.execs[i], ins.made[i] = &e.Execution, e.Made
			continue
		}
		// Its key was held: by an execution that another start of the call, or another
		// transaction, made.
		h := held[[2]string{ins.gs[i].Name(), ins.key(i)}]
		if h == nil {
			pending = append(pending, i)
			continue
		}
		ins.execs[i] = new(*h)
		ins.execs[i].Existing = true
	}
	ins.pending, ins.rows, ins.holders = pending, nil, nil
	return len(pending) > 0
}

// StartsIdle reports whether a new execution of g with no values starts idle: advancing it does
// nothing, so that its Start is one INSERT, which Write can add to a write of values.
func (s *Store) StartsIdle(g *graph.Graph) bool { return s.idle[GraphKey(g.Name(), g.Version())] }

// Write makes, in one transaction, the Starts of starts, each an execution of its graph with no
// values, which starts idle (StartsIdle), with its key keys[i] and its id ids[i] (each nil or one
// per start, as CreateExecutions takes them), and the writes of settings, as SetValuesOf does. It
// returns the executions in the order of starts, and the revisions in that of settings. An error
// fails them all, and nothing is written.
//
// The keyed INSERT and the read of the holders go with the COMMIT, as the INSERT of unkeyed
// Starts does. A key whose holder was archived between the two starts again, alone, after it.
func (s *Store) Write(ctx context.Context, starts []*graph.Graph, keys, ids []string, prios []int16, settings []Setting) ([]*Execution, []int64, error) {
	for _, g := range starts {
		if !s.StartsIdle(g) {
			return nil, nil, fmt.Errorf("persistence: Write was given a Start of %q version %q, which does not start idle", g.Name(), g.Version())
		}
	}
	ins, err := s.newInserts(starts, keys, ids, prios)
	if err != nil {
		return nil, nil, err
	}
	var tail []step
	if len(starts) > 0 {
		tail = s.insertSteps(ins)
	}
	var revs []int64
	if len(settings) > 0 {
		revs, err = s.setValuesOf(ctx, s.own, settings, tail)
	} else if len(tail) > 0 {
		err = s.inTxn(ctx, s.db, func(_ context.Context, t *txn) error {
			t.tail = tail
			return nil
		})
	}
	if err != nil {
		return nil, nil, err
	}
	if ins.found() {
		for _, i := range ins.pending {
			execs, err := s.CreateExecutions(ctx, starts[i], []map[string]json.RawMessage{nil}, []string{ins.keys[i]}, []string{ins.ids[i]},
				[]int16{ins.prio(i)})
			if err != nil {
				return nil, nil, err
			}
			ins.execs[i] = execs[0]
		}
	}
	return ins.execs, revs, nil
}

// LoadExecution reads an execution.
func (s *Store) LoadExecution(ctx context.Context, id string) (*Execution, error) {
	if err := CheckText("execution id", id); err != nil {
		return nil, err
	}
	exec := new(Execution)
	err := s.db.NewRaw(s.q("SELECT "+s.executionRead("e", s.laneOn("n", LaneOf(id)))+" FROM {s}.executions e WHERE e.lane = ? AND e.id = ?"),
		LaneOf(id), id).Scan(ctx, exec)
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
	revs, err := s.SetValuesOf(ctx, []Setting{{ID: id, Set: set, Meta: meta, Unset: unset}})
	if err != nil {
		return 0, err
	}
	return revs[0], nil
}

// Setting is what SetValues writes to one execution.
type Setting struct {
	ID    string
	Set   map[string]json.RawMessage
	Meta  json.RawMessage
	Unset []string
}

// Check returns a *TextError if the setting's execution id or one of its node names cannot go
// into SQL.
func (set Setting) Check() error {
	if err := CheckText("execution id", set.ID); err != nil {
		return err
	}
	for _, node := range slices.Concat(slices.Sorted(maps.Keys(set.Set)), set.Unset) {
		if err := CheckText("node", node); err != nil {
			return err
		}
	}
	return nil
}

// SetValuesOf makes the writes of SetValues to several executions in one transaction, each
// execution at most once, and returns their revisions afterwards, in order. An error fails them
// all, and nothing is written.
func (s *Store) SetValuesOf(ctx context.Context, settings []Setting) ([]int64, error) {
	return s.setValuesOf(ctx, s.own, settings, nil)
}

// SetValuesIn is SetValuesOf in tx, a transaction of the application's (see inCaller): the
// values are set, and the work they make runs, once it commits. The executions' rows stay locked
// until then.
func (s *Store) SetValuesIn(ctx context.Context, tx Caller, settings []Setting) ([]int64, error) {
	return s.setValuesOf(ctx, s.inCaller(tx), settings, nil)
}

// setValuesOf is SetValuesOf in the transaction of in, which sends the statements of tail too,
// with its COMMIT.
func (s *Store) setValuesOf(ctx context.Context, in run, settings []Setting, tail []step) ([]int64, error) {
	ids := make([]string, len(settings))
	for i, set := range settings {
		if err := set.Check(); err != nil {
			return nil, err
		}
		ids[i] = set.ID
	}
	if len(slices.Compact(slices.Sorted(slices.Values(ids)))) < len(ids) {
		return nil, errors.New("persistence: SetValuesOf was given an execution twice")
	}
	revs := make([]int64, len(settings))
	err := in(ctx, func(ctx context.Context, t *txn) error {
		t.tail = append(t.tail, tail...)
		// An application's transaction may be REPEATABLE READ or SERIALIZABLE: then the node rows
		// read after the lock are its snapshot's, taken before, maybe long before, it was granted.
		var isolation string
		var before []step
		if t.caller {
			before = []step{{"SELECT current_setting('transaction_isolation')", nil, func(br pgx.BatchResults) error {
				return br.QueryRow().Scan(&isolation)
			}}}
		}
		xs, now, err := s.load(ctx, t, ids, before, nil)
		if err != nil {
			return err
		}
		deferred := isolation != "" && isolation != "read committed" && isolation != "read uncommitted"
		if deferred {
			if err := s.freshen(ctx, xs); err != nil {
				return err
			}
		}
		s.mark(t, xs)
		byID := make(map[string]*machine.Loaded, len(xs))
		for _, x := range xs {
			byID[x.Exec.ID] = x
		}
		plans := make([]*machine.Plan, len(settings))
		for i, set := range settings {
			x := byID[set.ID]
			ev := machine.Set{Set: set.Set, Meta: set.Meta, Unset: set.Unset, Defer: deferred}
			if plans[i], err = machine.Step(x, ev, s.env(ctx, now, x.GraphKey)); err != nil {
				return err
			}
			revs[i] = plans[i].Revision()
		}
		t.deferAdvance(plans)
		return s.finish(ctx, t, plans, !t.caller)
	})
	if err != nil {
		return nil, err
	}
	return revs, nil
}

// Values reads every value of an execution.
func (s *Store) Values(ctx context.Context, id string) (graph.Values, error) {
	if _, err := s.LoadExecution(ctx, id); err != nil {
		return nil, err
	}
	vals, err := s.valuesOf(ctx, s.db, []string{id})
	return vals[id], err
}

// valuesOf reads the values of executions ids. Each has an entry, empty if it has no values.
func (s *Store) valuesOf(ctx context.Context, db bun.IDB, ids []string) (map[string]graph.Values, error) {
	lanes := make([]int16, len(ids))
	for i, id := range ids {
		lanes[i] = LaneOf(id)
	}
	var rows []*nodeRow
	err := db.NewRaw(s.q(`SELECT `+cols("n", nodeColumns)+` FROM `+executionKeys("?0", "?1")+` k
		JOIN {s}.nodes n ON n.lane = k.lane AND n.execution_id = k.id WHERE n.value_rev IS NOT NULL`+s.pinned("n", "?0")),
		pgdialect.Array(lanes), pgdialect.Array(ids)).Scan(ctx, &rows)
	if err != nil && !isNoRows(err) {
		return nil, fmt.Errorf("loading values of %s: %w", strings.Join(ids, ", "), err)
	}
	vals := make(map[string]graph.Values, len(ids))
	for _, id := range ids {
		vals[id] = graph.Values{}
	}
	for _, r := range rows {
		vals[r.ExecutionID][r.Node] = r.value()
	}
	return vals, nil
}

// NodeState is what Get needs to know about one node.
type NodeState struct {
	Value graph.Value // zero when unset
	// Latest is the newest attempt, nil if none: its ID, State, Attempt, MaxAttempts and Error only.
	Latest *Computation
	// Revision is the execution's revision when it was read, before the value and the attempt.
	Revision int64
	// Canceled: the execution is canceled, and nothing of it runs again.
	Canceled bool
}

// Failed reports whether the node has failed for good (see Failure), with nothing pending.
func (ns NodeState) Failed() bool { return ns.Latest != nil && ns.Latest.FailedForGood() }

// NodeState reads a node's value and its newest attempt, in one prepared statement: a Get that
// waits makes it at each wakeup.
func (s *Store) NodeState(ctx context.Context, id, node string) (NodeState, error) {
	states, errs, err := s.NodeStates(ctx, []NodeRef{{id, node}})
	if err != nil {
		return NodeState{}, err
	}
	return states[0], errs[0]
}

// NodeRef names a node of an execution.
type NodeRef struct{ ID, Node string }

// NodeStates is NodeState for many nodes at once, in one statement. It returns, for each ref,
// its state or its own error (ErrNotFound, ErrUnknownGraph, ErrUnknownNode); the error it
// returns is the statement's.
func (s *Store) NodeStates(ctx context.Context, refs []NodeRef) ([]NodeState, []error, error) {
	ids, nodes, lanes := make([]string, len(refs)), make([]string, len(refs)), make([]int16, len(refs))
	states, errs := make([]NodeState, len(refs)), make([]error, len(refs))
	found := make([]bool, len(refs))
	for i, r := range refs {
		ids[i], nodes[i], lanes[i] = r.ID, r.Node, LaneOf(r.ID)
		if errs[i] = checkTexts("execution id", r.ID, "node", r.Node); errs[i] != nil {
			ids[i], nodes[i], found[i] = "", "", true // no execution has an empty id
		}
	}
	err := withPgx(ctx, s.db, func(pg *pgx.Conn) error {
		rows, err := pg.Query(ctx, s.q(`SELECT l.ord, e.graph_name, e.graph_version,
				greatest(e.revision, (SELECT max(m.rev) FROM {s}.nodes m WHERE m.lane = e.lane AND m.execution_id = e.id`+s.pinned("m", "$1")+`)),
				n.value, n.metadata, n.value_rev, n.set_at, n.attempt_id, n.state, n.attempt, n.max_attempts, n.error,
				e.canceled_at IS NOT NULL
			FROM unnest($1::smallint[], $2::text[], $3::text[]) WITH ORDINALITY AS l(lane, id, node, ord)
			JOIN {s}.executions e ON e.lane = l.lane AND e.id = l.id`+s.pinned("e", "$1")+`
			LEFT JOIN {s}.nodes n ON n.lane = e.lane AND n.execution_id = e.id AND n.node = l.node`+s.pinned("n", "$1")), lanes, ids, nodes)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var (
				ord           int
				name, version string
				ns            NodeState
				raw, meta     []byte
				valueRev      *int64
				setAt         *time.Time
				attemptID     *int64
				state, errMsg *string
				attempt, most *int
			)
			if err := rows.Scan(&ord, &name, &version, &ns.Revision,
				&raw, &meta, &valueRev, &setAt, &attemptID, &state, &attempt, &most, &errMsg, &ns.Canceled); err != nil {
				return err
			}
			i := ord - 1
			found[i] = true
			if valueRev != nil {
				if string(meta) == "null" {
					meta = nil
				}
				ns.Value = graph.Value{Raw: raw, Revision: *valueRev, SetAt: *setAt, Metadata: meta}
			}
			if attemptID != nil {
				ns.Latest = &Computation{ID: *attemptID, State: *state, Attempt: *attempt, MaxAttempts: *most, Error: errMsg}
			}
			states[i] = ns
			if g, ok := s.Graph(name, version); !ok {
				errs[i] = fmt.Errorf("%w: %q version %q", ErrUnknownGraph, name, version)
			} else if _, known := g.Node(refs[i].Node); !known {
				errs[i] = fmt.Errorf("%w: graph %q has no node %q", ErrUnknownNode, g.Name(), refs[i].Node)
			}
		}
		return rows.Err()
	})
	if err != nil {
		if len(refs) == 1 {
			return nil, nil, fmt.Errorf("reading node %q of %s: %w", refs[0].Node, refs[0].ID, err)
		}
		return nil, nil, fmt.Errorf("reading %d nodes: %w", len(refs), err)
	}
	for i, r := range refs {
		if !found[i] {
			errs[i] = fmt.Errorf("%w: %q", ErrNotFound, r.ID)
		}
	}
	return states, errs, nil
}

// Computations lists every attempt of an execution, oldest first.
func (s *Store) Computations(ctx context.Context, id string) ([]Computation, error) {
	if _, err := s.LoadExecution(ctx, id); err != nil {
		return nil, err
	}
	var comps []Computation
	lane := LaneOf(id)
	err := s.db.NewRaw(s.q(`SELECT `+cols("", computationColumns)+` FROM (
			SELECT `+attemptsAsComputations+` FROM {s}.attempts a WHERE a.lane = ? AND a.execution_id = ?
			UNION ALL SELECT `+attemptColumns+` FROM {s}.nodes n WHERE n.lane = ? AND n.execution_id = ? AND n.attempt_id IS NOT NULL
		) c ORDER BY id`), lane, id, lane, id).Scan(ctx, &comps)
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
	err := s.db.NewRaw(s.q(`SELECT state, count(*) AS n FROM (SELECT state FROM {s}.attempts
		UNION ALL SELECT state FROM {s}.nodes WHERE state IS NOT NULL) c GROUP BY state`)).Scan(ctx, &rows)
	if err != nil && !isNoRows(err) {
		return nil, fmt.Errorf("counting computations: %w", err)
	}
	out := make(map[string]int, len(rows))
	for _, r := range rows {
		out[r.State] = r.N
	}
	return out, nil
}
