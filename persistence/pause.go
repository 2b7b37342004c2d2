package persistence

import (
	"context"
	"fmt"

	"github.com/uptrace/bun"
)

// PayloadGraphs is the NOTIFY payload that announces a graph version paused or resumed: the
// replicas read the paused versions again (RefreshPaused).
const PayloadGraphs = "g"

// SetGraphPaused pauses or resumes a graph version, with no graph code, in one transaction: it
// marks the version, and moves the waiting attempts of its executions to PAUSED, or, resuming,
// makes those of executions not paused themselves ready again, each keeping its run_at. The
// replicas learn it by NOTIFY: from then on they claim none of the version's work, and their
// writes make its attempts PAUSED (see execState.held). An attempt that a replica made in the
// moment before it heard waits AVAILABLE or PENDING, unclaimed, and runs after the resume. It
// reports whether the version changed; a version no replica has recorded is ErrUnknownGraph.
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
		key := GraphKey(name, version)
		if _, err := tx.NewRaw(s.q(`UPDATE {s}.graph_versions SET paused_at = CASE WHEN ? THEN coalesce(?::timestamptz, now()) END
			WHERE graph_name = ? AND graph_version = ?`), paused, s.clock.NowOrNil(), name, version).Exec(ctx); err != nil {
			return fmt.Errorf("marking graph %q version %q: %w", name, version, err)
		}
		move := tx.NewRaw(s.q(`UPDATE {s}.nodes n SET state = 'PAUSED' WHERE n.graph_key = ? AND n.state IN ('PENDING', 'AVAILABLE')`), key)
		if !paused {
			now, err := s.now(ctx, tx) // a value: Citus refuses now() in a CASE
			if err != nil {
				return err
			}
			move = tx.NewRaw(s.q(`UPDATE {s}.nodes n SET available_at = ?1, state = `+readyState("?1")+`
				FROM {s}.executions e
				WHERE e.lane = n.lane AND e.id = n.execution_id AND n.graph_key = ?0 AND n.state = 'PAUSED' AND e.paused_at IS NULL`),
				key, now)
		}
		if _, err := move.Exec(ctx); err != nil {
			return fmt.Errorf("moving the waiting attempts of graph %q version %q: %w", name, version, err)
		}
		for _, payload := range []string{PayloadGraphs, PayloadPromote, PayloadWork} {
			if err := s.notify(ctx, tx, payload); err != nil {
				return err
			}
		}
		return nil
	})
	return changed, err
}

// readyState is the state of a PAUSED attempt n made ready at now: AVAILABLE if it is due and
// waits for no concurrency key, parallel limit or rate limit, else PENDING, for its time or its
// promotion.
func readyState(now string) string {
	return `CASE WHEN n.run_at <= ` + now + ` AND n.concurrency_key IS NULL AND n.max_parallel IS NULL AND n.rate_key IS NULL
		THEN 'AVAILABLE' ELSE 'PENDING' END`
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

// revivePaused makes ready, up to limit a lane, the PAUSED attempts that nothing pauses any more:
// of graph versions that run, in executions that are not paused. A replica that had not heard of
// a ResumeGraph yet made them so, and they would wait for good. The versions that run are read
// FOR SHARE, in the transaction of the update: a PauseGraph waits for it, and it for a PauseGraph
// under way, so that it never revives what a pause has just made PAUSED. Most passes find
// nothing to revive, in nodes_paused_idx, and stop there.
func (s *Store) revivePaused(ctx context.Context, limit int) error {
	const stale = `FROM {s}.nodes c JOIN {s}.executions e ON e.lane = c.lane AND e.id = c.execution_id
		WHERE c.state = 'PAUSED' AND c.graph_key IN (?) AND e.paused_at IS NULL`
	running := func(ctx context.Context, db bun.IDB, lock string) ([]string, error) {
		var keys []string
		err := db.NewRaw(s.q(`SELECT graph_name || '@' || graph_version FROM {s}.graph_versions WHERE paused_at IS NULL
			ORDER BY graph_name, graph_version`+lock)).Scan(ctx, &keys)
		if err != nil && !isNoRows(err) {
			return nil, fmt.Errorf("reading the graph versions that run: %w", err)
		}
		return append(keys, ""), nil // IN () is not SQL
	}
	keys, err := running(ctx, s.db, "")
	if err != nil {
		return err
	}
	lanes, err := s.lanesWith(ctx, s.db, `SELECT c.lane `+stale, bun.List(keys))
	var found bool
	if err == nil && len(lanes) > 0 {
		err = s.db.NewRaw(s.q(`SELECT EXISTS (SELECT 1 `+stale+`)`), bun.List(keys)).Scan(ctx, &found)
	}
	if err != nil || !found {
		return err
	}
	return s.inTx(ctx, func(ctx context.Context, tx bun.Tx) error {
		keys, err := running(ctx, tx, " FOR SHARE")
		if err != nil {
			return err
		}
		now, err := s.now(ctx, tx)
		if err != nil {
			return err
		}
		revived := 0
		for _, lane := range lanes {
			var ids []int64
			err := tx.NewRaw(s.q(`UPDATE {s}.nodes n SET available_at = ?, state = `+readyState("?")+`
				FROM (SELECT c.lane, c.execution_id, c.node `+stale+lanePin("c", lane)+lanePin("e", lane)+`
					LIMIT ? FOR UPDATE OF c, e SKIP LOCKED) l
				WHERE n.lane = l.lane AND n.execution_id = l.execution_id AND n.node = l.node`+lanePin("n", lane)+`
				RETURNING n.attempt_id`), now, now, bun.List(keys), limit).Scan(ctx, &ids)
			if err != nil && !isNoRows(err) {
				return fmt.Errorf("making ready the attempts that no pause holds: %w", err)
			}
			revived += len(ids)
		}
		if revived == 0 {
			return nil
		}
		s.logger.Warn("made ready attempts left PAUSED by a replica that had not heard of a resume", "attempts", revived)
		for _, payload := range []string{PayloadPromote, PayloadWork} {
			if err := s.notify(ctx, tx, payload); err != nil {
				return err
			}
		}
		return nil
	})
}
