package persistence

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/uptrace/bun/dialect/pgdialect"
)

// Release is the release of this code, as the schema counts them: a replica refuses a schema
// whose oldest release (the schema_release table) is newer, and stops claiming once it finds one.
// A migration that changes what replicas of this release read or write raises the schema's
// oldest release past it.
const Release = 3

// ErrReleaseRetired means the schema was migrated for a newer release, which this one cannot run
// beside.
var ErrReleaseRetired = errors.New("journey: the schema needs a newer release")

// ErrReplicaIDInUse means another live process holds the replica's id.
var ErrReplicaIDInUse = errors.New("journey: the replica id is held by another live process")

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

// Identity is the process that holds a replica's row, for its heartbeats.
type Identity struct {
	// Incarnation is the process's own random id, a UUID: a heartbeat that finds another in the
	// row finds the row taken.
	Incarnation string
	// Holder says who the process is: its host and pid.
	Holder string
	// Locked: the process keeps the advisory lock of its replica id (IdentityLock) on a session
	// of its own, which dies with it.
	Locked bool
}

// Beat is what a replica's heartbeat found.
type BeatResult struct {
	// Taken: another process holds the row; nothing was written.
	Taken bool
	// Oldest is the oldest release that may run on the schema.
	Oldest int
}

// ReplicaHeartbeat upserts this replica's row: it is alive, serves these graphs, can make these
// deliveries (its routes), and should be thought dead after staleAfter without a heartbeat. start
// marks the first heartbeat of a process: it takes the row over for id, and its started_at is now,
// so the sweepers abandon what an earlier process with the same replica id (a pod restarted under
// its name) claimed and left RUNNING; the caller has made sure that no live process holds it
// (IdentityLock, ReplicaRow). A later heartbeat writes only if the row is still id's, else it
// reports the row taken. It reads the schema's oldest release in the same statement.
func (s *Store) ReplicaHeartbeat(ctx context.Context, replicaID string, id Identity, staleAfter time.Duration, start bool) (BeatResult, error) {
	var rows []struct {
		Oldest int `bun:"oldest"`
	}
	err := s.heartbeatDB().NewRaw(s.q(`WITH `+heartbeatCTEs+` SELECT (SELECT oldest FROM {s}.schema_release) AS oldest FROM beat`),
		s.heartbeatArgs(replicaID, id, staleAfter, start)...).Scan(ctx, &rows)
	if err != nil && !isNoRows(err) {
		return BeatResult{}, fmt.Errorf("writing the heartbeat of replica %s: %w", replicaID, err)
	}
	if len(rows) == 0 {
		return BeatResult{Taken: true}, nil
	}
	return BeatResult{Oldest: rows[0].Oldest}, nil
}

// heartbeatCTEs are the two CTEs of a replica's heartbeat, with the arguments that heartbeatArgs
// gives: held writes the process that holds the replica's id, and beat, only if held did, upserts
// the replica's row. A first heartbeat takes the id over; a later one writes only while the id is
// its process's. (A replica of a release before holders were recorded has no holder's row: the
// first heartbeat of this release inserts one.)
const heartbeatCTEs = `held AS (INSERT INTO {s}.replica_holders AS h (replica_id, incarnation, holder, locked)
		VALUES (?, ?::uuid, ?, ?)
		ON CONFLICT (replica_id) DO UPDATE SET incarnation = excluded.incarnation, holder = excluded.holder, locked = excluded.locked
		WHERE ? OR h.incarnation = excluded.incarnation
		RETURNING h.replica_id),
	beat AS (INSERT INTO {s}.replica_heartbeats AS r (replica_id, last_heartbeat, started_at, graphs, stale_after_ms, targets)
		SELECT held.replica_id, coalesce(?::timestamptz, now()), coalesce(?::timestamptz, now()), ?, ?, ? FROM held
		ON CONFLICT (replica_id) DO UPDATE
		SET last_heartbeat = excluded.last_heartbeat, graphs = excluded.graphs, stale_after_ms = excluded.stale_after_ms,
			targets = excluded.targets, started_at = CASE WHEN ? THEN excluded.started_at ELSE r.started_at END
		RETURNING r.replica_id)`

// heartbeatArgs are the arguments of heartbeatCTEs.
func (s *Store) heartbeatArgs(replicaID string, id Identity, staleAfter time.Duration, start bool) []any {
	return []any{replicaID, id.Incarnation, id.Holder, id.Locked, start,
		s.clock.NowOrNil(), s.clock.NowOrNil(), pgdialect.Array(s.keys), staleAfter.Milliseconds(), pgdialect.Array(s.routes), start}
}

// CheckRelease returns an error wrapping ErrReleaseRetired if the schema's oldest release is
// newer than Release, saying what to do; and an error that says to migrate if the schema has no
// record of it.
func (s *Store) CheckRelease(ctx context.Context) error {
	var rows []struct {
		Oldest int    `bun:"oldest"`
		Why    string `bun:"why"`
	}
	err := s.db.NewRaw(s.q(`SELECT oldest, why FROM {s}.schema_release`)).Scan(ctx, &rows)
	if hasCode(err, undefinedTable) {
		return fmt.Errorf("schema %s has not been migrated for this release (it has no schema_release table): "+
			"run `journey migrate`, or let New migrate it (Config.SkipMigrations false)", s.schema)
	}
	if err != nil && !isNoRows(err) {
		return fmt.Errorf("reading the oldest release that may run on schema %s: %w", s.schema, err)
	}
	if len(rows) == 1 && rows[0].Oldest > Release {
		return RetiredError(s.schema, rows[0].Oldest, rows[0].Why)
	}
	return s.ReadLayout(ctx)
}

// Distributed reports whether the schema's per-execution tables are distributed by Citus, as
// ReadLayout found.
func (s *Store) Distributed() bool { return s.citus }

// ReadLayout learns whether the schema's per-execution tables are distributed by Citus (see
// migrations.Distributed), which the statements that lock rows or read across lanes then pin to
// one lane each (see Store.citus).
func (s *Store) ReadLayout(ctx context.Context) error {
	var citus bool
	err := s.db.NewRaw(`SELECT EXISTS (SELECT FROM pg_extension WHERE extname = 'citus')`).Scan(ctx, &citus)
	if err == nil && citus {
		err = s.db.NewRaw(`SELECT EXISTS (SELECT FROM pg_dist_partition WHERE logicalrelid = to_regclass(?))`,
			s.quoted+".executions").Scan(ctx, &citus)
	}
	if err != nil {
		return fmt.Errorf("looking for Citus in schema %s: %w", s.schema, err)
	}
	s.citus = citus
	return nil
}

// RetiredError is the error of a replica of this release on a schema whose oldest release is
// oldest, for the reason why ("" if unknown).
func RetiredError(schema string, oldest int, why string) error {
	if why != "" {
		why = " (" + why + ")"
	}
	return fmt.Errorf("%w: schema %s was migrated for release %d or newer%s, and this replica runs release %d: "+
		"stop it, and deploy the new release", ErrReleaseRetired, schema, oldest, why, Release)
}

// IdentityKey is the key of the advisory lock that the process holding replicaID keeps.
func (s *Store) IdentityKey(replicaID string) string {
	return "journey-replica:" + s.schema + ":" + replicaID
}

// IdentityFree reports whether no session holds the advisory lock of replicaID, which a live
// process that holds the id keeps (Identity.Locked). It takes the lock for a transaction of its
// own, which works through a transaction pooler too.
func (s *Store) IdentityFree(ctx context.Context, replicaID string) (bool, error) {
	var free bool
	err := s.db.NewRaw("SELECT pg_try_advisory_xact_lock(hashtextextended(?, 0))", s.IdentityKey(replicaID)).Scan(ctx, &free)
	if err != nil {
		return false, fmt.Errorf("probing the lock of replica id %s: %w", replicaID, err)
	}
	return free, nil
}

// ReplicaHold is who holds a replica's row, as ReplicaRow reads it.
type ReplicaHold struct {
	Incarnation   *string   `bun:"incarnation"`
	Holder        *string   `bun:"holder"`
	Locked        *bool     `bun:"locked"`
	LastHeartbeat time.Time `bun:"last_heartbeat"`
	// Until is when the row goes stale without another heartbeat.
	Until time.Time `bun:"until"`
	Stale bool      `bun:"stale"`
}

// ReplicaRow reads who holds replicaID's row, nil if none does.
func (s *Store) ReplicaRow(ctx context.Context, replicaID string) (*ReplicaHold, error) {
	var rows []ReplicaHold
	err := s.db.NewRaw(s.q(`SELECT h.incarnation, h.holder, h.locked, r.last_heartbeat,
			r.last_heartbeat + r.stale_after_ms * interval '1 millisecond' AS until,
			r.last_heartbeat < coalesce(?::timestamptz, now()) - r.stale_after_ms * interval '1 millisecond' AS stale
		FROM {s}.replica_heartbeats r LEFT JOIN {s}.replica_holders h ON h.replica_id = r.replica_id
		WHERE r.replica_id = ?`), s.clock.NowOrNil(), replicaID).Scan(ctx, &rows)
	if err != nil && !isNoRows(err) {
		return nil, fmt.Errorf("reading the row of replica %s: %w", replicaID, err)
	}
	if len(rows) == 0 {
		return nil, nil
	}
	return &rows[0], nil
}

// DeleteReplica removes a replica's row, at the end of a graceful stop, if the process of
// incarnation still holds it, and records that its graph versions were served until now.
func (s *Store) DeleteReplica(ctx context.Context, replicaID, incarnation string) error {
	var n int
	err := s.db.NewRaw(s.q(deleteReplicasQuery(`replica_id = ? AND NOT EXISTS (SELECT 1 FROM {s}.replica_holders h
			WHERE h.replica_id = replica_heartbeats.replica_id AND h.incarnation <> ?::uuid)`,
		"coalesce(?::timestamptz, now())")), replicaID, incarnation, s.clock.NowOrNil()).Scan(ctx, &n)
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
	return `WITH d AS (DELETE FROM {s}.replica_heartbeats WHERE ` + where + ` RETURNING replica_id, graphs, last_heartbeat),
		holders AS (DELETE FROM {s}.replica_holders h USING d WHERE h.replica_id = d.replica_id),
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
	err := s.db.NewRaw(s.q(`SELECT `+cols("", replicaColumns)+`,
			last_heartbeat < coalesce(?::timestamptz, now()) - stale_after_ms * interval '1 millisecond' AS stale
		FROM {s}.replica_heartbeats ORDER BY last_heartbeat DESC, replica_id`), s.clock.NowOrNil()).Scan(ctx, &out)
	if err != nil && !isNoRows(err) {
		return nil, fmt.Errorf("listing replicas: %w", err)
	}
	return out, nil
}
