package persistence

import (
	"context"
	"fmt"
	"time"

	"github.com/uptrace/bun/dialect/pgdialect"
)

// Replica is a row of the replica_heartbeats table.
type Replica struct {
	ID            string    `bun:"replica_id"`
	LastHeartbeat time.Time `bun:"last_heartbeat"`
	StartedAt     time.Time `bun:"started_at"`
	Graphs        []string  `bun:"graphs,array"`
	StaleAfterMS  int64     `bun:"stale_after_ms"`
	// Targets are the deliveries the replica can make, as Route.String gives them.
	Targets []string `bun:"targets,array"`
	// Stale is true when the row is older than the replica's own stale-after.
	Stale bool `bun:"stale"`
}

// ReplicaHeartbeat upserts this replica's row: it is alive, serves these graphs, can make these
// deliveries (its routes), and should be thought dead after staleAfter without a heartbeat. start
// marks the first heartbeat of a process: its started_at is now, so the sweepers abandon what an
// earlier process with the same replica id (a pod restarted under its name) claimed and left
// RUNNING.
func (s *Store) ReplicaHeartbeat(ctx context.Context, replicaID string, staleAfter time.Duration, start bool) error {
	_, err := s.heartbeatDB().NewRaw(s.q(heartbeatQuery), s.heartbeatArgs(replicaID, staleAfter, start)...).Exec(ctx)
	if err != nil {
		return fmt.Errorf("writing the heartbeat of replica %s: %w", replicaID, err)
	}
	return nil
}

// heartbeatQuery upserts a replica's row, with the arguments that heartbeatArgs gives.
const heartbeatQuery = `INSERT INTO {s}.replica_heartbeats AS r (replica_id, last_heartbeat, started_at, graphs, stale_after_ms, targets)
	VALUES (?, coalesce(?::timestamptz, now()), coalesce(?::timestamptz, now()), ?, ?, ?)
	ON CONFLICT (replica_id) DO UPDATE
	SET last_heartbeat = excluded.last_heartbeat, graphs = excluded.graphs, stale_after_ms = excluded.stale_after_ms,
		targets = excluded.targets, started_at = CASE WHEN ? THEN excluded.started_at ELSE r.started_at END`

// heartbeatArgs are the arguments of heartbeatQuery.
func (s *Store) heartbeatArgs(replicaID string, staleAfter time.Duration, start bool) []any {
	return []any{replicaID, s.clock.NowOrNil(), s.clock.NowOrNil(), pgdialect.Array(s.keys), staleAfter.Milliseconds(),
		pgdialect.Array(s.routes), start}
}

// DeleteReplica removes a replica's row, at the end of a graceful stop, and records that its
// graph versions were served until now.
func (s *Store) DeleteReplica(ctx context.Context, replicaID string) error {
	var n int
	err := s.db.NewRaw(s.q(deleteReplicasQuery("replica_id = ?", "coalesce(?::timestamptz, now())")),
		replicaID, s.clock.NowOrNil()).Scan(ctx, &n)
	if err != nil {
		return fmt.Errorf("deleting replica %s: %w", replicaID, err)
	}
	return nil
}

// deleteReplicasQuery deletes the replica rows that match where, and refreshes the last_seen_at
// of the graph versions they served to the time that at gives (an expression that may name the
// deleted row's last_heartbeat as d.last_heartbeat): when a version loses its last replica, the
// graph_versions row keeps when it was last served (see GraphSummary.UnservedSince). It returns
// the number of rows deleted.
func deleteReplicasQuery(where, at string) string {
	return `WITH d AS (DELETE FROM {s}.replica_heartbeats WHERE ` + where + ` RETURNING graphs, last_heartbeat),
		seen AS (SELECT g.key, max(` + at + `) AS at FROM d CROSS JOIN unnest(d.graphs) AS g(key) GROUP BY g.key),
		refreshed AS (UPDATE {s}.graph_versions v SET last_seen_at = greatest(v.last_seen_at, seen.at)
			FROM seen WHERE v.graph_name || '@' || v.graph_version = seen.key)
		SELECT count(*) FROM d`
}

// liveReplica holds for a replica_heartbeats row r whose replica is live at the store's time (the
// one argument): its heartbeat is younger than its own stale_after.
const liveReplica = `r.last_heartbeat >= coalesce(?::timestamptz, now()) - r.stale_after_ms * interval '1 millisecond'`

// Replicas lists the replicas that heartbeat in this schema, newest heartbeat first.
func (s *Store) Replicas(ctx context.Context) ([]Replica, error) {
	var out []Replica
	err := s.db.NewRaw(s.q(`SELECT *,
			last_heartbeat < coalesce(?::timestamptz, now()) - stale_after_ms * interval '1 millisecond' AS stale
		FROM {s}.replica_heartbeats ORDER BY last_heartbeat DESC, replica_id`), s.clock.NowOrNil()).Scan(ctx, &out)
	if err != nil && !isNoRows(err) {
		return nil, fmt.Errorf("listing replicas: %w", err)
	}
	return out, nil
}
