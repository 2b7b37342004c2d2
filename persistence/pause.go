package persistence

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/journey-go/journey/persistence/machine"
	"github.com/uptrace/bun"
)

// PayloadGraphs is the NOTIFY payload that announces a graph version paused or resumed: the
// replicas read the paused versions again (RefreshPaused).
const PayloadGraphs = "g"

// SetGraphPaused pauses or resumes a graph version, with no graph code: it marks the version, in
// a transaction of its own, then moves the waiting attempts of its executions (machine.HoldGraph),
// an execution at a time: to PAUSED, or, resuming, those of executions not paused themselves
// ready again, each keeping its run_at. The replicas learn it by NOTIFY: from then on they claim
// none of the version's work, and their writes make its attempts PAUSED (see machine.Env.Held).
// An attempt that a replica made in the moment before it heard waits AVAILABLE or PENDING,
// unclaimed, and runs after the resume; one that a replica made PAUSED in the moment before it
// heard of a resume is made ready by the sweep (Revive). It reports whether the version changed;
// a version no replica has recorded is ErrUnknownGraph.
func (s *Store) SetGraphPaused(ctx context.Context, name, version string, paused bool) (bool, error) {
	if err := checkTexts("graph", name, "version", version); err != nil {
		return false, err
	}
	changed := false
	err := s.inTx(ctx, func(ctx context.Context, tx bun.Tx) error {
		var versions []GraphVersion
		err := tx.NewRaw(s.q(`SELECT `+cols("", versionColumns)+` FROM {s}.graph_versions WHERE graph_name = ? AND graph_version = ?
			FOR UPDATE`), name, version).Scan(ctx, &versions)
		if err != nil && !isNoRows(err) {
			return fmt.Errorf("reading graph %q version %q: %w", name, version, err)
		}
		switch {
		case len(versions) == 0:
			return fmt.Errorf("%w: no replica has recorded graph %q version %q in schema %s", ErrUnknownGraph, name, version, s.schema)
		case (versions[0].PausedAt != nil) == paused:
			return nil
		}
		changed = true
		if _, err := tx.NewRaw(s.q(`UPDATE {s}.graph_versions SET paused_at = CASE WHEN ? THEN coalesce(?::timestamptz, now()) END
			WHERE graph_name = ? AND graph_version = ?`), paused, s.clock.NowOrNil(), name, version).Exec(ctx); err != nil {
			return fmt.Errorf("marking graph %q version %q: %w", name, version, err)
		}
		return s.notify(ctx, tx, PayloadGraphs)
	})
	if err != nil || !changed {
		return changed, err
	}
	// The waiting attempts, an execution at a time, until none is left to move: a replica that
	// had not heard may make more meanwhile, which later passes, or the claims' skipping of a
	// paused version, take care of.
	states, rule := []string{StatePending, StateAvailable}, "paused"
	if !paused {
		states, rule = []string{StatePaused}, "resumed"
	}
	// A page of executions a transaction: their attempts move together, and a resume keeps the
	// queue's order, which claims read as they come.
	key := GraphKey(name, version)
	for range maxHoldPasses {
		ids, err := s.executionsWith(ctx, key, states, holdBatch)
		if err != nil || len(ids) == 0 {
			return true, err
		}
		moved, err := s.eventMany(ctx, ids, key, machine.HoldGraph{Resume: !paused})
		if err != nil {
			return true, fmt.Errorf("moving the waiting attempts of graph %q version %q, %s: %w", name, version, rule, err)
		}
		if moved == 0 {
			return true, nil // what is left waits for an execution paused itself
		}
	}
	return true, nil
}

// eventMany runs ev on the executions ids of graph version key, locked and loaded together, in
// one transaction, and returns how many it changed. An execution of another version (moved since)
// is left as it is.
func (s *Store) eventMany(ctx context.Context, ids []string, key string, ev machine.Event) (int, error) {
	var ps []*machine.Plan
	err := s.inTxn(ctx, s.db, func(ctx context.Context, t *txn) error {
		xs, now, err := s.load(ctx, t, ids, nil, nil)
		if err != nil {
			return err
		}
		ps = ps[:0]
		for _, x := range xs {
			if x.GraphKey != key {
				continue
			}
			p, err := machine.Step(x, ev, s.env(ctx, now, x.GraphKey))
			switch {
			case errors.Is(err, machine.ErrNothingToDo):
			case err != nil:
				return fmt.Errorf("%s: %w", x.Exec.ID, err)
			case p.Revision() != x.Exec.Revision:
				ps = append(ps, p)
			}
		}
		if len(ps) == 0 {
			return nil
		}
		s.mark(t, xs)
		return s.finish(ctx, t, ps, false)
	})
	return len(ps), err
}

// SetGraphPaused moves the waiting attempts holdBatch executions at a time, in maxHoldPasses
// passes at most.
const (
	holdBatch     = 1000
	maxHoldPasses = 100
)

// executionsWith returns up to limit executions of graph version key that have an attempt in one
// of states: the executions not paused themselves, for PAUSED.
func (s *Store) executionsWith(ctx context.Context, key string, states []string, limit int) ([]string, error) {
	var ids []string
	err := s.db.NewRaw(s.q(`SELECT DISTINCT n.execution_id FROM {s}.nodes n
		JOIN {s}.executions e ON e.lane = n.lane AND e.id = n.execution_id
		WHERE n.graph_key = ? AND n.state IN (?) AND (n.state <> 'PAUSED' OR e.paused_at IS NULL)
		LIMIT ?`), key, bun.List(states), limit).Scan(ctx, &ids)
	if err != nil && !isNoRows(err) {
		return nil, fmt.Errorf("finding the executions of %s with attempts %s: %w", key, strings.Join(states, ", "), err)
	}
	return ids, nil
}

// RefreshPaused reads which graph versions are paused, for the claims and writes of this replica.
func (s *Store) RefreshPaused(ctx context.Context) error {
	var keys []string
	err := s.db.NewRaw(s.q(`SELECT graph_name || '@' || graph_version FROM {s}.graph_versions WHERE paused_at IS NOT NULL`)).Scan(ctx, &keys)
	if err != nil && !isNoRows(err) {
		return fmt.Errorf("reading the paused graph versions: %w", err)
	}
	paused := make(map[string]bool, len(keys))
	for _, k := range keys {
		paused[k] = true
	}
	s.paused.Store(&paused)
	return nil
}

// held reports whether graph key is paused, as this replica last heard.
func (s *Store) held(key string) bool {
	p := s.paused.Load()
	return p != nil && (*p)[key]
}

// pausedKeys are the graph keys that are paused, as this replica last heard: no promotion makes
// their attempts AVAILABLE (machine.Promote), as no claim takes them. Never nil: an array, for SQL.
func (s *Store) pausedKeys() []string {
	keys := []string{}
	if p := s.paused.Load(); p != nil {
		for k, held := range *p {
			if held {
				keys = append(keys, k)
			}
		}
	}
	return keys
}

// claimKeys are the served graph keys that are not paused, as this replica last heard.
func (s *Store) claimKeys() []string {
	p := s.paused.Load()
	if p == nil || len(*p) == 0 {
		return s.keys
	}
	keys := make([]string, 0, len(s.keys))
	for _, k := range s.keys {
		if !(*p)[k] {
			keys = append(keys, k)
		}
	}
	return keys
}

// revivePaused makes ready, up to limit executions, the PAUSED attempts that nothing pauses any
// more (machine.Revive): of graph versions that run, in executions that are not paused. A replica
// that had not heard of a ResumeGraph yet made them so, and they would wait for good. Most passes
// find nothing to revive, in nodes_paused_idx, and stop there.
func (s *Store) revivePaused(ctx context.Context, limit int) (int, error) {
	var running []string // the served versions that run, read first: on Citus, no statement joins them with the nodes
	err := s.db.NewRaw(s.q(`SELECT graph_name || '@' || graph_version FROM {s}.graph_versions
		WHERE paused_at IS NULL AND graph_name || '@' || graph_version IN (?)`), bun.List(s.keys)).Scan(ctx, &running)
	if err != nil && !isNoRows(err) {
		return 0, fmt.Errorf("reading the graph versions that run: %w", err)
	}
	if len(running) == 0 {
		return 0, nil
	}
	var ids []string
	err = s.db.NewRaw(s.q(`SELECT DISTINCT c.execution_id FROM {s}.nodes c JOIN {s}.executions e ON e.lane = c.lane AND e.id = c.execution_id
		WHERE c.state = 'PAUSED' AND c.graph_key IN (?) AND e.paused_at IS NULL
		LIMIT ?`), bun.List(running), limit).Scan(ctx, &ids)
	if err != nil && !isNoRows(err) {
		return 0, fmt.Errorf("finding the attempts that no pause holds: %w", err)
	}
	revived := 0
	for _, id := range ids {
		switch err := s.event(ctx, id, s.boundLocks, machine.Revive{}); {
		case err == nil:
			revived++
		case ctx.Err() != nil:
			return revived, ctx.Err()
		default:
			s.logger.Warn("making ready the attempts that no pause holds failed; the next sweep tries again", "execution_id", id, "error", err)
		}
	}
	if revived > 0 {
		s.logger.Warn("made ready attempts left PAUSED by a replica that had not heard of a resume", "executions", revived)
	}
	return revived, nil
}
