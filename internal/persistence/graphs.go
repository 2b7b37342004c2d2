package persistence

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

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

// RecordGraphs upserts a graph_versions row for each graph this replica serves, in one
// statement. A version seen before has its last_seen_at refreshed, and its nodes and flowchart
// replaced by this replica's: the table shows the definition last served under each version.
func (s *Store) RecordGraphs(ctx context.Context) error {
	if len(s.keys) == 0 {
		return nil
	}
	names := make([]string, 0, len(s.keys))
	versions := make([]string, 0, len(s.keys))
	nodes := make([]string, 0, len(s.keys))
	mermaids := make([]string, 0, len(s.keys))
	for _, key := range s.keys {
		g := s.graphs[key]
		b, err := json.Marshal(describeNodes(g))
		if err != nil {
			return fmt.Errorf("encoding the nodes of graph %q version %q: %w", g.Name(), g.Version(), err)
		}
		names, versions = append(names, g.Name()), append(versions, g.Version())
		nodes, mermaids = append(nodes, string(b)), append(mermaids, g.Mermaid())
	}
	_, err := s.db.NewRaw(s.q(`INSERT INTO {s}.graph_versions AS v
			(graph_name, graph_version, nodes, mermaid, first_seen_at, last_seen_at)
		SELECT g.name, g.version, g.nodes::jsonb, g.mermaid, coalesce(?::timestamptz, now()), coalesce(?::timestamptz, now())
		FROM unnest(?::text[], ?::text[], ?::text[], ?::text[]) AS g(name, version, nodes, mermaid)
		ON CONFLICT (graph_name, graph_version) DO UPDATE
		SET last_seen_at = excluded.last_seen_at, nodes = excluded.nodes, mermaid = excluded.mermaid`),
		s.clock.NowOrNil(), s.clock.NowOrNil(), pgdialect.Array(names), pgdialect.Array(versions),
		pgdialect.Array(nodes), pgdialect.Array(mermaids)).Exec(ctx)
	if err != nil {
		return fmt.Errorf("recording the graph versions served: %w", err)
	}
	return nil
}

// LoadGraphVersion reads the recorded graph version, or returns ErrUnknownGraph.
func (s *Store) LoadGraphVersion(ctx context.Context, name, version string) (*GraphVersion, error) {
	if err := checkTexts("graph", name, "version", version); err != nil {
		return nil, err
	}
	var rows []GraphVersion
	err := s.db.NewRaw(s.q(`SELECT * FROM {s}.graph_versions WHERE graph_name = ? AND graph_version = ?`),
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
