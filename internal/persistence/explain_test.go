package persistence

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"

	"github.com/journey-go/journey/graph"
	"github.com/journey-go/journey/internal/pgtest"
)

// statementLog records the statements a bun.DB sends, as they were sent.
type statementLog struct {
	mu    sync.Mutex
	sent  []string
	since int
}

func (l *statementLog) BeforeQuery(ctx context.Context, _ *bun.QueryEvent) context.Context {
	return ctx
}

func (l *statementLog) AfterQuery(_ context.Context, e *bun.QueryEvent) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sent = append(l.sent, e.Query)
}

// take returns the statements sent since the last take that a plan can be explained for.
func (l *statementLog) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, q := range l.sent[l.since:] {
		switch strings.ToUpper(strings.Fields(q)[0]) {
		case "SELECT", "WITH", "UPDATE", "INSERT", "DELETE":
			out = append(out, q)
		}
	}
	l.since = len(l.sent)
	return out
}

// planNode is a node of a plan of EXPLAIN (FORMAT JSON).
type planNode struct {
	NodeType string     `json:"Node Type"`
	Relation string     `json:"Relation Name"`
	Index    string     `json:"Index Name"`
	Plans    []planNode `json:"Plans"`
}

// scans adds the relations a plan reads whole to seq, and the indexes it reads to indexes.
func (n planNode) scans(seq, indexes map[string]bool) {
	if n.NodeType == "Seq Scan" {
		seq[n.Relation] = true
	}
	if n.Index != "" {
		indexes[n.Index] = true
	}
	for _, c := range n.Plans {
		c.scans(seq, indexes)
	}
}

// The statements that run all the time, whatever the table holds (the claim, the heartbeat, the
// sweep's selection of expired attempts and the promotion) find the active attempts through the
// partial indexes of the active states, and the executions by key: they never scan the finished
// rows, so that a table of a million finished attempts costs them what an empty one does.
func TestHotStatementsUseThePartialIndexes(t *testing.T) {
	t.Parallel()
	const finished = 5000
	b := setup(t)
	ctx := context.Background()
	// Finished executions, each with its values and its successful attempt.
	b.exec(t, `INSERT INTO {s}.executions (id, graph_name, graph_version)
		SELECT 'finished-' || g, 'store', 'v1' FROM generate_series(1, ?) g`, finished)
	b.exec(t, `INSERT INTO {s}."values" (execution_id, node, value, revision, set_at)
		SELECT 'finished-' || g, n, '1', 1, now() FROM generate_series(1, ?) g, unnest(ARRAY['x', 'y']) n`, finished)
	b.exec(t, `INSERT INTO {s}.computations (execution_id, graph_key, node, state, attempt, max_attempts, run_at,
			abandon_after_ms, heartbeat_timeout_ms, created_at, finished_at)
		SELECT 'finished-' || g, 'store@v1', 'y', 'SUCCESS', 1, 2, now(), 10000, 3000, now(), now()
		FROM generate_series(1, ?) g`, finished)
	// A few active attempts of each state: running, available, and pending until later.
	b.ready(t, 20)
	claimed, err := b.store.Claim(ctx, "r1", 10)
	require.NoError(t, err)
	require.Len(t, claimed, 10)
	require.NoError(t, b.store.ReplicaHeartbeat(ctx, "r1", time.Minute, true))
	b.exec(t, `UPDATE {s}.computations SET state = 'PENDING', run_at = now() + interval '1 hour'
		WHERE id IN (SELECT id FROM {s}.computations WHERE state = 'AVAILABLE' ORDER BY id LIMIT 5)`)
	b.exec(t, `ANALYZE {s}.executions, {s}."values", {s}.computations`)

	// A store of its own, whose statements are recorded.
	db := pgtest.BunDB(t, pgtest.URL(t))
	log := &statementLog{}
	db = db.WithQueryHook(log)
	s, err := New(Config{DB: db, Schema: b.schema, Graphs: []*graph.Graph{b.g}, Clock: b.clock, Logger: testLogger()})
	require.NoError(t, err)
	refs := make([]ClaimRef, len(claimed))
	for i, c := range claimed {
		refs[i] = c.Ref()
	}
	for _, op := range []struct {
		name  string
		run   func() error
		index string // the prefix of the name of an index that one of its statements must use
	}{
		{"claim", func() error { _, err := s.Claim(ctx, "r2", 2); return err }, "computations_available_idx"},
		{"heartbeat", func() error { _, err := s.Heartbeat(ctx, "r1", refs); return err }, "computations_running_"},
		{"sweep", func() error {
			_, err := s.Sweep(ctx, SweepOptions{Holder: "r1", Limit: 100})
			return err
		}, "computations_running_"},
		{"promotion", func() error { _, err := s.PromoteDue(ctx); return err }, "computations_pending_idx"},
	} {
		require.NoError(t, op.run(), op.name)
		statements := log.take()
		require.NotEmpty(t, statements, op.name)
		used := false
		for _, q := range statements {
			var raw string
			require.NoError(t, db.DB.QueryRowContext(ctx, "EXPLAIN (FORMAT JSON) "+q).Scan(&raw), "%s: %s", op.name, q)
			var plans []struct{ Plan planNode }
			require.NoError(t, json.Unmarshal([]byte(raw), &plans))
			seq, indexes := map[string]bool{}, map[string]bool{}
			plans[0].Plan.scans(seq, indexes)
			t.Logf("%s: indexes %v, sequential scans %v: %.160s", op.name, keys(indexes), keys(seq), oneLine(q))
			require.False(t, seq["computations"] || seq["executions"] || seq["values"],
				"%s: a sequential scan of a table that holds the finished rows:\n%s\n%s", op.name, q, raw)
			for index := range indexes {
				used = used || strings.HasPrefix(index, op.index)
			}
		}
		require.True(t, used, "%s: no statement uses %s*", op.name, op.index)
	}
}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func oneLine(q string) string { return strings.Join(strings.Fields(q), " ") }
