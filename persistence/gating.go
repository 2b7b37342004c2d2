package persistence

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/journey-go/journey/persistence/machine"
	"github.com/uptrace/bun/dialect/pgdialect"
)

// promotableGated is the gated promotion's predicate, from the table of states
// (machine.PromotableGated), on the node row and its execution's, locked (l), at the promotion's
// time ($1). It reads the locked rows' columns, not the updated row's: a state in the UPDATE's own
// WHERE would let the plan, made once per connection, read the rows through nodes_pending_idx,
// every PENDING attempt (at 1,000 pending, 0.27 ms of a 0.4 ms pass).
var promotableGated = machine.PromotableGated.SQL("l", "l", "$1")

// promotionBatch caps the attempts one promotion statement makes AVAILABLE.
const promotionBatch = 1000

// errPromotionBusy means another transaction holds the promotion lock.
var errPromotionBusy = errors.New("the promotion lock is held")

type candidate struct {
	ID             int64   `db:"id"`
	Lane           int16   `db:"lane"`
	ExecutionID    string  `db:"execution_id"`
	ConcurrencyKey *string `db:"concurrency_key"`
	GraphKey       string  `db:"graph_key"`
	Node           string  `db:"node"`
	MaxParallel    *int    `db:"max_parallel"`
	RateKey        *string `db:"rate_key"`
}

type nodeCount struct {
	GraphKey string `db:"graph_key"`
	Node     string `db:"node"`
	N        int    `db:"n"`
}

// afterCommits single-flights the promotions that writes make after their commit, when the
// promotion lock was busy inside it (see Store.promoteAfterCommit).
type afterCommits struct {
	token   chan struct{} // held by the write whose pass runs
	mu      sync.Mutex
	asked   uint64        // the writes that asked, counted
	covered uint64        // every write up to this one has had a pass begin after it asked
	ended   chan struct{} // closed when a pass ends, then replaced
}

func newAfterCommits() *afterCommits {
	return &afterCommits{token: make(chan struct{}, 1), ended: make(chan struct{})}
}

// promoteAfterCommit promotes what the writes committed so far made due, for a write whose
// promotion found the lock busy. Writes of this store that ask while a pass runs share the next
// pass, which one of them makes: each waits for at most the pass under way and one more, where
// they had waited for the lock one after another, each for a pass of its own. In the soak at 300
// executions/s, up to nine producers' Starts at a time waited there.
func (s *Store) promoteAfterCommit(ctx context.Context) {
	p := s.afterCommits
	p.mu.Lock()
	p.asked++
	mine := p.asked
	p.mu.Unlock()
	for {
		p.mu.Lock()
		done, ended := p.covered >= mine, p.ended
		p.mu.Unlock()
		if done {
			return
		}
		select {
		case p.token <- struct{}{}:
			p.mu.Lock()
			upTo := p.asked // the pass below begins after all of these asked
			done = p.covered >= mine
			p.mu.Unlock()
			if !done {
				if _, err := s.PromoteDue(ctx); err != nil {
					// The dispatchers' poll and the sweeper promote what this could not.
					s.logger.Warn("promoting after a write failed", "error", err)
				}
				p.mu.Lock()
				p.covered = max(p.covered, upTo)
				close(p.ended)
				p.ended = make(chan struct{})
				p.mu.Unlock()
			}
			<-p.token
			return
		case <-ended: // a pass ended: it may have begun after this write asked
		case <-ctx.Done():
			return
		}
	}
}

// PromoteDue makes due PENDING attempts AVAILABLE, outside any execution's transaction: those
// that wait for no key or limit (a retry's backoff has passed), then the gated ones that fit. It
// is the sweep's and the dispatchers' safety net, and what a write does after its commit when it
// could not promote inside it. It returns how many it promoted.
func (s *Store) PromoteDue(ctx context.Context) (int, error) {
	// Every writer of a node row holds its execution's lock: the promotion skips the executions
	// being written, whose writers promote what they make due.
	lanes, err := s.lanesWith(ctx, s.db, `SELECT lane FROM {s}.nodes WHERE state = 'PENDING'
		AND run_at <= coalesce(?::timestamptz, now()) AND concurrency_key IS NULL AND max_parallel IS NULL AND rate_key IS NULL`,
		s.clock.NowOrNil())
	if err != nil {
		return 0, err
	}
	var ungated []int64
	paused := s.pausedKeys()
	for _, lane := range lanes {
		var promoted []int64
		err := s.db.NewRaw(s.q(`UPDATE {s}.nodes n SET state = 'AVAILABLE', available_at = coalesce(?0::timestamptz, now()),
			rev = 1 + greatest(l.revision,
				(SELECT max(m.rev) FROM {s}.nodes m WHERE m.lane = l.lane AND m.execution_id = l.execution_id`+lanePin("m", lane)+`))
		FROM (SELECT c.lane, c.execution_id, c.node, e.revision FROM {s}.nodes c
			JOIN {s}.executions e ON e.lane = c.lane AND e.id = c.execution_id
			WHERE `+machine.PromotableUngated.SQL("c", "e", "coalesce(?0::timestamptz, now())")+` AND c.graph_key <> ALL(?1::text[])`+
			lanePin("c", lane)+lanePin("e", lane)+`
			ORDER BY c.run_at, c.attempt_id LIMIT ?2 FOR UPDATE OF c, e SKIP LOCKED) l
		WHERE n.lane = l.lane AND n.execution_id = l.execution_id AND n.node = l.node`+lanePin("n", lane)+`
		RETURNING n.attempt_id`), s.clock.NowOrNil(), pgdialect.Array(paused), promotionBatch).Scan(ctx, &promoted)
		if err != nil && !isNoRows(err) {
			return 0, fmt.Errorf("promoting due computations: %w", err)
		}
		ungated = append(ungated, promoted...)
	}
	if len(ungated) > 0 {
		if err := s.notify(ctx, s.db, PayloadWork); err != nil {
			return 0, err
		}
	}
	var waiting bool
	err = s.db.NewRaw(s.q(`SELECT EXISTS (SELECT 1 FROM {s}.nodes
		WHERE state = 'PENDING' AND run_at <= coalesce(?::timestamptz, now())
			AND (concurrency_key IS NOT NULL OR max_parallel IS NOT NULL OR rate_key IS NOT NULL))`), s.clock.NowOrNil()).Scan(ctx, &waiting)
	if err != nil || !waiting {
		return len(ungated), err // nothing gated is due: leave the promotion lock alone
	}
	var gated int
	err = s.inTxn(ctx, s.workDB(), func(ctx context.Context, t *txn) error {
		if err := t.begin(ctx); err != nil {
			return err
		}
		if err := s.boundLocks(ctx, t); err != nil {
			return err
		}
		now, err := s.now(ctx, t)
		if err != nil {
			return err
		}
		promoted, err := s.promoteGated(ctx, t, now, true)
		gated = len(promoted)
		return err
	})
	return len(ungated) + gated, err
}

// promoteGated makes PENDING attempts with a concurrency key or a parallel limit AVAILABLE where
// run_at has passed, no attempt with the same key is AVAILABLE or RUNNING, and the node's
// MaxParallel leaves room. It queues a NOTIFY for them, and returns how many it promoted.
//
// Promotions of gated attempts are serialised by a transaction-level advisory lock, so that two
// replicas promoting at once cannot overshoot a limit or admit two holders of a key: only a
// promotion can add a gated attempt to AVAILABLE + RUNNING, and the next promotion sees the
// committed result. The lock is the last one a transaction takes, and its holder waits for no
// other lock. With wait false it does not wait for the lock either: it returns errPromotionBusy,
// and the caller promotes after its commit.
//
// Its statements are prepared, as the hot path's are, and planned once per connection: planned
// at each pass, the choice of candidates cost more to plan than to run (journey bench -graph
// gated -backlog 10: 4.6 ms planning against 0.5 ms running, on a busy machine).
func (s *Store) promoteGated(ctx context.Context, tx *txn, now time.Time, wait bool) ([]*promotedRow, error) {
	if err := tx.begin(ctx); err != nil {
		return nil, err
	}
	if wait {
		if _, err := tx.NewRaw("SELECT pg_advisory_xact_lock(hashtextextended(?, 0))", s.promoteKey).Exec(ctx); err != nil {
			return nil, fmt.Errorf("taking the promotion lock: %w", err)
		}
	} else {
		var locked bool
		if err := tx.NewRaw("SELECT pg_try_advisory_xact_lock(hashtextextended(?, 0))", s.promoteKey).Scan(ctx, &locked); err != nil {
			return nil, fmt.Errorf("taking the promotion lock: %w", err)
		}
		if !locked {
			return nil, errPromotionBusy
		}
	}
	chosen, err := s.chooseGated(ctx, tx.pg, now)
	if err != nil || len(chosen) == 0 {
		return nil, err
	}
	// The chosen rows are found by their keys alone, and their state is read once they are
	// locked (promotableGated). OFFSET 0 keeps the state's test out of that scan. Their executions are locked too,
	// or skipped if a writer holds them, which promotes what it makes due: every writer of a node
	// row holds its execution's lock (a write's own promotion holds them already).
	if s.citus { // a statement a lane
		slices.SortStableFunc(chosen, func(a, b *candidate) int { return cmp.Compare(a.Lane, b.Lane) })
	}
	lanes, ids, nodes := make([]int16, len(chosen)), make([]string, len(chosen)), make([]string, len(chosen))
	for i, c := range chosen {
		lanes[i], ids[i], nodes[i] = c.Lane, c.ExecutionID, c.Node
	}
	var promoted []*promotedRow
	for i, j := 0, 0; i < len(chosen); i = j {
		j = s.runEnd(lanes, i)
		rows, err := tx.pg.Query(ctx, s.q(`UPDATE {s}.nodes c SET state = 'AVAILABLE', available_at = $1, rev = l.rev
		FROM (SELECT n.lane, n.execution_id, n.node, n.state, n.run_at, n.concurrency_key, n.max_parallel, n.rate_key,
				e.archived_at, e.canceled_at, e.paused_at, 1 + greatest(e.revision,
				(SELECT max(m.rev) FROM {s}.nodes m WHERE m.lane = n.lane AND m.execution_id = n.execution_id`+s.pinned("m", "$2")+`)) AS rev
			FROM unnest($2::smallint[], $3::text[], $4::text[]) AS k(lane, id, node)
			JOIN {s}.nodes n ON n.lane = k.lane AND n.execution_id = k.id AND n.node = k.node
			JOIN {s}.executions e ON e.lane = n.lane AND e.id = n.execution_id
			WHERE true`+s.pinned("n", "$2")+s.pinned("e", "$2")+`
			OFFSET 0 FOR UPDATE OF n, e SKIP LOCKED) l
		WHERE c.lane = l.lane AND c.execution_id = l.execution_id AND c.node = l.node
			AND `+promotableGated+` AND c.graph_key <> ALL($5::text[])`+s.pinned("c", "$2")+`
		RETURNING c.execution_id, c.node, c.rev`), now, lanes[i:j], ids[i:j], nodes[i:j], s.pausedKeys())
		var got []*promotedRow
		if err == nil {
			got, err = scanAll[promotedRow](rows)
		}
		if err != nil {
			return nil, fmt.Errorf("promoting gated computations: %w", err)
		}
		promoted = append(promoted, got...)
	}
	if len(promoted) > 0 {
		if err := s.notify(ctx, tx, PayloadWork); err != nil {
			return nil, err
		}
	}
	return promoted, nil
}

// promotedRow is an attempt that a gated promotion made AVAILABLE, at the revision rev of its
// execution.
type promotedRow struct {
	ExecutionID string `db:"execution_id"`
	Node        string `db:"node"`
	Rev         int64  `db:"rev"`
}

// chooseGated picks, oldest first, the due gated candidates that fit their key and limit. It
// looks past blocked ones: it considers only the oldest due attempt of each free key, and, for a
// node with a limit and no key, its oldest due attempts that the limit leaves room for. Attempts
// of archived executions are never promoted.
//
// Its cost follows the keys and nodes that have attempts waiting, and the attempts it may
// promote, not the attempts that wait: it walks nodes_pending_key_idx from key to key (a
// loose index scan), one probe for each key, which finds the key's oldest attempt (if that one is
// not due, none of the key's is); and nodes_pending_limited_idx from node to node, reading
// the first attempts of each node with room. Each walk takes the index's whole order, which no
// other index gives: the plan, made once per connection, cannot read the attempts in
// nodes_pending_idx instead, through every attempt that waits before the first of a key.
func (s *Store) chooseGated(ctx context.Context, pg *pgx.Conn, now time.Time) ([]*candidate, error) {
	lanes, err := s.lanesWith(ctx, s.db, `SELECT lane FROM {s}.nodes WHERE state = 'PENDING' AND run_at <= ?
		AND (concurrency_key IS NOT NULL OR max_parallel IS NOT NULL)`, now)
	if err != nil {
		return nil, err
	}
	var cands []*candidate
	for _, lane := range lanes {
		rows, err := pg.Query(ctx, dollars(s.q(pinTables(chooseGatedQuery, lane))), now, now, promotionBatch)
		var found []*candidate
		if err == nil {
			found, err = scanAll[candidate](rows)
		}
		if err != nil {
			return nil, fmt.Errorf("finding gated computations: %w", err)
		}
		cands = append(cands, found...)
	}
	if len(lanes) > 1 { // oldest first across the lanes too, as the attempts' ids go
		slices.SortFunc(cands, func(a, b *candidate) int { return cmp.Compare(a.ID, b.ID) })
	}
	// A rate-limited attempt that the walks above found waits for its window too: chooseRated
	// decides it, and its concurrency key and limit are checked below.
	cands = slices.DeleteFunc(cands, func(c *candidate) bool { return c.RateKey != nil })
	rated, err := s.chooseRated(ctx, pg, now)
	if err != nil {
		return nil, err
	}
	cands = append(cands, rated...)
	if len(cands) == 0 {
		return nil, nil
	}
	rows, err := pg.Query(ctx, s.q(`SELECT graph_key, node, count(*) AS n FROM {s}.nodes
		WHERE state IN ('AVAILABLE', 'RUNNING') AND max_parallel IS NOT NULL GROUP BY graph_key, node`))
	var counts []*nodeCount
	if err == nil {
		counts, err = scanAll[nodeCount](rows)
	}
	if err != nil {
		return nil, fmt.Errorf("counting limited computations: %w", err)
	}
	active := map[[2]string]int{}
	for _, c := range counts {
		active[[2]string{c.GraphKey, c.Node}] = c.N
	}
	held, err := s.heldKeys(ctx, pg)
	if err != nil {
		return nil, err
	}
	if !s.citus { // chooseGatedQuery checked the holders of its own candidates' keys, not these
		var keys []string
		for _, c := range rated {
			if c.ConcurrencyKey != nil {
				keys = append(keys, *c.ConcurrencyKey)
			}
		}
		if held, err = s.keysHeld(ctx, pg, keys); err != nil {
			return nil, err
		}
	}
	var chosen []*candidate
	for _, c := range cands { // at most one per key
		node := [2]string{c.GraphKey, c.Node}
		if c.MaxParallel != nil && active[node] >= *c.MaxParallel {
			continue
		}
		if c.ConcurrencyKey != nil {
			if held[*c.ConcurrencyKey] {
				continue
			}
			held[*c.ConcurrencyKey] = true
		}
		active[node]++
		chosen = append(chosen, c)
	}
	return chosen, nil
}

// heldKeys are, on Citus, the concurrency keys that an AVAILABLE or RUNNING attempt holds, in any
// lane: chooseGatedQuery, a statement a lane, sees the holders of its own lane alone. On one
// PostgreSQL, it sees them all, and heldKeys is empty.
func (s *Store) heldKeys(ctx context.Context, pg *pgx.Conn) (map[string]bool, error) {
	held := map[string]bool{}
	if !s.citus {
		return held, nil
	}
	rows, err := pg.Query(ctx, s.q(`SELECT DISTINCT concurrency_key FROM {s}.nodes
		WHERE state IN ('AVAILABLE', 'RUNNING') AND concurrency_key IS NOT NULL`))
	var keys []string
	if err == nil {
		keys, err = pgx.CollectRows(rows, pgx.RowTo[string])
	}
	if err != nil {
		return nil, fmt.Errorf("finding the concurrency keys held: %w", err)
	}
	for _, k := range keys {
		held[k] = true
	}
	return held, nil
}

// chooseGatedQuery is chooseGated's statement; see there.
const chooseGatedQuery = `WITH RECURSIVE oldest AS (
			(SELECT c.attempt_id AS id, c.lane, c.execution_id, c.concurrency_key, c.graph_key, c.node, c.max_parallel, c.rate_key, c.run_at FROM {s}.nodes c
				WHERE c.state = 'PENDING' AND c.concurrency_key IS NOT NULL
					AND NOT EXISTS (SELECT 1 FROM {s}.executions e WHERE e.lane = c.lane AND e.id = c.execution_id AND e.archived_at IS NOT NULL)
				ORDER BY c.concurrency_key, c.run_at, c.attempt_id LIMIT 1)
			UNION ALL
			SELECT next.id, next.lane, next.execution_id, next.concurrency_key, next.graph_key, next.node, next.max_parallel,
				next.rate_key, next.run_at FROM oldest, LATERAL (
				SELECT c.attempt_id AS id, c.lane, c.execution_id, c.concurrency_key, c.graph_key, c.node, c.max_parallel, c.rate_key, c.run_at FROM {s}.nodes c
				WHERE c.state = 'PENDING' AND c.concurrency_key > oldest.concurrency_key
					AND NOT EXISTS (SELECT 1 FROM {s}.executions e WHERE e.lane = c.lane AND e.id = c.execution_id AND e.archived_at IS NOT NULL)
				ORDER BY c.concurrency_key, c.run_at, c.attempt_id LIMIT 1) next
		), limited AS (
			(SELECT graph_key, node, max_parallel FROM {s}.nodes
				WHERE state = 'PENDING' AND concurrency_key IS NULL AND max_parallel IS NOT NULL
				ORDER BY graph_key, node LIMIT 1)
			UNION ALL
			SELECT next.graph_key, next.node, next.max_parallel FROM limited, LATERAL (
				SELECT c.graph_key, c.node, c.max_parallel FROM {s}.nodes c
				WHERE c.state = 'PENDING' AND c.concurrency_key IS NULL AND c.max_parallel IS NOT NULL
					AND (c.graph_key, c.node) > (limited.graph_key, limited.node)
				ORDER BY c.graph_key, c.node LIMIT 1) next
		)
		SELECT id, lane, execution_id, concurrency_key, graph_key, node, max_parallel, rate_key FROM (
			SELECT id, lane, execution_id, concurrency_key, graph_key, node, max_parallel, rate_key, run_at FROM oldest WHERE run_at <= ? AND NOT EXISTS (SELECT 1 FROM {s}.nodes h
				WHERE h.state IN ('AVAILABLE', 'RUNNING') AND h.concurrency_key = oldest.concurrency_key)
			UNION ALL
			SELECT first.id, first.lane, first.execution_id, first.concurrency_key, first.graph_key, first.node,
				first.max_parallel, first.rate_key, first.run_at FROM limited CROSS JOIN LATERAL (
				SELECT c.attempt_id AS id, c.lane, c.execution_id, c.concurrency_key, c.graph_key, c.node, c.max_parallel, c.rate_key, c.run_at FROM {s}.nodes c
				WHERE c.state = 'PENDING' AND c.concurrency_key IS NULL AND c.max_parallel IS NOT NULL
					AND (c.graph_key, c.node) >= (limited.graph_key, limited.node)
					AND NOT EXISTS (SELECT 1 FROM {s}.executions e WHERE e.lane = c.lane AND e.id = c.execution_id AND e.archived_at IS NOT NULL)
				ORDER BY c.graph_key, c.node, c.run_at, c.attempt_id
				LIMIT greatest(limited.max_parallel - (SELECT count(*) FROM {s}.nodes h
					WHERE h.state IN ('AVAILABLE', 'RUNNING') AND h.max_parallel IS NOT NULL
						AND h.graph_key = limited.graph_key AND h.node = limited.node), 0)) first
			WHERE first.graph_key = limited.graph_key AND first.node = limited.node AND first.run_at <= ?
		) due ORDER BY run_at, id LIMIT ?`

// tableWhere is a FROM of one of the per-execution tables that chooseGatedQuery reads, with its
// alias, up to its WHERE.
var tableWhere = regexp.MustCompile(`FROM \{s\}\.(nodes|executions)( ([a-z]+))?(\s+)WHERE `)

// pinTables pins each table that query reads to lane (see lanePin), for Citus, where a recursive
// statement must name one value of the distribution column; for noLane, it returns query.
func pinTables(query string, lane int16) string {
	if lane == noLane {
		return query
	}
	return tableWhere.ReplaceAllStringFunc(query, func(m string) string {
		alias := tableWhere.FindStringSubmatch(m)[3]
		return m + strings.TrimPrefix(lanePin(alias, lane), " AND ") + " AND "
	})
}
