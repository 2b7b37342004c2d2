package persistence

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"

	"github.com/journey-go/journey/graph"
)

// fenced matches a row only while the claim that produced it still holds. Its arguments are the
// computation id, the replica id and the claim token.
const fenced = "id = ? AND state = 'RUNNING' AND replica_id = ? AND claim_token = ?::uuid"

// Claim takes up to limit AVAILABLE computations of the served graphs for replicaID, oldest
// first, skipping rows that other replicas are claiming. Each claimed row gets a fresh claim token,
// its deadlines, and bumps its execution's revision.
func (s *Store) Claim(ctx context.Context, replicaID string, limit int) ([]*Computation, error) {
	if limit <= 0 || len(s.keys) == 0 {
		return nil, nil
	}
	var claimed []*Computation
	err := s.inTx(ctx, func(ctx context.Context, tx bun.Tx) error {
		err := tx.NewRaw(s.q(`WITH t AS (SELECT coalesce(?::timestamptz, now()) AS now)
			UPDATE {s}.computations c
			SET state = 'RUNNING', replica_id = ?, claim_token = gen_random_uuid(), claimed_at = t.now,
				deadline = t.now + c.abandon_after_ms * interval '1 millisecond',
				heartbeat_deadline = t.now + c.heartbeat_timeout_ms * interval '1 millisecond',
				last_heartbeat_at = t.now
			FROM t
			WHERE c.id IN (
				SELECT id FROM {s}.computations
				WHERE state = 'AVAILABLE' AND graph_key IN (?)
					AND NOT EXISTS (SELECT 1 FROM {s}.executions e
						WHERE e.id = execution_id AND e.archived_at IS NOT NULL)
				ORDER BY id LIMIT ?
				FOR UPDATE SKIP LOCKED)
			RETURNING c.*`),
			s.clock.NowOrNil(), replicaID, bun.List(s.keys), limit).Scan(ctx, &claimed)
		if err != nil && !isNoRows(err) {
			return fmt.Errorf("claiming computations: %w", err)
		}
		if len(claimed) == 0 {
			return nil
		}
		// A claim is a revision of its execution. Lock the rows in id order so that two claimers
		// never wait on each other.
		bump := map[string]int64{}
		for _, c := range claimed {
			bump[c.ExecutionID]++
		}
		ids := make([]string, 0, len(bump))
		incs := make([]int64, 0, len(bump))
		for id, n := range bump {
			ids = append(ids, id)
			incs = append(incs, n)
		}
		_, err = tx.NewRaw(s.q(`WITH r AS (SELECT * FROM unnest(?::text[], ?::bigint[]) AS r(id, n)),
			locked AS (SELECT e.id FROM {s}.executions e JOIN r USING (id) ORDER BY e.id FOR UPDATE OF e)
			UPDATE {s}.executions e SET revision = e.revision + r.n
			FROM r, locked WHERE e.id = r.id AND locked.id = r.id`),
			pgdialect.Array(ids), pgdialect.Array(incs)).Exec(ctx)
		if err != nil {
			return fmt.Errorf("bumping revisions of claimed executions: %w", err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return claimed, nil
}

// ClaimRef identifies a claim for a fenced write.
type ClaimRef struct {
	ID    int64
	Token string
}

// Ref returns the claim reference of a claimed computation.
func (c *Computation) Ref() ClaimRef {
	ref := ClaimRef{ID: c.ID}
	if c.ClaimToken != nil {
		ref.Token = *c.ClaimToken
	}
	return ref
}

// Heartbeat extends the heartbeat deadlines of the given claims of replicaID, in one statement.
// It returns the ids whose claim still holds; a missing id lost its claim.
func (s *Store) Heartbeat(ctx context.Context, replicaID string, refs []ClaimRef) (map[int64]bool, error) {
	ids := make([]int64, len(refs))
	tokens := make([]string, len(refs))
	for i, r := range refs {
		ids[i], tokens[i] = r.ID, r.Token
	}
	var alive []int64
	err := s.db.NewRaw(s.q(`WITH t AS (SELECT coalesce(?::timestamptz, now()) AS now)
		UPDATE {s}.computations c
		SET heartbeat_deadline = t.now + c.heartbeat_timeout_ms * interval '1 millisecond', last_heartbeat_at = t.now
		FROM t, unnest(?::bigint[], ?::uuid[]) AS r(id, token)
		WHERE c.id = r.id AND c.claim_token = r.token AND c.state = 'RUNNING' AND c.replica_id = ?
		RETURNING c.id`),
		s.clock.NowOrNil(), pgdialect.Array(ids), pgdialect.Array(tokens), replicaID).Scan(ctx, &alive)
	if err != nil && !isNoRows(err) {
		return nil, fmt.Errorf("extending heartbeats: %w", err)
	}
	out := make(map[int64]bool, len(alive))
	for _, id := range alive {
		out[id] = true
	}
	return out, nil
}

// fence moves a claimed computation out of RUNNING, if its claim still holds.
func (s *Store) fence(ctx context.Context, tx bun.IDB, c *Computation, state string, errText *string, used map[string]int64) error {
	computedWith := c.ComputedWith
	if used != nil {
		computedWith = signature(used).String()
	}
	res, err := tx.NewRaw(s.q(`UPDATE {s}.computations
		SET state = ?, error = ?, computed_with = ?::jsonb, finished_at = coalesce(?::timestamptz, now())
		WHERE `+fenced), state, errText, computedWith, s.clock.NowOrNil(), c.ID, c.ReplicaID, c.ClaimToken).Exec(ctx)
	if err != nil {
		return fmt.Errorf("finishing computation %d: %w", c.ID, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("%w: computation %d of %q in %s", ErrClaimLost, c.ID, c.Node, c.ExecutionID)
	}
	c.State, c.Error, c.ComputedWith = state, errText, computedWith
	return nil
}

// Complete records a successful attempt and its value in one transaction, fenced by the claim:
// if the claim was lost it writes nothing and returns ErrClaimLost. used holds the upstream
// revisions the function read. A value equal to the stored one keeps its revision.
func (s *Store) Complete(ctx context.Context, c *Computation, result json.RawMessage, used map[string]int64) error {
	fence := func(ctx context.Context, tx bun.Tx) error { return s.fence(ctx, tx, c, StateSuccess, nil, used) }
	return s.write(ctx, c.ExecutionID, fence, func(ctx context.Context, tx bun.Tx, st *execState) error {
		st.revision++
		st.promote = c.gated() // its slot is free
		n, _ := st.g.Node(c.Node)
		switch {
		case !n.Gate().Holds(st.values):
			reason := "canceled: gate no longer holds"
			_, err := tx.NewRaw(s.q("UPDATE {s}.computations SET state = ?, error = ? WHERE id = ?"),
				StateCanceled, reason, c.ID).Exec(ctx)
			if err != nil {
				return fmt.Errorf("canceling computation %d: %w", c.ID, err)
			}
			c.State, c.Error = StateCanceled, &reason
		case n.Kind() == graph.KindMutate:
			if err := s.mutate(ctx, tx, st, n, result); err != nil {
				return err
			}
		default:
			if _, err := s.upsertValue(ctx, tx, st, c.Node, result, nil, st.revision); err != nil {
				return err
			}
		}
		st.latest[c.Node] = c
		return s.advance(ctx, tx, st)
	})
}

// Fail records a failed attempt, fenced by the claim. While attempts remain and the error is not
// permanent, the next attempt is created with the node's backoff; otherwise the node has failed.
func (s *Store) Fail(ctx context.Context, c *Computation, cause error) error {
	msg := cause.Error()
	fence := func(ctx context.Context, tx bun.Tx) error { return s.fence(ctx, tx, c, StateFailed, &msg, nil) }
	return s.write(ctx, c.ExecutionID, fence, func(ctx context.Context, tx bun.Tx, st *execState) error {
		st.revision++
		st.promote = c.gated() // its slot is free
		return s.afterFailure(ctx, tx, st, c, cause, graph.IsPermanent(cause))
	})
}

// afterFailure schedules the next attempt of a failed or abandoned computation, or, when its
// attempts are used up (or the failure is permanent), records that the node has failed.
func (s *Store) afterFailure(ctx context.Context, tx bun.IDB, st *execState, c *Computation, cause error, permanent bool) error {
	n, ok := st.g.Node(c.Node)
	if !ok {
		return fmt.Errorf("%w: graph %q has no node %q", ErrUnknownNode, st.g.Name(), c.Node)
	}
	if !permanent && c.Attempt < c.MaxAttempts {
		next, err := s.insertComputation(ctx, tx, st, n, c.Attempt+1, parseSignature(c.ComputedWith),
			n.Settings().Backoff(c.Attempt))
		if err != nil {
			return err
		}
		st.latest[c.Node] = next
		return nil
	}
	st.latest[c.Node] = c
	st.changed = true // waiters on this node learn that it failed
	if err := s.claimEvent(ctx, tx, st, EventFailed); err != nil {
		return err
	}
	if n.Settings().OnSave != nil || st.g.OnSave() != nil {
		st.saved = append(st.saved, graph.SaveEvent{
			ExecutionID: st.exec.ID, Graph: st.g.Name(), Node: c.Node,
			Err: fmt.Errorf("node %q failed after %d attempt(s): %w", c.Node, c.Attempt, cause),
		})
	}
	return nil
}

// Release hands the RUNNING computations of replicaID back to AVAILABLE without consuming an
// attempt, for a graceful stop. Their claims are void, so late results are dropped.
func (s *Store) Release(ctx context.Context, replicaID string) (int, error) {
	var ids []int64
	err := s.inTx(ctx, func(ctx context.Context, tx bun.Tx) error {
		err := tx.NewRaw(s.q(`UPDATE {s}.computations
			SET state = 'AVAILABLE', replica_id = NULL, claim_token = NULL, claimed_at = NULL,
				deadline = NULL, heartbeat_deadline = NULL, last_heartbeat_at = NULL
			WHERE state = 'RUNNING' AND replica_id = ?
			RETURNING id`), replicaID).Scan(ctx, &ids)
		if err != nil && !isNoRows(err) {
			return fmt.Errorf("releasing computations of replica %s: %w", replicaID, err)
		}
		if len(ids) == 0 {
			return nil
		}
		return s.notify(ctx, tx, PayloadWork)
	})
	return len(ids), err
}

// mutate writes a mutate node's result into its targets. By default a target keeps its revision,
// so nothing downstream recomputes; with UpdateRevisionOnChange, a target whose value changed gets
// the completion's revision. The node's own value records what it wrote.
func (s *Store) mutate(ctx context.Context, tx bun.IDB, st *execState, n graph.Node, result json.RawMessage) error {
	targets := n.Targets()
	for _, target := range targets {
		rev := st.revision
		if old, ok := st.values[target]; ok && !n.Settings().UpdateRevisionOnChange {
			rev = old.Revision
		}
		if _, err := s.upsertValue(ctx, tx, st, target, result, nil, rev); err != nil {
			return err
		}
	}
	own, err := json.Marshal(map[string]any{"mutated": targets, "value": result})
	if err != nil {
		return fmt.Errorf("recording mutate %q: %w", n.Name(), err)
	}
	_, err = s.upsertValue(ctx, tx, st, n.Name(), own, nil, st.revision)
	return err
}
