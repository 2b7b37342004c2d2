package persistence

import (
	"context"
	"fmt"

	"github.com/uptrace/bun"

	"github.com/journey-go/journey/internal/telemetry"
)

// ActiveCounts counts the PENDING, AVAILABLE and RUNNING attempts of each node of the served
// graphs that runs a function, zeros included, for the journey.computation.count metric. It is one
// statement, whose three branches each read one partial index of an active state and the rows it
// lists: its cost grows with the active attempts, never with the finished ones.
func (s *Store) ActiveCounts(ctx context.Context) ([]telemetry.StateCount, error) {
	if len(s.keys) == 0 {
		return nil, nil
	}
	var rows []struct {
		GraphKey string `bun:"graph_key"`
		Node     string `bun:"node"`
		State    string `bun:"state"`
		N        int64  `bun:"n"`
	}
	err := s.db.NewRaw(s.q(`SELECT graph_key, node, state, count(*) AS n FROM (
			SELECT graph_key, node, state FROM {s}.nodes WHERE state = 'PENDING' AND graph_key IN (?0)
			UNION ALL SELECT graph_key, node, state FROM {s}.nodes WHERE state = 'AVAILABLE' AND graph_key IN (?0)
			UNION ALL SELECT graph_key, node, state FROM {s}.nodes WHERE state = 'RUNNING' AND graph_key IN (?0)) a
		GROUP BY graph_key, node, state`), bun.List(s.keys)).Scan(ctx, &rows)
	if err != nil && !isNoRows(err) {
		return nil, fmt.Errorf("counting the active computations by node: %w", err)
	}
	type at struct{ key, node, state string }
	n := make(map[at]int64, len(rows))
	for _, r := range rows {
		n[at{r.GraphKey, r.Node, r.State}] = r.N
	}
	var out []telemetry.StateCount
	for i, key := range s.computed[0] {
		g := s.graphs[key]
		node := s.computed[1][i]
		for _, state := range []string{StatePending, StateAvailable, StateRunning} {
			out = append(out, telemetry.StateCount{Graph: g.Name(), Version: g.Version(), Node: node, State: state,
				N: n[at{key, node, state}]})
		}
	}
	return out, nil
}
