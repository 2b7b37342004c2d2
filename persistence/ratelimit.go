package persistence

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/journey-go/journey/graph"
)

// A rate limit (graph.RateLimit) allows at most n starts (claims) of a node's attempts within
// any window of length per, per rate key. A rate-limited attempt is made PENDING with its rate
// key, and only the gated promotion (promoteGated), under the promotion lock, makes it AVAILABLE:
// for each key, at most n minus the attempts that take room in the window at the promotion's
// time, now. An attempt takes room when it is AVAILABLE (it may start at any moment), or was
// claimed after now-per (nodes_rate_started_idx; attempts_rate_started_idx for those a later
// attempt replaced).
//
// Why that keeps the promise, whatever the workers' lag: take any window W of length per and the
// attempts claimed within it, and P the last promotion that made one of them AVAILABLE, Y. P's
// time is at most P's commit, and Y's claim comes after that commit (it read Y as AVAILABLE), so
// within W. Every other attempt X claimed within W was made AVAILABLE by P or by an earlier
// promotion, which committed before P took the lock. When P counts, X is either still AVAILABLE
// (a claim under way included), so counted, or claimed within W, at most per before Y's claim,
// so after P's time less per, and counted too. P made AVAILABLE at most n less those it counted:
// W holds at most n claims.

// ratedNode is a served node with a rate limit.
type ratedNode struct {
	graphKey, node string
	n              int
	per            time.Duration
}

// ratedNodes are the nodes of graphs with a rate limit.
func ratedNodes(key string, g *graph.Graph) []ratedNode {
	var out []ratedNode
	for _, n := range g.Nodes() {
		if set := n.Settings(); n.Kind() != graph.KindInput && set.RateLimit > 0 {
			out = append(out, ratedNode{graphKey: key, node: n.Name(), n: set.RateLimit, per: set.RatePer})
		}
	}
	return out
}

// rateWindow is a rate key with due attempts, and the room its window leaves.
type rateWindow struct {
	GraphKey string `db:"graph_key"`
	Node     string `db:"node"`
	RateKey  string `db:"rate_key"`
	room     int
	// freesAt is when the window has room again once full: its oldest claim counted, plus per;
	// now plus per if it counted none (its next claim comes after now).
	freesAt time.Time
}

// windowCount is what takes room in a rate key's window.
type windowCount struct {
	RateKey string     `db:"rate_key"`
	N       int        `db:"n"`
	Oldest  *time.Time `db:"oldest"` // the earliest claim counted, nil if only AVAILABLE ones are
}

// ratedCandidate is a due rate-limited attempt, with its place in the queue.
type ratedCandidate struct {
	candidate
	RunAt time.Time `db:"run_at"`
}

// RateWake is how long until a rate limit's window, full at the last promotion of this store,
// has room again for the attempts that wait for it (at most 0 if it has now), and false if none
// waits for a window with a claim in it. A dispatcher polls then, if that comes before its
// PollInterval: only time frees room in a window, and no write announces it.
func (s *Store) RateWake() (time.Duration, bool) {
	ns := s.rateWake.Load()
	if ns == 0 {
		return 0, false
	}
	return time.Unix(0, ns).Sub(s.clock.Now()), true
}

// chooseRated picks, oldest first, the due rate-limited attempts of the served graphs that fit
// their windows at now. Its cost follows the rate keys with attempts waiting and the room in
// their windows, not the attempts that wait: it walks nodes_pending_rated_idx from key to key
// (a loose index scan), counts each window in nodes_rate_started_idx and
// attempts_rate_started_idx from the window's start on, and reads the first attempts of each key
// with room. On Citus the keys are found and the attempts read a lane at a time, and the windows
// counted across lanes (a rate key spans lanes), under the promotion lock.
func (s *Store) chooseRated(ctx context.Context, pg *pgx.Conn, now time.Time) ([]*candidate, error) {
	if len(s.rated) == 0 {
		return nil, nil
	}
	lanes, err := s.lanesWith(ctx, s.db, `SELECT lane FROM {s}.nodes WHERE state = 'PENDING' AND run_at <= ?
		AND rate_key IS NOT NULL`, now)
	if err != nil {
		return nil, err
	}
	gks, nodes := make([]string, len(s.rated)), make([]string, len(s.rated))
	for i, r := range s.rated {
		gks[i], nodes[i] = r.graphKey, r.node
	}
	var windows []*rateWindow
	for _, lane := range lanes {
		rows, err := pg.Query(ctx, s.q(pinTables(rateKeysQuery, lane)), gks, nodes, now)
		var found []*rateWindow
		if err == nil {
			found, err = scanAll[rateWindow](rows)
		}
		if err != nil {
			return nil, fmt.Errorf("finding the rate keys with due computations: %w", err)
		}
		windows = append(windows, found...)
	}
	if len(windows) == 0 {
		s.rateWake.Store(0)
		return nil, nil
	}
	if len(lanes) > 1 { // a key in several lanes is one window
		slices.SortFunc(windows, func(a, b *rateWindow) int {
			return cmp.Or(cmp.Compare(a.GraphKey, b.GraphKey), cmp.Compare(a.Node, b.Node), cmp.Compare(a.RateKey, b.RateKey))
		})
		windows = slices.CompactFunc(windows, func(a, b *rateWindow) bool {
			return a.GraphKey == b.GraphKey && a.Node == b.Node && a.RateKey == b.RateKey
		})
	}
	wake, err := s.countWindows(ctx, pg, windows, now)
	if err != nil {
		return nil, err
	}
	s.rateWake.Store(0)
	s.wakeAt(wake)
	var open []*rateWindow
	for _, w := range windows {
		if w.room > 0 {
			open = append(open, w)
		}
	}
	if len(open) == 0 {
		return nil, nil
	}
	wgks, wnodes, wkeys, rooms := make([]string, len(open)), make([]string, len(open)), make([]string, len(open)), make([]int32, len(open))
	for i, w := range open {
		wgks[i], wnodes[i], wkeys[i], rooms[i] = w.GraphKey, w.Node, w.RateKey, int32(w.room)
	}
	var due []*ratedCandidate
	for _, lane := range lanes {
		rows, err := pg.Query(ctx, s.q(pinTables(rateDueQuery, lane)), wgks, wnodes, wkeys, rooms, now)
		var found []*ratedCandidate
		if err == nil {
			found, err = scanAll[ratedCandidate](rows)
		}
		if err != nil {
			return nil, fmt.Errorf("finding rate-limited computations: %w", err)
		}
		due = append(due, found...)
	}
	// Oldest first, and no more than its room a key, across the lanes too.
	slices.SortFunc(due, func(a, b *ratedCandidate) int { return cmp.Or(a.RunAt.Compare(b.RunAt), cmp.Compare(a.ID, b.ID)) })
	room := make(map[[3]string]int, len(open))
	for _, w := range open {
		room[[3]string{w.GraphKey, w.Node, w.RateKey}] = w.room
	}
	var chosen []*candidate
	for _, c := range due {
		k := [3]string{c.GraphKey, c.Node, deref(c.RateKey)}
		if room[k] > 0 {
			room[k]--
			chosen = append(chosen, &c.candidate)
		}
	}
	// A window this fills has room again once its oldest claim leaves it: its waiting attempts are
	// looked at again then.
	for _, w := range open {
		if room[[3]string{w.GraphKey, w.Node, w.RateKey}] == 0 {
			s.wakeAt(w.freesAt)
		}
	}
	return chosen, nil
}

// wakeAt brings RateWake forward to at, unless at is zero.
func (s *Store) wakeAt(at time.Time) {
	if at.IsZero() {
		return
	}
	for {
		was := s.rateWake.Load()
		if was != 0 && was <= at.UnixNano() || s.rateWake.CompareAndSwap(was, at.UnixNano()) {
			return
		}
	}
}

// countWindows sets the room of each window at now: its node's limit less what takes room in it.
// It returns when the first full window has room again: the earliest claim it counted, plus per.
func (s *Store) countWindows(ctx context.Context, pg *pgx.Conn, windows []*rateWindow, now time.Time) (time.Time, error) {
	var wake time.Time
	for _, r := range s.rated { // a statement a rate-limited node with due attempts, a handful
		var keys []string
		for _, w := range windows {
			if w.GraphKey == r.graphKey && w.Node == r.node {
				keys = append(keys, w.RateKey)
			}
		}
		if len(keys) == 0 {
			continue
		}
		rows, err := pg.Query(ctx, s.q(rateCountQuery), r.graphKey, r.node, keys, now.Add(-r.per))
		var counts []*windowCount
		if err == nil {
			counts, err = scanAll[windowCount](rows)
		}
		if err != nil {
			return time.Time{}, fmt.Errorf("counting the starts in the rate windows of node %q: %w", r.node, err)
		}
		byKey := make(map[string]*windowCount, len(counts))
		for _, c := range counts {
			byKey[c.RateKey] = c
		}
		for _, w := range windows {
			if w.GraphKey != r.graphKey || w.Node != r.node {
				continue
			}
			w.room, w.freesAt = r.n, now.Add(r.per)
			if c := byKey[w.RateKey]; c != nil {
				w.room -= c.N
				if c.Oldest != nil {
					w.freesAt = c.Oldest.Add(r.per)
				}
				if w.room <= 0 && (wake.IsZero() || w.freesAt.Before(wake)) {
					wake = w.freesAt
				}
			}
		}
	}
	return wake, nil
}

// rateKeysQuery finds the rate keys of the nodes $1 of graph versions $2 (the served
// rate-limited ones) that have attempts due at $3: it walks nodes_pending_rated_idx from key to
// key, each step reading the key's oldest attempt (if that one is not due, none of the key's is).
// The walk takes the index's whole order, which no other index gives.
const rateKeysQuery = `WITH RECURSIVE rkeys AS (
			SELECT first.graph_key, first.node, first.rate_key, first.run_at FROM unnest($1::text[], $2::text[]) AS l(graph_key, node)
			CROSS JOIN LATERAL (
				SELECT c.graph_key, c.node, c.rate_key, c.run_at FROM {s}.nodes c
				WHERE c.state = 'PENDING' AND c.rate_key IS NOT NULL AND c.graph_key = l.graph_key AND c.node = l.node
				ORDER BY c.rate_key, c.run_at, c.attempt_id LIMIT 1) first
			UNION ALL
			SELECT next.graph_key, next.node, next.rate_key, next.run_at FROM rkeys CROSS JOIN LATERAL (
				SELECT c.graph_key, c.node, c.rate_key, c.run_at FROM {s}.nodes c
				WHERE c.state = 'PENDING' AND c.rate_key IS NOT NULL AND c.graph_key = rkeys.graph_key AND c.node = rkeys.node
					AND c.rate_key > rkeys.rate_key
				ORDER BY c.rate_key, c.run_at, c.attempt_id LIMIT 1) next
		)
		SELECT graph_key, node, rate_key FROM rkeys WHERE run_at <= $3`

// rateCountQuery counts, for the rate keys $3 of node $2 of graph version $1, the attempts that
// take room in their windows, which start after $4: the AVAILABLE ones, and those claimed after
// $4, replaced since or not. Its conditions are those of nodes_rate_started_idx and
// attempts_rate_started_idx, which it reads from $4 on.
const rateCountQuery = `SELECT w.rate_key, count(*) AS n, min(w.started) FILTER (WHERE w.started < 'infinity') AS oldest FROM (
			SELECT n.rate_key, CASE WHEN n.state = 'AVAILABLE' THEN 'infinity'::timestamptz ELSE n.claimed_at END AS started
			FROM {s}.nodes n
			WHERE n.graph_key = $1 AND n.node = $2 AND n.rate_key = ANY($3::text[])
				AND n.rate_key IS NOT NULL AND (n.state = 'AVAILABLE' OR n.claimed_at IS NOT NULL)
				AND (CASE WHEN n.state = 'AVAILABLE' THEN 'infinity'::timestamptz ELSE n.claimed_at END) > $4
			UNION ALL
			SELECT a.rate_key, a.claimed_at FROM {s}.attempts a
			WHERE a.graph_key = $1 AND a.node = $2 AND a.rate_key = ANY($3::text[])
				AND a.rate_key IS NOT NULL AND a.claimed_at IS NOT NULL AND a.claimed_at > $4
		) w GROUP BY w.rate_key`

// rateDueQuery reads, for each rate key ($1, $2, $3) with room $4, that many of its attempts due
// at $5, oldest first, through nodes_pending_rated_idx. Attempts of archived executions are never
// promoted.
const rateDueQuery = `SELECT due.id, due.lane, due.execution_id, due.concurrency_key, due.graph_key, due.node, due.max_parallel,
			due.rate_key, due.run_at
		FROM unnest($1::text[], $2::text[], $3::text[], $4::int[]) AS k(graph_key, node, rate_key, room) CROSS JOIN LATERAL (
			SELECT c.attempt_id AS id, c.lane, c.execution_id, c.concurrency_key, c.graph_key, c.node, c.max_parallel, c.rate_key,
				c.run_at FROM {s}.nodes c
			WHERE c.state = 'PENDING' AND c.rate_key IS NOT NULL AND c.graph_key = k.graph_key AND c.node = k.node
				AND c.rate_key = k.rate_key AND c.run_at <= $5
				AND NOT EXISTS (SELECT 1 FROM {s}.executions e WHERE e.lane = c.lane AND e.id = c.execution_id AND e.archived_at IS NOT NULL)
			ORDER BY c.run_at, c.attempt_id LIMIT k.room) due`

// keysHeld are the concurrency keys among keys that an AVAILABLE or RUNNING attempt holds, in any
// lane: those of the rate-limited candidates, which chooseGatedQuery does not check.
func (s *Store) keysHeld(ctx context.Context, pg *pgx.Conn, keys []string) (map[string]bool, error) {
	held := map[string]bool{}
	if len(keys) == 0 {
		return held, nil
	}
	rows, err := pg.Query(ctx, s.q(`SELECT DISTINCT concurrency_key FROM {s}.nodes
		WHERE state IN ('AVAILABLE', 'RUNNING') AND concurrency_key = ANY($1::text[])`), keys)
	var found []string
	if err == nil {
		found, err = pgx.CollectRows(rows, pgx.RowTo[string])
	}
	if err != nil {
		return nil, fmt.Errorf("finding the concurrency keys held: %w", err)
	}
	for _, k := range found {
		held[k] = true
	}
	return held, nil
}
