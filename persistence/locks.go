package persistence

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/uptrace/bun/dialect/pgdialect"
)

// ErrLockTimeout means a write gave up on a row that another transaction held for longer than
// the store's lock timeout. Nothing was written: try again.
var ErrLockTimeout = errors.New("journey: gave up waiting for a lock")

// PostgreSQL's error codes that the store tells apart: lock_not_available, which lock_timeout
// raises, query_canceled, which statement_timeout raises, and undefined_table.
const (
	lockNotAvailable = "55P03"
	queryCanceled    = "57014"
	undefinedTable   = "42P01"
)

// hasCode reports whether err is a PostgreSQL error with code.
func hasCode(err error, code string) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == code
}

// lockTimeoutSQL sets the store's lock timeout for the rest of a transaction. A SET statement,
// not set_config: on Citus, whose sessions here propagate SET LOCAL (see PlanSettings), it reaches
// the workers, where the rows are locked.
func (s *Store) lockTimeoutSQL() string {
	return "SET LOCAL lock_timeout = " + strconv.FormatInt(max(s.lockTimeout.Milliseconds(), 1), 10)
}

// recordGaveUp logs what a Record that gave up on a lock (err) waited for, and returns the error
// it fails with: ErrLockTimeout, naming the rows of outs that another transaction holds.
func (s *Store) recordGaveUp(ctx context.Context, outs []Outcome, err error) error {
	held := s.heldBy(ctx, outs)
	var pgErr *pgconn.PgError
	errors.As(err, &pgErr)
	s.logger.Warn("recording outcomes gave up waiting for a lock; they will be retried",
		"lock_timeout", s.lockTimeout, "count", len(outs), "held_by", held, "waited_for", pgErr.Where, "error", err)
	what := strings.Join(held, "; ")
	if what == "" { // released meanwhile, or held by several transactions at once
		ids := make([]string, len(outs))
		for i, o := range outs {
			ids[i] = o.C.ExecutionID
		}
		what = "the rows of executions " + strings.Join(ids, ", ") + " or of their attempts"
	}
	return fmt.Errorf("%w: recording %d outcome(s) waited longer than %s for %s: %w", ErrLockTimeout, len(outs), s.lockTimeout, what, err)
}

// heldBy describes the transactions that hold the rows of the executions and attempts of outs,
// for the log: "execution X held by pid 123 (idle in transaction since …: SELECT …)". It is
// best-effort: a row's xmax names the transaction that locks it, unless several do (a
// multixact); such rows, and any error, are left out.
func (s *Store) heldBy(ctx context.Context, outs []Outcome) []string {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	lanes, execs, nodes := make([]int16, len(outs)), make([]string, len(outs)), make([]string, len(outs))
	for i, o := range outs {
		lanes[i], execs[i], nodes[i] = LaneOf(o.C.ExecutionID), o.C.ExecutionID, o.C.Node
	}
	if s.citus {
		return describeHolders(s.heldOnCitus(ctx, lanes, execs, nodes))
	}
	var rows []holder
	err := s.db.NewRaw(s.q(`SELECT h.what, a.pid, coalesce(a.state, '') AS state, a.xact_start,
			coalesce(left(a.query, 200), '') AS query
		FROM (SELECT 'execution ' || e.id AS what, e.xmax FROM `+executionKeys("?", "?")+` k
				JOIN {s}.executions e ON e.lane = k.lane AND e.id = k.id
			UNION ALL
			SELECT 'node ' || c.node || ' of ' || c.execution_id, c.xmax FROM {s}.nodes c
			JOIN unnest(?::smallint[], ?::text[], ?::text[]) AS k(lane, id, node)
				ON c.lane = k.lane AND c.execution_id = k.id AND c.node = k.node) h
		JOIN pg_locks l ON l.locktype = 'transactionid' AND l.transactionid = h.xmax AND l.granted
		JOIN pg_stat_activity a ON a.pid = l.pid
		WHERE a.pid <> pg_backend_pid()
		ORDER BY h.what`), pgdialect.Array(lanes), pgdialect.Array(execs), pgdialect.Array(lanes), pgdialect.Array(execs),
		pgdialect.Array(nodes)).Scan(ctx, &rows)
	if err != nil && !isNoRows(err) {
		s.logger.Debug("finding who holds the rows a write waited for failed", "error", err)
		return nil
	}
	return describeHolders(rows)
}

// describeHolders writes what holds each row, for heldBy.
func describeHolders(rows []holder) []string {
	held := make([]string, len(rows))
	for i, r := range rows {
		since := ""
		if r.XactStart != nil {
			since = " since " + r.XactStart.Format(time.RFC3339)
		}
		held[i] = fmt.Sprintf("%s held by pid %d (%s%s: %s)", r.What, r.PID, r.State, since, r.Query)
	}
	return held
}

// holder is a transaction that holds a row that a write waited for.
type holder struct {
	What      string     `bun:"what"`
	PID       int64      `bun:"pid"`
	State     string     `bun:"state"`
	XactStart *time.Time `bun:"xact_start"`
	Query     string     `bun:"query"`
}

// heldOnCitus is heldBy on Citus: a row's xmax is a transaction id of the worker that keeps its
// shard, read lane by lane, and the transaction that holds it is found in citus_locks on that
// worker; its pid is the global one of the session that began it (citus_stat_activity).
func (s *Store) heldOnCitus(ctx context.Context, lanes []int16, execs, nodes []string) []holder {
	var whats, xmaxes []string
	var nodeIDs []int32
	for _, lane := range slices.Compact(slices.Sorted(slices.Values(lanes))) {
		var rows []struct {
			What   string `bun:"what"`
			Xmax   string `bun:"xmax"`
			NodeID int32  `bun:"nodeid"`
		}
		err := s.db.NewRaw(s.q(`SELECT h.what, h.xmax::text AS xmax, (SELECT n.nodeid FROM pg_dist_placement p
				JOIN pg_dist_node n ON n.groupid = p.groupid WHERE p.shardid = get_shard_id_for_distribution_column(?3, ?0::smallint)
				LIMIT 1) AS nodeid
			FROM (SELECT 'execution ' || e.id AS what, e.xmax FROM {s}.executions e WHERE e.lane = ?0 AND e.id = ANY(?1::text[])
				UNION ALL SELECT 'node ' || c.node || ' of ' || c.execution_id, c.xmax FROM {s}.nodes c
				WHERE c.lane = ?0 AND c.execution_id = ANY(?1::text[]) AND c.node = ANY(?2::text[])) h`),
			lane, pgdialect.Array(execs), pgdialect.Array(nodes), s.quoted+".executions").Scan(ctx, &rows)
		if err != nil && !isNoRows(err) {
			s.logger.Debug("finding who holds the rows a write waited for failed", "lane", lane, "error", err)
			return nil
		}
		for _, r := range rows {
			whats, xmaxes, nodeIDs = append(whats, r.What), append(xmaxes, r.Xmax), append(nodeIDs, r.NodeID)
		}
	}
	var held []holder
	err := s.db.NewRaw(`SELECT h.what, a.global_pid AS pid, coalesce(a.state, '') AS state, a.xact_start,
			coalesce(left(a.query, 200), '') AS query
		FROM unnest(?::text[], ?::text[], ?::int[]) AS h(what, xmax, nodeid)
		JOIN citus_locks l ON l.locktype = 'transactionid' AND l.transactionid = h.xmax::xid AND l.nodeid = h.nodeid AND l.granted
		JOIN citus_stat_activity a ON a.global_pid = l.global_pid AND NOT a.is_worker_query
		ORDER BY h.what`, pgdialect.Array(whats), pgdialect.Array(xmaxes), pgdialect.Array(nodeIDs)).Scan(ctx, &held)
	if err != nil && !isNoRows(err) {
		s.logger.Debug("finding who holds the rows a write waited for failed", "error", err)
	}
	return held
}
