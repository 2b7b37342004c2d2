package persistence

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"

	"github.com/journey-go/journey/graph"
)

// GraphNode is a node of a recorded graph version: what can be shown of it without its Go code.
type GraphNode struct {
	Name string `json:"name"`
	// Kind is the node's kind, as graph.Kind.String gives it: "input", "compute", "tick_once"...
	Kind string `json:"kind"`
	// Gate is the node's gate as graph.Gate.String renders it, such as "needs(name, email)"; ""
	// for an input.
	Gate string `json:"gate,omitempty"`
	// Upstream are the nodes its gate references.
	Upstream []string `json:"upstream,omitempty"`
	// Targets are the input nodes a mutate node writes.
	Targets []string `json:"targets,omitempty"`
}

// GraphVersion is a row of graph_versions: a graph version that a replica has served.
type GraphVersion struct {
	Name        string      `bun:"graph_name" json:"name"`
	Version     string      `bun:"graph_version" json:"version"`
	Nodes       []GraphNode `bun:"nodes,type:jsonb" json:"nodes"`
	Mermaid     string      `bun:"mermaid" json:"mermaid"`
	FirstSeenAt time.Time   `bun:"first_seen_at" json:"first_seen_at"`
	LastSeenAt  time.Time   `bun:"last_seen_at" json:"last_seen_at"`
	// PausedAt is when the version was paused (PauseGraph), nil while it is not.
	PausedAt *time.Time `bun:"paused_at" json:"paused_at,omitempty"`
}

// Node returns the recorded node of that name.
func (v *GraphVersion) Node(name string) (GraphNode, bool) {
	for _, n := range v.Nodes {
		if n.Name == name {
			return n, true
		}
	}
	return GraphNode{}, false
}

// describeNodes returns the recorded form of g's nodes, in definition order.
func describeNodes(g *graph.Graph) []GraphNode {
	nodes := make([]GraphNode, 0, len(g.Nodes()))
	for _, n := range g.Nodes() {
		gn := GraphNode{Name: n.Name(), Kind: n.Kind().String(), Upstream: n.Upstream(), Targets: n.Targets()}
		if n.Kind() != graph.KindInput && n.Gate() != nil {
			gn.Gate = n.Gate().String()
		}
		nodes = append(nodes, gn)
	}
	return nodes
}

// ErrGraphChanged means this replica serves a graph under a version that is recorded with
// another definition (other nodes, kinds, gates or options; graph.Description): executions of the
// version rely on the recorded one. Give the changed graph a new version.
var ErrGraphChanged = errors.New("journey: graph changed")

// recordedGraph is a row of graph_fingerprints: the definition recorded under a graph version.
type recordedGraph struct {
	Name        string            `bun:"graph_name"`
	Version     string            `bun:"graph_version"`
	Fingerprint string            `bun:"fingerprint"`
	Description graph.Description `bun:"description,type:jsonb"`
}

// heldGraph is a graph version recorded with another definition than this replica's, and what
// keeps that definition recorded: executions of the version, and the live replicas (other than
// this one) that serve it. With neither, this replica's definition took its place (Taken).
type heldGraph struct {
	Name       string   `bun:"graph_name"`
	Version    string   `bun:"graph_version"`
	Executions bool     `bun:"executions"`
	Replicas   []string `bun:"replicas,array"`
	Taken      bool     `bun:"taken"`
}

// RecordGraphs records the graph versions this replica serves, and its first heartbeat (as
// ReplicaHeartbeat with start), in one transaction of two statements (three when a version's
// fingerprint changed). A version is identified by
// the fingerprint of its definition (graph.Graph.Fingerprint), recorded in graph_fingerprints by
// the first replica that serves it. A replica whose graph has another fingerprint than the one
// recorded under its version is refused with ErrGraphChanged, which says what changed, and the
// transaction changes nothing; unless the recorded definition has nothing left to keep it: no
// execution of the version (archived included), and no live replica other than this one serving
// it. This replica's definition then takes its place, and a warning names the changes.
//
// The fingerprint's row decides between replicas that start at once: the first statement inserts
// it, or locks it as recorded, until the commit, which writes the heartbeat too. The second
// statement, which may take over a recorded definition, reads in a snapshot taken once it holds
// the row, so it sees the heartbeat of any replica that recorded the version before.
//
// Each served version's graph_versions row, its nodes and Mermaid flowchart for the operators, is
// upserted in the second statement, as before.
func (s *Store) RecordGraphs(ctx context.Context, replicaID string, id Identity, staleAfter time.Duration) error {
	keys := slices.Sorted(slices.Values(s.keys)) // every replica locks the rows in this order
	described := make(map[string]graph.Description, len(keys))
	var names, versions, fingerprints, descriptions, nodes, mermaids []string
	for _, key := range keys {
		g := s.graphs[key]
		d := g.Describe()
		described[key] = d
		desc, err := json.Marshal(d)
		if err != nil {
			return fmt.Errorf("encoding the description of graph %q version %q: %w", g.Name(), g.Version(), err)
		}
		ns, err := json.Marshal(describeNodes(g))
		if err != nil {
			return fmt.Errorf("encoding the nodes of graph %q version %q: %w", g.Name(), g.Version(), err)
		}
		names, versions = append(names, g.Name()), append(versions, g.Version())
		fingerprints, descriptions = append(fingerprints, d.Fingerprint()), append(descriptions, string(desc))
		nodes, mermaids = append(nodes, string(ns)), append(mermaids, g.Mermaid())
	}
	recorded := map[string]recordedGraph{} // by key, those whose fingerprint is not this replica's
	var held []heldGraph
	err := s.db.RunInTx(ctx, readCommitted, func(ctx context.Context, tx bun.Tx) error {
		var rows []recordedGraph
		err := tx.NewRaw(s.q(`INSERT INTO {s}.graph_fingerprints AS f (graph_name, graph_version, fingerprint, description, recorded_at)
			SELECT g.name, g.version, g.fingerprint, g.description::jsonb, coalesce(?::timestamptz, now())
			FROM unnest(?::text[], ?::text[], ?::text[], ?::text[]) AS g(name, version, fingerprint, description)
			ORDER BY g.name, g.version
			ON CONFLICT (graph_name, graph_version) DO UPDATE SET fingerprint = f.fingerprint -- locks it as it is
			RETURNING graph_name, graph_version, fingerprint, description`),
			s.clock.NowOrNil(), pgdialect.Array(names), pgdialect.Array(versions), pgdialect.Array(fingerprints),
			pgdialect.Array(descriptions)).Scan(ctx, &rows)
		if err != nil && !isNoRows(err) {
			return fmt.Errorf("recording the fingerprints of the graph versions served: %w", err)
		}
		var changed []int // the positions in keys of the versions recorded with another fingerprint
		for _, r := range rows {
			key := GraphKey(r.Name, r.Version)
			if i := slices.Index(keys, key); r.Fingerprint != fingerprints[i] {
				recorded[key] = r
				changed = append(changed, i)
			}
		}
		pick := func(all []string) []string {
			out := make([]string, len(changed))
			for j, i := range changed {
				out[j] = all[i]
			}
			return out
		}
		// Whether executions of a changed version exist is a statement of its own, one a version:
		// on Citus, the executions are distributed, and a statement cannot join them with the
		// tables here, nor with the versions unnested. Versions change rarely.
		used := make([]bool, len(changed))
		for j, i := range changed {
			err := tx.NewRaw(s.q(`SELECT EXISTS (SELECT 1 FROM {s}.executions WHERE graph_name = ? AND graph_version = ?)`),
				names[i], versions[i]).Scan(ctx, &used[j])
			if err != nil {
				return fmt.Errorf("looking for executions of graph %s version %s, recorded with another definition: %w", names[i], versions[i], err)
			}
		}
		args := []any{s.clock.NowOrNil(), replicaID, pgdialect.Array(pick(names)), pgdialect.Array(pick(versions)),
			pgdialect.Array(pick(fingerprints)), pgdialect.Array(pick(descriptions)), pgdialect.Array(used), s.clock.NowOrNil()}
		args = append(args, s.heartbeatArgs(replicaID, id, staleAfter, true)...)
		args = append(args, s.clock.NowOrNil(), s.clock.NowOrNil(), pgdialect.Array(names), pgdialect.Array(versions),
			pgdialect.Array(nodes), pgdialect.Array(mermaids))
		// The heartbeat is written before the graph_versions rows (versions reads beat): in the
		// order of a sweep that deletes a stale replica's row, with which it could deadlock otherwise.
		err = tx.NewRaw(s.q(`WITH changed AS (
				SELECT c.name, c.version, c.fingerprint, c.description, c.executions,
					ARRAY(SELECT r.replica_id FROM {s}.replica_heartbeats r
						WHERE c.name || '@' || c.version = ANY(r.graphs) AND `+liveReplica+` AND r.replica_id <> ?
						ORDER BY r.replica_id) AS replicas
				FROM unnest(?::text[], ?::text[], ?::text[], ?::text[], ?::boolean[]) AS c(name, version, fingerprint, description, executions)),
			taken AS (UPDATE {s}.graph_fingerprints f
				SET fingerprint = c.fingerprint, description = c.description::jsonb, recorded_at = coalesce(?::timestamptz, now())
				FROM changed c
				WHERE f.graph_name = c.name AND f.graph_version = c.version AND NOT c.executions AND cardinality(c.replicas) = 0
				RETURNING f.graph_name, f.graph_version),
			`+heartbeatCTEs+`,
			versions AS (INSERT INTO {s}.graph_versions AS v (graph_name, graph_version, nodes, mermaid, first_seen_at, last_seen_at)
				SELECT g.name, g.version, g.nodes::jsonb, g.mermaid, coalesce(?::timestamptz, now()), coalesce(?::timestamptz, now())
				FROM beat, unnest(?::text[], ?::text[], ?::text[], ?::text[]) AS g(name, version, nodes, mermaid)
				ORDER BY g.name, g.version
				ON CONFLICT (graph_name, graph_version) DO UPDATE
				SET last_seen_at = excluded.last_seen_at, nodes = excluded.nodes, mermaid = excluded.mermaid)
			SELECT c.name AS graph_name, c.version AS graph_version, c.executions, c.replicas, t.graph_name IS NOT NULL AS taken
			FROM changed c LEFT JOIN taken t ON t.graph_name = c.name AND t.graph_version = c.version`),
			args...).Scan(ctx, &held)
		if err != nil && !isNoRows(err) {
			return fmt.Errorf("recording the graph versions served: %w", err)
		}
		var refused []error
		for _, h := range held {
			if key := GraphKey(h.Name, h.Version); !h.Taken {
				refused = append(refused, graphChanged(h, recorded[key], described[key]))
			}
		}
		return errors.Join(refused...)
	})
	if err != nil {
		return err
	}
	for _, h := range held {
		key := GraphKey(h.Name, h.Version)
		s.logger.Warn("graph version recorded with another definition, which no execution and no live replica kept: "+
			"this replica's replaces it", "graph", h.Name, "version", h.Version,
			"changes", strings.Join(recorded[key].Description.Changes(described[key]), "; "))
	}
	return nil
}

// graphChanged is the refusal of a graph version held by the definition recorded, was; now is
// this replica's.
func graphChanged(h heldGraph, was recordedGraph, now graph.Description) error {
	var holds []string
	if h.Executions {
		holds = append(holds, "executions of it exist")
	}
	if len(h.Replicas) > 0 {
		holds = append(holds, "live replicas serve it: "+strings.Join(h.Replicas, ", "))
	}
	next := nextVersion(h.Version)
	return fmt.Errorf("%w: graph %q version %q is recorded with another definition (fingerprint %.12s, this replica's %.12s): %s. "+
		"The recorded definition stays while an execution of the version exists or a live replica serves it (%s). Give this graph "+
		"a new version, such as %q; the executions of %q can then be moved to it with `journey graphs move %s %s %s` "+
		"(Runtime.MoveVersion) if the versions are compatible",
		ErrGraphChanged, h.Name, h.Version, was.Fingerprint, now.Fingerprint(), strings.Join(was.Description.Changes(now), "; "),
		strings.Join(holds, "; "), next, h.Version, h.Name, h.Version, next)
}

// nextVersion suggests the version after v: its trailing number plus one ("v1" gives "v2",
// "2024.9" gives "2024.10"), or v with "-2" after it if it does not end with a number.
func nextVersion(v string) string {
	digits := strings.TrimRight(v, "0123456789")
	n, err := strconv.Atoi(v[len(digits):])
	if err != nil {
		return v + "-2"
	}
	return digits + strconv.Itoa(n+1)
}

// LoadGraphVersion reads the recorded graph version, or returns ErrUnknownGraph.
func (s *Store) LoadGraphVersion(ctx context.Context, name, version string) (*GraphVersion, error) {
	if err := checkTexts("graph", name, "version", version); err != nil {
		return nil, err
	}
	var rows []GraphVersion
	err := s.db.NewRaw(s.q(`SELECT `+cols("", versionColumns)+` FROM {s}.graph_versions WHERE graph_name = ? AND graph_version = ?`),
		name, version).Scan(ctx, &rows)
	if err != nil && !isNoRows(err) {
		return nil, fmt.Errorf("reading graph %q version %q: %w", name, version, err)
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("%w: no replica has recorded graph %q version %q in schema %s; start a replica that serves it",
			ErrUnknownGraph, name, version, s.schema)
	}
	return &rows[0], nil
}

// ErrIncompatibleVersions means executions cannot move from one graph version to another: the
// newer does not keep every node of the older, of the same kind.
var ErrIncompatibleVersions = errors.New("journey: incompatible graph versions")

// MoveVersion moves every execution of graph name at version from to version to, and returns how
// many it moved: the way out for executions that a deploy left on a version no replica serves any
// more. The versions must be compatible: to keeps every node of from, under the same name and of
// the same kind, and may add nodes; gates may change. Both must be recorded (a replica has served
// them); no live replica may serve from any more, whose attempts would then belong to a version
// it does not serve; and no attempt of from may be running, whose outcome its replica would
// record by from's graph. Otherwise it refuses, naming why, and changes nothing.
//
// The executions' attempts move with them, and each execution is advanced at the next sweep (its
// wake time is now), where the gates of to decide what runs next; a NOTIFY tells the replicas
// that serve to of the work already waiting.
func (s *Store) MoveVersion(ctx context.Context, name, from, to string) (int64, error) {
	if err := checkTexts("graph", name, "version", from, "version", to); err != nil {
		return 0, err
	}
	if from == to {
		return 0, fmt.Errorf("%w: graph %q: the versions to move from and to are both %q", ErrIncompatibleVersions, name, from)
	}
	old, err := s.LoadGraphVersion(ctx, name, from)
	if err != nil {
		return 0, err
	}
	next, err := s.LoadGraphVersion(ctx, name, to)
	if err != nil {
		return 0, err
	}
	var problems []string
	for _, n := range old.Nodes {
		kept, ok := next.Node(n.Name)
		switch {
		case !ok:
			problems = append(problems, fmt.Sprintf("node %q is not in version %q", n.Name, to))
		case kept.Kind != n.Kind:
			problems = append(problems, fmt.Sprintf("node %q is a %s in version %q and a %s in %q", n.Name, n.Kind, from, kept.Kind, to))
		}
	}
	if len(problems) > 0 {
		return 0, fmt.Errorf("%w: graph %q cannot move from version %q to %q: %s; a version that its executions can move to keeps "+
			"every node, of the same kind, and may add nodes", ErrIncompatibleVersions, name, from, to, strings.Join(problems, "; "))
	}
	key := GraphKey(name, from)
	// The checks and the move are one transaction. A claim of from's attempts is refused by the
	// locks the move takes on them, or made before, and then seen RUNNING. A replica that starts
	// serving from while the move runs is seen by the check made once the move holds every row it
	// moves; one that starts later finds them moved, or locked (claims skip locked rows).
	var moved int64
	err = s.db.RunInTx(ctx, readCommitted, func(ctx context.Context, tx bun.Tx) error {
		if err := s.refuseServed(ctx, tx, name, from); err != nil {
			return err
		}
		var running int64
		if err := tx.NewRaw(s.q(`SELECT count(*) FROM {s}.nodes WHERE graph_key = ? AND state = 'RUNNING'`),
			key).Scan(ctx, &running); err != nil {
			return err
		}
		if err := refuseRunning(name, from, running); err != nil {
			return err
		}
		var res struct {
			Moved   int64 `bun:"moved"`
			Running int64 `bun:"running"`
		}
		err := tx.NewRaw(s.q(`WITH moved AS (UPDATE {s}.executions
				SET graph_version = ?, wake_at = coalesce(?::timestamptz, now()), updated_at = coalesce(?::timestamptz, now())
				WHERE graph_name = ? AND graph_version = ? RETURNING lane, id, created_at),
			attempts AS (UPDATE {s}.nodes c SET graph_key = ?
				WHERE (c.lane, c.execution_id) IN (SELECT lane, id FROM moved) AND c.graph_key = ? RETURNING c.state),
			history AS (UPDATE {s}.attempts a SET graph_key = attempts.key
				FROM (SELECT ?::text AS key) attempts
				WHERE (a.lane, a.execution_id) IN (SELECT lane, id FROM moved)),
			marked AS (`+markFrom(`SELECT ?::text AS graph_name, v AS graph_version, date_trunc('minute', created_at) AS minute
				FROM moved, unnest(ARRAY[?::text, ?::text]) AS v`)+`)
			SELECT (SELECT count(*) FROM moved) AS moved, (SELECT count(*) FROM attempts WHERE state = 'RUNNING') AS running`),
			to, s.clock.NowOrNil(), s.clock.NowOrNil(), name, from, GraphKey(name, to), key, GraphKey(name, to),
			name, from, to).Scan(ctx, &res)
		if err != nil {
			return err
		}
		if err := refuseRunning(name, from, res.Running); err != nil {
			return err
		}
		if err := s.refuseServed(ctx, tx, name, from); err != nil {
			return err
		}
		moved = res.Moved
		_, err = tx.ExecContext(ctx, "SELECT pg_notify(?, ?)", s.channel, PayloadWork)
		return err
	})
	switch {
	case errors.Is(err, ErrBadRequest):
		return 0, err // a refusal, which says why
	case err != nil:
		return 0, fmt.Errorf("moving the executions of graph %q from version %q to %q: %w", name, from, to, err)
	}
	return moved, nil
}

// refuseServed returns an error that refuses to move the executions of graph name from version
// from if a live replica serves that version, as tx sees it; otherwise nil, or the error of the
// reading.
func (s *Store) refuseServed(ctx context.Context, tx bun.Tx, name, from string) error {
	var serving []string
	err := tx.NewRaw(s.q(`SELECT r.replica_id FROM {s}.replica_heartbeats r
		WHERE ? = ANY(r.graphs) AND `+liveReplica+` ORDER BY r.replica_id`), GraphKey(name, from), s.clock.NowOrNil()).Scan(ctx, &serving)
	switch {
	case err != nil && !isNoRows(err):
		return fmt.Errorf("finding the replicas that serve %s: %w", GraphKey(name, from), err)
	case len(serving) > 0:
		return fmt.Errorf("%w: graph %q version %q is still served by replica(s) %s: stop them first (their work "+
			"would belong to a version they do not serve), or let them drain it; nothing was moved", ErrBadRequest, name, from,
			strings.Join(serving, ", "))
	}
	return nil
}

// refuseRunning returns an error that refuses to move the executions of graph name from version
// from while running of its attempts are RUNNING, or nil if none is.
func refuseRunning(name, from string, running int64) error {
	if running == 0 {
		return nil
	}
	return fmt.Errorf("%w: graph %q version %q has %d attempt(s) running, whose outcome would be recorded by a version that "+
		"is not theirs: wait for them to end, or for the sweeper to abandon them (their replica is gone), then move again; "+
		"nothing was moved", ErrBadRequest, name, from, running)
}

// StrandedVersion is a graph version whose executions have work left, running or waiting to
// run, that no live replica serves.
type StrandedVersion struct {
	Key        string `bun:"graph_key"`  // name@version
	Executions int64  `bun:"executions"` // with work left
}

// Stranded lists the graph versions that no live replica serves, while executions of theirs have
// work left. It reads the active attempts alone, through their partial indexes, and only those of
// the recorded versions (RecordGraphs) that no live replica serves: none, most of the time, when
// it reads no attempt. Counting every active attempt took a second with 200,000 waiting, at each
// look. Before any version is recorded, it counts them all.
func (s *Store) Stranded(ctx context.Context) ([]StrandedVersion, error) {
	var unserved []string
	var recorded bool
	err := s.db.NewRaw(s.q(`SELECT EXISTS (SELECT 1 FROM {s}.graph_versions) AS recorded,
			array(SELECT v.graph_name || '@' || v.graph_version FROM {s}.graph_versions v
				WHERE NOT EXISTS (SELECT 1 FROM {s}.replica_heartbeats r
					WHERE v.graph_name || '@' || v.graph_version = ANY(r.graphs) AND `+liveReplica+`)) AS unserved`),
		s.clock.NowOrNil()).Scan(ctx, &recorded, pgdialect.Array(&unserved))
	if err != nil {
		return nil, fmt.Errorf("looking for the graph versions that no live replica serves: %w", err)
	}
	if recorded && len(unserved) == 0 {
		return nil, nil
	}
	only := ""
	args := []any{s.clock.NowOrNil()}
	if recorded {
		only, args = " AND a.graph_key IN (?)", append(args, bun.List(unserved))
	}
	var out []StrandedVersion
	err = s.db.NewRaw(s.q(`SELECT a.graph_key, count(DISTINCT a.execution_id) AS executions FROM (
			SELECT graph_key, execution_id FROM {s}.nodes WHERE state = 'AVAILABLE'
			UNION ALL SELECT graph_key, execution_id FROM {s}.nodes WHERE state = 'PENDING'
			UNION ALL SELECT graph_key, execution_id FROM {s}.nodes WHERE state = 'RUNNING') a
		WHERE NOT EXISTS (SELECT 1 FROM {s}.replica_heartbeats r WHERE a.graph_key = ANY(r.graphs) AND `+liveReplica+`)`+only+`
		GROUP BY a.graph_key ORDER BY a.graph_key`), args...).Scan(ctx, &out)
	if err != nil && !isNoRows(err) {
		return nil, fmt.Errorf("looking for stranded graph versions: %w", err)
	}
	return out, nil
}
