package persistence

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/jackc/pgx/v5"
	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"

	"github.com/journey-go/journey/graph"
	"github.com/journey-go/journey/persistence/machine"
)

// A map node (graph.Map, graph.Child) starts child executions, then waits for them to end
// without holding a claim:
//
//  1. Its attempt runs like a compute node's, on a replica that claims it. The first time for
//     its upstream values, it computes the items, ends the children of the values before
//     (EndChildren), and starts one child per item in the transaction that writes the node's
//     progress and makes it WAITING (WaitChildren). The progress row is the node's generation: the
//     attempt that started it, and the upstream revisions it was computed with (sig).
//  2. Each child's end is counted in the progress, once, in the transaction of the change that
//     ends it (machine.Plan.EndDelta, endsStep): it completed, failed for good, or was canceled
//     or archived. A child that runs again (a retry, an unarchive) is taken off the count. Once
//     they have all ended, the node is woken (machine.Wake): it becomes AVAILABLE again, or
//     PAUSED while its execution is.
//  3. A replica claims it again, reads the children's results (ChildResults) and records the
//     node's value or failure as any attempt's outcome.
//
// A retried attempt with the same upstream values finds its generation, and starts nothing: the
// children are keyed by the parent, the node and their place, so that even a second start would
// find them.

// MapProgress is a map node's progress: its generation, the upstream revisions the generation
// was computed with, the children it started, and how many have ended.
type MapProgress struct {
	Gen   int64  `bun:"gen"`
	Sig   string `bun:"sig"`
	Total int    `bun:"total"`
	Done  int    `bun:"done"`
}

// Of reports whether p is the progress of the generation of c: c computes with the same upstream
// revisions (a retry, or the claim that collects). A nil p is no one's.
func (p *MapProgress) Of(c *Computation) bool {
	return p != nil && machine.SameSignature(p.Sig, c.ComputedWith)
}

// ChildKey is the key of a map node's child: the parent, the node and the child's place, so
// that the node never starts two children for one item.
func ChildKey(parentID, node string, index int) string {
	return parentID + "/" + node + "/" + strconv.Itoa(index)
}

// Progress reads the progress of the map node of c, an attempt of it; nil if it never started
// children.
func (s *Store) Progress(ctx context.Context, c *Computation) (*MapProgress, error) {
	var found []*MapProgress
	err := s.db.NewRaw(s.q(`SELECT gen, sig, total, done FROM {s}.map_progress
		WHERE lane = ? AND execution_id = ? AND node = ?`), LaneOf(c.ExecutionID), c.ExecutionID, c.Node).Scan(ctx, &found)
	if err != nil && !isNoRows(err) {
		return nil, fmt.Errorf("reading the progress of node %q of %s: %w", c.Node, c.ExecutionID, err)
	}
	if len(found) == 0 {
		return nil, nil
	}
	return found[0], nil
}

// EndChildren cancels and archives the children of the map node of execution id that a
// generation other than gen started, each in a transaction of its own, and returns how many.
// Archiving frees their keys for the children of gen.
func (s *Store) EndChildren(ctx context.Context, id, node string, gen int64, reason string) (int, error) {
	ids, err := s.children(ctx, id, node, gen)
	if err != nil {
		return 0, err
	}
	for _, child := range ids {
		err := s.write(ctx, child, nil, func(_ context.Context, _ *txn, p *machine.Plan, env machine.Env) error {
			if err := p.Step(machine.Cancel{Reason: reason}, env); err != nil {
				return err
			}
			return p.Step(machine.Archive{}, env)
		})
		if err != nil {
			return 0, fmt.Errorf("ending child %s of %s: %w", child, id, err)
		}
	}
	return len(ids), nil
}

// children are the unarchived children of execution id: of its map node node, but those of
// generation keep, if node is not "" (keep 0 keeps none).
func (s *Store) children(ctx context.Context, id, node string, keep int64) ([]string, error) {
	var ids []string
	err := s.db.NewRaw(s.q(`SELECT id FROM {s}.executions
		WHERE parent->>'id' = ?0 AND parent IS NOT NULL AND archived_at IS NULL
			AND (?1 = '' OR parent->>'node' = ?1 AND (parent->>'gen')::bigint <> ?2)
		ORDER BY id`), id, node, keep).Scan(ctx, &ids)
	if err != nil && !isNoRows(err) {
		return nil, fmt.Errorf("finding the children of %s: %w", id, err)
	}
	return ids, nil
}

// Children are the unarchived children of execution id, of any of its map nodes.
func (s *Store) Children(ctx context.Context, id string) ([]string, error) {
	return s.children(ctx, id, "", 0)
}

// waitable is what WaitChildren's attempt must be, as it locks it: machine.Waitable.
var waitable = machine.Waitable.SQL("n", "e", "")

// WaitChildren makes c, a claimed attempt of a map node, wait for its children, in one
// transaction that holds the parent's lock and its progress row. With items, it starts a new
// generation, c's, computed with upstream revisions sig: one child of graph child for each item
// (its input values), keyed by ChildKey. Then, unless every child of the generation has ended, it
// makes c WAITING, at the execution's next revision, and reports true. A child that ends
// meanwhile waits for the progress row, and is counted after the commit: no end is missed.
//
// It returns ErrClaimLost if c no longer holds its claim.
func (s *Store) WaitChildren(ctx context.Context, c *Computation, child *graph.Graph, items []map[string]json.RawMessage, sig string) (bool, error) {
	rg, ok := s.Graph(child.Name(), child.Version())
	if !ok {
		return false, fmt.Errorf("%w: %q version %q, whose executions node %q starts; add it to Config.Graphs",
			ErrUnknownGraph, child.Name(), child.Version(), c.Node)
	}
	lane := LaneOf(c.ExecutionID)
	waiting := false
	err := s.own(ctx, func(ctx context.Context, t *txn) error {
		if err := t.begin(ctx); err != nil {
			return err
		}
		var paused, archived bool
		err := t.pg.QueryRow(ctx, s.q(`SELECT e.paused_at IS NOT NULL, e.archived_at IS NOT NULL FROM {s}.executions e
			JOIN {s}.nodes n ON n.lane = e.lane AND n.execution_id = e.id
			WHERE e.lane = $1 AND e.id = $2 AND n.lane = $1 AND n.node = $3 AND n.attempt_id = $4 AND `+waitable+`
				AND n.claim_token = $5::uuid FOR UPDATE OF e, n`), lane, c.ExecutionID, c.Node, c.ID, deref(c.ClaimToken)).Scan(&paused, &archived)
		if errors.Is(err, pgx.ErrNoRows) { // or its execution was canceled: its outcome, whatever it is, ends it CANCELED
			return fmt.Errorf("%w, or its execution was canceled", ErrClaimLost)
		}
		if err != nil {
			return fmt.Errorf("locking %s: %w", c.ExecutionID, err)
		}
		if items != nil {
			_, err := t.pg.Exec(ctx, s.q(`INSERT INTO {s}.map_progress (lane, execution_id, node, gen, sig, total, done)
				VALUES ($1, $2, $3, $4, $5, $6, 0)
				ON CONFLICT (lane, execution_id, node) DO UPDATE SET gen = excluded.gen, sig = excluded.sig, total = excluded.total, done = 0
				WHERE map_progress.gen <> excluded.gen`),
				lane, c.ExecutionID, c.Node, c.ID, sig, len(items))
			if err != nil {
				return fmt.Errorf("writing the progress of node %q of %s: %w", c.Node, c.ExecutionID, err)
			}
			// The children are made as the parent's pause or archive would have left them (cascade).
			var follow []machine.Event
			if paused {
				follow = append(follow, machine.Pause{})
			}
			if archived {
				follow = append(follow, machine.Archive{})
			}
			if err := s.startChildren(ctx, t, c, rg, items, follow); err != nil {
				return err
			}
		}
		t.tail = append(t.tail, step{s.q(`UPDATE {s}.nodes n SET state = 'WAITING', changed_at = coalesce($5::timestamptz, now()),
				rev = 1 + greatest((SELECT e.revision FROM {s}.executions e WHERE e.lane = $1 AND e.id = $2),
					(SELECT max(r.rev) FROM {s}.nodes r WHERE r.lane = $1 AND r.execution_id = $2))
			FROM {s}.map_progress p
			WHERE n.lane = $1 AND n.execution_id = $2 AND n.node = $3 AND n.attempt_id = $4
				AND p.lane = $1 AND p.execution_id = $2 AND p.node = $3 AND p.done < p.total
			RETURNING 1`), []any{lane, c.ExecutionID, c.Node, c.ID, s.clock.NowOrNil()}, func(br pgx.BatchResults) error {
			rows, err := br.Query()
			if err != nil {
				return err
			}
			n, err := pgx.CollectRows(rows, pgx.RowTo[int])
			waiting = len(n) > 0
			return err
		}})
		return nil
	})
	if err != nil {
		return false, err
	}
	return waiting, nil
}

// startChildren starts, in t, one execution of rg for each of items, as children of c's
// generation, each then taking the events follow. A key that an execution of another generation
// holds still is an error: its generation was not ended (EndChildren), and the attempt tries
// again.
func (s *Store) startChildren(ctx context.Context, t *txn, c *Computation, rg *graph.Graph, items []map[string]json.RawMessage, follow []machine.Event) error {
	keys, parents := make([]string, len(items)), make([]string, len(items))
	for i := range items {
		keys[i] = ChildKey(c.ExecutionID, c.Node, i)
		b, err := json.Marshal(Parent{ID: c.ExecutionID, Node: c.Node, Gen: c.ID, Index: i})
		if err != nil {
			return err
		}
		parents[i] = string(b)
	}
	ins, err := s.newInserts(slices.Repeat([]*graph.Graph{rg}, len(items)), keys, nil, nil)
	if err != nil {
		return err
	}
	ins.parents, ins.follow = parents, follow
	if _, _, err := s.startIn(ctx, t, rg, items, ins); err != nil {
		return err
	}
	for i, e := range ins.execs {
		if p := e.Parent; p == nil || p.ID != c.ExecutionID || p.Node != c.Node || p.Gen != c.ID {
			return fmt.Errorf("the key of child %d of node %q of %s is held by execution %s, of an earlier "+
				"generation; it is archived before this one starts", i, c.Node, c.ExecutionID, e.ID)
		}
	}
	return nil
}

// wake wakes the map node m, whose children have all ended (machine.Wake), if it still waits.
func (s *Store) wake(ctx context.Context, m mapRef) error {
	err := s.event(ctx, m.ID, nil, machine.Wake{Node: m.Node})
	if errors.Is(err, machine.ErrNothingToDo) {
		return nil
	}
	return err
}

// cascade carries the change c of execution id to those of its unarchived children that it
// changes, each in a transaction of its own (whose own cascade carries it to theirs): they are
// canceled, paused, resumed or archived with it. It returns how many children it wrote.
func (s *Store) cascade(ctx context.Context, id string, c machine.Cascade) (int, error) {
	var children []string
	err := s.db.NewRaw(s.q(`SELECT id FROM {s}.executions
		WHERE parent->>'id' = ? AND parent IS NOT NULL AND archived_at IS NULL
			AND (? AND canceled_at IS NULL OR ? AND paused_at IS NULL AND canceled_at IS NULL
				OR ? AND paused_at IS NOT NULL OR ?)
		ORDER BY id`), id, c.Cancel, c.Pause, c.Resume, c.Archive).Scan(ctx, &children)
	if err != nil && !isNoRows(err) {
		return 0, fmt.Errorf("finding the children of %s: %w", id, err)
	}
	var evs []machine.Event
	if c.Cancel {
		evs = append(evs, machine.Cancel{Reason: "its parent " + id + " was canceled: " + c.Reason})
	}
	if c.Pause || c.Resume {
		evs = append(evs, machine.Pause{Resume: c.Resume})
	}
	if c.Archive {
		evs = append(evs, machine.Archive{})
	}
	for _, child := range children {
		err := s.write(ctx, child, nil, func(_ context.Context, _ *txn, p *machine.Plan, env machine.Env) error {
			for _, ev := range evs {
				if err := p.Step(ev, env); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil && !errors.Is(err, ErrNotFound) {
			return 0, fmt.Errorf("child %s of %s: %w", child, id, err)
		}
	}
	return len(children), nil
}

// Repair does what a crash between a commit and what follows it (afterCommit), or a replica that
// had not heard of a change, left undone, up to limit of each: it wakes the map nodes that wait
// though their children have all ended; it carries the cancel, pause or archive of a parent to
// those of its children that do not follow it yet; it cancels the waiting attempts of archived
// executions (sweepArchived) and makes ready the PAUSED ones that nothing pauses any more
// (revivePaused). It returns how many executions it wrote. The sweeper runs it every so often
// (sweeper.Config.RepairEvery), beside its passes.
func (s *Store) Repair(ctx context.Context, limit int) (int, error) {
	archived, err := s.sweepArchived(ctx, limit)
	if err != nil {
		return archived, err
	}
	revived, err := s.revivePaused(ctx, limit)
	if err != nil {
		return archived + revived, err
	}
	n, err := s.repairCrashes(ctx, limit)
	return archived + revived + n, err
}

// repairCrashes wakes the map nodes that wait though their children have all ended, and carries
// a parent's change to the children that do not follow it (see Repair).
func (s *Store) repairCrashes(ctx context.Context, limit int) (int, error) {
	var full []mapRef
	err := s.db.NewRaw(s.q(`SELECT n.execution_id, n.node, true AS full FROM {s}.nodes n
		JOIN {s}.map_progress m ON m.lane = n.lane AND m.execution_id = n.execution_id AND m.node = n.node
		WHERE n.state = 'WAITING' AND m.done >= m.total AND n.graph_key IN (?)
		ORDER BY n.execution_id, n.node LIMIT ?`), bun.List(s.keys), limit).Scan(ctx, &full)
	if err != nil && !isNoRows(err) {
		return 0, fmt.Errorf("finding the map nodes whose children have ended: %w", err)
	}
	n := 0
	for _, m := range full {
		if err := s.wake(ctx, m); err != nil {
			return n, fmt.Errorf("waking node %q of %s: %w", m.Node, m.ID, err)
		}
		n++
	}
	// The parents of the children that may run, then those of them that a change asks the children
	// to follow: a statement each, as on Citus a child and its parent are in lanes of their own. (A
	// canceled child left unarchived under an archived parent runs nothing, and is left so.)
	var parents []string
	err = s.db.NewRaw(s.q(`SELECT DISTINCT parent->>'id' FROM {s}.executions
		WHERE parent IS NOT NULL AND archived_at IS NULL AND canceled_at IS NULL
			AND graph_name || '@' || graph_version IN (?)
		LIMIT ?`), bun.List(s.keys), limit).Scan(ctx, &parents)
	if err != nil && !isNoRows(err) {
		return n, fmt.Errorf("finding the parents of running children: %w", err)
	}
	if len(parents) == 0 {
		return n, nil
	}
	lanes := make([]int16, len(parents))
	for i, id := range parents {
		lanes[i] = LaneOf(id)
	}
	var changed []struct {
		ID       string  `bun:"id"`
		Reason   *string `bun:"cancel_reason"`
		Canceled bool    `bun:"canceled"`
		Paused   bool    `bun:"paused"`
		Archived bool    `bun:"archived"`
	}
	err = s.db.NewRaw(s.q(`SELECT e.id, e.cancel_reason, e.canceled_at IS NOT NULL AS canceled, e.paused_at IS NOT NULL AS paused,
			e.archived_at IS NOT NULL AS archived
		FROM `+executionKeys("?0", "?1")+` k JOIN {s}.executions e ON e.lane = k.lane AND e.id = k.id
		WHERE (e.canceled_at IS NOT NULL OR e.paused_at IS NOT NULL OR e.archived_at IS NOT NULL)`+s.pinned("e", "?0")),
		pgdialect.Array(lanes), pgdialect.Array(parents)).Scan(ctx, &changed)
	if err != nil && !isNoRows(err) {
		return n, fmt.Errorf("reading the parents of running children: %w", err)
	}
	for _, p := range changed {
		c := machine.Cascade{Cancel: p.Canceled, Reason: deref(p.Reason), Pause: p.Paused && !p.Canceled, Archive: p.Archived}
		written, err := s.cascade(ctx, p.ID, c)
		n += written
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// ChildResult is a child's end, as its map node reads it.
type ChildResult struct {
	ID    string `bun:"id"`
	Index int    `bun:"index"`
	// Ended: the child completed, failed for good, or was canceled or archived; Completed tells
	// the first apart, with its result, Value. Error says why another ended.
	Ended     bool            `bun:"ended"`
	Completed bool            `bun:"completed"`
	Value     json.RawMessage `bun:"value"`
	Error     string          `bun:"error"`
}

// ChildResults reads the children of generation gen of the map node of execution id, in order:
// their ends, and their results, the value of node result of each, or, for result "", the
// object of its values by node.
func (s *Store) ChildResults(ctx context.Context, id, node string, gen int64, result string) ([]*ChildResult, error) {
	var out []*ChildResult
	err := s.db.NewRaw(s.q(`SELECT e.id, (e.parent->>'index')::int AS index, e.ended_at IS NOT NULL AS ended,
			EXISTS (SELECT 1 FROM {s}.notification_claims x WHERE x.lane = e.lane AND x.execution_id = e.id
				AND x.event = 'execution.completed') AS completed,
			CASE WHEN ?3 = '' THEN (SELECT coalesce(jsonb_object_agg(v.node, v.value), '{}') FROM {s}.nodes v
					WHERE v.lane = e.lane AND v.execution_id = e.id AND v.value IS NOT NULL)
				ELSE (SELECT v.value FROM {s}.nodes v WHERE v.lane = e.lane AND v.execution_id = e.id AND v.node = ?3) END AS value,
			coalesce(CASE WHEN e.canceled_at IS NOT NULL THEN 'canceled: ' || e.cancel_reason
				WHEN e.archived_at IS NOT NULL THEN 'archived'
				ELSE (SELECT f->>'node' || ': ' || coalesce(f->>'error', '') FROM {s}.notification_claims x,
						jsonb_array_elements(x.failed_nodes) AS f
					WHERE x.lane = e.lane AND x.execution_id = e.id AND x.event = 'execution.failed' AND x.phase = e.failure_phase
					LIMIT 1) END, '') AS error
		FROM {s}.executions e
		WHERE e.parent->>'id' = ?0 AND e.parent IS NOT NULL AND e.parent->>'node' = ?1 AND (e.parent->>'gen')::bigint = ?2
		ORDER BY index`), id, node, gen, result).Scan(ctx, &out)
	if err != nil && !isNoRows(err) {
		return nil, fmt.Errorf("reading the children of node %q of %s: %w", node, id, err)
	}
	return out, nil
}
