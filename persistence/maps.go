package persistence

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"

	"github.com/jackc/pgx/v5"

	"github.com/journey-go/journey/graph"
)

// A map node (graph.Map, graph.Child) starts child executions, then waits for them to end
// without holding a claim:
//
//  1. Its attempt runs like a compute node's, on a replica that claims it. The first time for
//     its upstream values, it computes the items, ends the children of the values before
//     (EndChildren), and starts one child per item in the transaction that writes the node's
//     progress and makes it WAITING (WaitChildren). The progress row is the node's generation: the
//     attempt that started it, and the upstream revisions it was computed with (sig).
//  2. Each child's end is counted in the progress, once, in the transaction that claims the
//     child's completed, failed or canceled event (reportsQuery). The last makes the node
//     AVAILABLE again.
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
	return p != nil && sameSignature(p.Sig, parseSignature(c.ComputedWith))
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
		err := s.write(ctx, child, nil, func(_ context.Context, t *txn, st *execState) error {
			t.cancel(st, reason)
			return st.archive(true)
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

// WaitChildren makes c, a claimed attempt of a map node, wait for its children, in one
// transaction that holds the parent's lock and its progress row. With items, it starts a new
// generation, c's, computed with upstream revisions sig: one child of graph child for each item
// (its input values), keyed by ChildKey. Without, it counts again the ended children of the
// generation that the progress holds. Then, unless every child of the generation has ended, it
// makes c WAITING, and reports true. A child that ends meanwhile waits for the progress row, and
// counts itself after the commit: no end is missed.
//
// It returns ErrClaimLost if c no longer holds its claim.
func (s *Store) WaitChildren(ctx context.Context, c *Computation, child *graph.Graph, items []map[string]json.RawMessage, sig string) (bool, error) {
	rg, ok := s.Graph(child.Name(), child.Version())
	if !ok {
		return false, fmt.Errorf("%w: %q version %q, whose executions node %q starts; add it to Config.Graphs",
			ErrUnknownGraph, child.Name(), child.Version(), c.Node)
	}
	lane := LaneOf(c.ExecutionID)
	var states []*execState
	waiting := false
	err := s.own(ctx, func(ctx context.Context, t *txn) error {
		if err := t.begin(ctx); err != nil {
			return err
		}
		var holds bool
		err := t.pg.QueryRow(ctx, s.q(`SELECT EXISTS (SELECT 1 FROM {s}.executions e
			JOIN {s}.nodes n ON n.lane = e.lane AND n.execution_id = e.id
			WHERE e.lane = $1 AND e.id = $2 AND n.lane = $1 AND n.node = $3 AND n.attempt_id = $4 AND n.state = 'RUNNING'
				AND n.claim_token = $5::uuid FOR UPDATE OF e, n)`), lane, c.ExecutionID, c.Node, c.ID, deref(c.ClaimToken)).Scan(&holds)
		if err != nil {
			return fmt.Errorf("locking %s: %w", c.ExecutionID, err)
		}
		if !holds {
			return ErrClaimLost
		}
		if items == nil {
			gen := `(SELECT gen FROM {s}.map_progress WHERE lane = $1 AND execution_id = $2 AND node = $3)`
			_, err := t.pg.Exec(ctx, s.q(recount("$1", "$2", "$3", gen)), lane, c.ExecutionID, c.Node)
			if err != nil {
				return fmt.Errorf("counting the children of %s: %w", c.ExecutionID, err)
			}
		} else {
			_, err := t.pg.Exec(ctx, s.q(`INSERT INTO {s}.map_progress (lane, execution_id, node, gen, sig, total, done)
				VALUES ($1, $2, $3, $4, $5, $6, 0)
				ON CONFLICT (lane, execution_id, node) DO UPDATE SET gen = excluded.gen, sig = excluded.sig, total = excluded.total, done = 0
				WHERE map_progress.gen <> excluded.gen`),
				lane, c.ExecutionID, c.Node, c.ID, sig, len(items))
			if err != nil {
				return fmt.Errorf("writing the progress of node %q of %s: %w", c.Node, c.ExecutionID, err)
			}
			if states, err = s.startChildren(ctx, t, c, rg, items); err != nil {
				return err
			}
		}
		t.tail = append(t.tail, step{s.q(`UPDATE {s}.nodes n SET state = 'WAITING', changed_at = coalesce($5::timestamptz, now()),
				rev = (SELECT max(r.rev) + 1 FROM {s}.nodes r WHERE r.lane = $1 AND r.execution_id = $2)
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
	s.committed(ctx, states)
	return waiting, nil
}

// startChildren starts, in t, one execution of rg for each of items, as children of c's
// generation. A key that an execution of another generation holds still is an error: its
// generation was not ended (EndChildren), and the attempt tries again.
func (s *Store) startChildren(ctx context.Context, t *txn, c *Computation, rg *graph.Graph, items []map[string]json.RawMessage) ([]*execState, error) {
	keys, parents := make([]string, len(items)), make([]string, len(items))
	for i := range items {
		keys[i] = ChildKey(c.ExecutionID, c.Node, i)
		b, err := json.Marshal(Parent{ID: c.ExecutionID, Node: c.Node, Gen: c.ID, Index: i})
		if err != nil {
			return nil, err
		}
		parents[i] = string(b)
	}
	ins, err := s.newInserts(slices.Repeat([]*graph.Graph{rg}, len(items)), keys, nil, nil)
	if err != nil {
		return nil, err
	}
	ins.parents = parents
	states, _, err := s.startIn(ctx, t, rg, items, ins)
	if err != nil {
		return nil, err
	}
	for i, e := range ins.execs {
		if p := e.Parent; p == nil || p.ID != c.ExecutionID || p.Node != c.Node || p.Gen != c.ID {
			return nil, fmt.Errorf("the key of child %d of node %q of %s is held by execution %s, of an earlier "+
				"generation; it is archived before this one starts", i, c.Node, c.ExecutionID, e.ID)
		}
	}
	return states, nil
}

// recount counts again the ended children of a generation of a map node, a row of map_progress:
// lane, id, node and gen are the SQL of its columns' values. The count reads no column of the
// row: Citus runs no subquery of a distributed table that refers to a table outside it.
func recount(lane, id, node, gen string) string {
	return `UPDATE {s}.map_progress m SET done = (SELECT count(*) FROM {s}.executions e
			WHERE e.parent->>'id' = ` + id + ` AND e.parent IS NOT NULL AND e.parent->>'node' = ` + node + `
				AND (e.parent->>'gen')::bigint = ` + gen + ` AND (` + childEnded + `))
		WHERE m.lane = ` + lane + ` AND m.execution_id = ` + id + ` AND m.node = ` + node + ` AND m.gen = ` + gen
}

// Recount counts again the ended children of the generation of p, a child's parent, and makes the
// map node, if it waits, AVAILABLE once they have all ended: after a change that ends a child
// without an event to count it, such as an Archive.
func (s *Store) Recount(ctx context.Context, p *Parent) error {
	var woken []int
	err := s.db.NewRaw(s.q(`WITH p AS (`+recount("?0", "?1", "?2", "?3")+`
			RETURNING m.lane, m.execution_id, m.node, m.done >= m.total AS full)
		`+wakeMaps("(SELECT coalesce(?4::timestamptz, now()) AS now)", "?0")), LaneOf(p.ID), p.ID, p.Node, p.Gen, s.clock.NowOrNil()).Scan(ctx, &woken)
	if err != nil && !isNoRows(err) {
		return fmt.Errorf("counting the children of node %q of %s: %w", p.Node, p.ID, err)
	}
	if len(woken) > 0 {
		return s.notify(ctx, s.db, PayloadWork)
	}
	return nil
}

// wakeMaps makes AVAILABLE, at the time that now selects, the WAITING map nodes of p (a CTE of
// map_progress rows counted again: lane, execution_id, node, full) whose children have all ended,
// for a replica to claim and collect; it returns a row for each. lanes is the SQL of p's lanes (a
// lane, or ANY of an array), for Citus to send the update to their shards alone.
func wakeMaps(now, lanes string) string {
	return `UPDATE {s}.nodes n SET state = 'AVAILABLE', available_at = t.now, run_at = t.now
		FROM p, ` + now + ` t
		WHERE p.full AND n.lane = ` + lanes + ` AND n.lane = p.lane AND n.execution_id = p.execution_id AND n.node = p.node AND n.state = 'WAITING'
		RETURNING 1`
}

// childEnded holds for a child execution e that has ended, as its map node counts it: it
// completed, failed for good, or was canceled or archived.
const childEnded = `e.archived_at IS NOT NULL OR e.canceled_at IS NOT NULL
	OR EXISTS (SELECT 1 FROM {s}.notification_claims x WHERE x.lane = e.lane AND x.execution_id = e.id
		AND (x.event = 'execution.completed' OR x.event = 'execution.failed' AND x.phase = e.failure_phase))`

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
	err := s.db.NewRaw(s.q(`SELECT e.id, (e.parent->>'index')::int AS index, (`+childEnded+`) AS ended,
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
