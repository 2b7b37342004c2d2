package persistence

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/uptrace/bun"
	"golang.org/x/sync/errgroup"

	"github.com/journey-go/journey/graph"
)

// stressGraph: inputs a and b, and c on b, which the claims of the test complete or fail by b's
// value. v2 adds an input.
func stressGraph(version string) *graph.Graph {
	nodes := []graph.Node{
		graph.Input("a"),
		graph.Input("b"),
		graph.Compute("c", graph.Needs("b"), func(ctx context.Context, in graph.Values) (any, error) { return 1, nil },
			graph.MaxAttempts(2), graph.Backoff(func(int) time.Duration { return 0 })),
	}
	if version == "v2" {
		nodes = append(nodes, graph.Input("d"))
	}
	return graph.MustNew("stress", version, nodes)
}

// counts are the numbers of Insights that the test checks: the executions, the series' sums, and
// per node what Insights counts of it.
type counts struct {
	Executions                                           int64
	Started, Succeeded, Failed, Abandoned, FailedForGood int64
	Nodes                                                map[string]nodeCounts
}

type nodeCounts struct{ Reached, EndsHere, FailedForGood, Attempts, Failures, Abandonments int64 }

// countsOf returns the counts of ins.
func countsOf(ins *Insights) counts {
	c := counts{Executions: ins.Executions, Nodes: map[string]nodeCounts{}}
	for _, p := range ins.Series {
		c.Started, c.Succeeded, c.Failed, c.Abandoned = c.Started+p.Started, c.Succeeded+p.Succeeded, c.Failed+p.Failed, c.Abandoned+p.Abandoned
		c.FailedForGood += p.FailedForGood
	}
	for _, n := range ins.Nodes {
		c.Nodes[n.Node] = nodeCounts{n.Reached, n.EndsHere, n.FailedForGood, n.Attempts, n.Failures, n.Abandonments}
	}
	return c
}

// countTables counts, straight from the tables, what Insights counts of the executions of graph
// "stress" at version ("" for all), every one of them ended, for the nodes given: an execution
// ends where it failed for good (the first node whose newest attempt failed or was abandoned), or
// else at its last value.
func (b *bundle) countTables(t *testing.T, version string, nodes []string) counts {
	t.Helper()
	ctx := context.Background()
	var execs []string
	require.NoError(t, b.db.NewRaw(b.store.q(`SELECT id FROM {s}.executions WHERE graph_name = 'stress' AND (? = '' OR graph_version = ?)`),
		version, version).Scan(ctx, &execs))
	var vals []struct {
		ID    string    `bun:"execution_id"`
		Node  string    `bun:"node"`
		SetAt time.Time `bun:"set_at"`
	}
	require.NoError(t, b.db.NewRaw(b.store.q(`SELECT execution_id, node, set_at FROM {s}."values" WHERE execution_id IN (?)`),
		bun.List(execs)).Scan(ctx, &vals))
	var attempts []struct {
		ID         int64     `bun:"id"`
		Execution  string    `bun:"execution_id"`
		Node       string    `bun:"node"`
		State      string    `bun:"state"`
		FinishedAt time.Time `bun:"finished_at"`
	}
	require.NoError(t, b.db.NewRaw(b.store.q(`SELECT id, execution_id, node, state, coalesce(finished_at, created_at) AS finished_at
		FROM {s}.computations WHERE execution_id IN (?)`), bun.List(execs)).Scan(ctx, &attempts))

	c := counts{Executions: int64(len(execs)), Started: int64(len(execs)), Nodes: map[string]nodeCounts{}}
	node := func(name string, f func(n *nodeCounts)) {
		n := c.Nodes[name]
		f(&n)
		c.Nodes[name] = n
	}
	for _, name := range nodes {
		c.Nodes[name] = nodeCounts{}
	}
	type last struct {
		node string
		at   time.Time
	}
	lastValue, failedAt := map[string]last{}, map[string]last{}
	for _, v := range vals {
		node(v.Node, func(n *nodeCounts) { n.Reached++ })
		if l, ok := lastValue[v.ID]; !ok || v.SetAt.After(l.at) || v.SetAt.Equal(l.at) && v.Node < l.node {
			lastValue[v.ID] = last{v.Node, v.SetAt}
		}
	}
	newest := map[[2]string]int{}
	for i, a := range attempts {
		k := [2]string{a.Execution, a.Node}
		if j, ok := newest[k]; !ok || a.ID > attempts[j].ID {
			newest[k] = i
		}
		switch a.State {
		case StateSuccess:
			c.Succeeded++
			node(a.Node, func(n *nodeCounts) { n.Attempts++ })
		case StateFailed:
			c.Failed++
			node(a.Node, func(n *nodeCounts) { n.Attempts, n.Failures = n.Attempts+1, n.Failures+1 })
		case StateAbandoned:
			c.Abandoned++
			node(a.Node, func(n *nodeCounts) { n.Attempts, n.Abandonments = n.Attempts+1, n.Abandonments+1 })
		}
	}
	for _, i := range newest {
		a := attempts[i]
		if a.State != StateFailed && a.State != StateAbandoned {
			continue
		}
		if f, ok := failedAt[a.Execution]; !ok || a.FinishedAt.Before(f.at) || a.FinishedAt.Equal(f.at) && a.Node < f.node {
			failedAt[a.Execution] = last{a.Node, a.FinishedAt}
		}
	}
	for _, id := range execs {
		if f, ok := failedAt[id]; ok {
			c.FailedForGood++
			node(f.node, func(n *nodeCounts) { n.EndsHere, n.FailedForGood = n.EndsHere+1, n.FailedForGood+1 })
		} else if l, ok := lastValue[id]; ok {
			node(l.node, func(n *nodeCounts) { n.EndsHere++ })
		}
	}
	for name := range c.Nodes { // Insights shows the nodes of the version read
		if !slices.Contains(nodes, name) {
			delete(c.Nodes, name)
		}
	}
	return c
}

// Insights count every committed write once, whatever runs beside the roll: a roll runs in a
// loop, beside writers that start executions, set values and archive some; claims that complete
// and fail attempts, and others that a sweep abandons; a move of every execution of v1 to v2; and
// retention passes. Once they are done and the last roll has run, Insights give, for each version
// and for both, the counts read from the tables.
func TestInsightsCountEveryCommittedWriteOnce(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	v1, v2 := stressGraph("v1"), stressGraph("v2")
	b := setup(t, v1, v2)
	// The writes take their times from the database, as they do in production.
	s, err := New(Config{DB: b.db, Schema: b.schema, Graphs: []*graph.Graph{v1, v2}, Logger: testLogger()})
	require.NoError(t, err)
	require.NoError(t, s.ReadLayout(ctx))
	b.store = s
	recordGraphs(t, s)
	// The workers' replica is live and serves v2 alone, so that v1 can move; "ghost" has no
	// heartbeat, and a sweep abandons what it claims.
	worker, err := New(Config{DB: b.db, Schema: b.schema, Graphs: []*graph.Graph{v2}, Logger: testLogger()})
	require.NoError(t, err)
	require.NoError(t, worker.ReadLayout(ctx))
	beat(t, worker, "worker", time.Hour, true)

	const writers, perWriter = 3, 30
	var writing, rolls atomic.Int64
	writing.Store(writers)
	halfway := make(chan struct{})
	var once sync.Once
	raw := func(v any) json.RawMessage { m, _ := json.Marshal(v); return m }

	// The roll, in a loop, until the work is done: a reading's, then one in the background.
	stopRolling := make(chan struct{})
	var roll errgroup.Group
	roll.Go(func() error {
		for {
			select {
			case <-stopRolling:
				return nil
			default:
			}
			if _, err := s.RollInsights(ctx, "", 50*time.Millisecond); err != nil {
				return fmt.Errorf("a reading's roll: %w", err)
			}
			if _, err := s.RollInsights(ctx, "", RollInBackground); err != nil {
				return fmt.Errorf("a roll in the background: %w", err)
			}
			rolls.Add(1)
		}
	})

	var work errgroup.Group
	for w := range writers {
		work.Go(func() error {
			defer writing.Add(-1)
			for i := range perWriter {
				if w == 0 && i == perWriter/2 {
					once.Do(func() { close(halfway) })
				}
				g := v2
				if i%3 == 0 {
					g = v1 // a's alone: they have no attempt, and move
				}
				e, err := s.CreateExecution(ctx, g)
				if err != nil {
					return fmt.Errorf("creating: %w", err)
				}
				set := func(node string, v any) error {
					_, err := s.SetValues(ctx, e.ID, map[string]json.RawMessage{node: raw(v)}, nil, nil)
					return err
				}
				if err := set("a", i); err != nil {
					return err
				}
				if g == v1 {
					if err := set("a", i+1); err != nil { // the first goes to the history
						return err
					}
				} else if err := set("b", []string{"ok", "bad", "flaky", "lost"}[(w+i)%4]); err != nil {
					return err
				}
				if i%5 == 4 {
					if err := s.SetArchived(ctx, e.ID, true); err != nil {
						return fmt.Errorf("archiving: %w", err)
					}
				}
			}
			return nil
		})
	}
	// The claims: b "ok" succeeds; "bad" fails for good at once; "flaky" fails once, then
	// succeeds; "lost" fails until its attempts are used up.
	for range 2 {
		work.Go(func() error {
			for {
				cs, err := s.Claim(ctx, "worker", 5)
				if err != nil {
					return fmt.Errorf("claiming: %w", err)
				}
				if len(cs) == 0 {
					if writing.Load() == 0 {
						return nil
					}
					if _, err := s.PromoteDue(ctx); err != nil {
						return err
					}
					continue
				}
				for _, c := range cs {
					vals := c.ClaimedValues()
					used := map[string]int64{"b": vals["b"].Revision}
					switch v := vals.String("b"); {
					case v == "ok" || v == "flaky" && c.Attempt > 1:
						err = s.Complete(ctx, c, raw(v), used)
					case v == "bad":
						err = s.Fail(ctx, c, graph.Permanent(errors.New("bad")))
					default:
						err = s.Fail(ctx, c, errors.New(v))
					}
					if err != nil && !errors.Is(err, ErrClaimLost) {
						return fmt.Errorf("recording attempt %d: %w", c.ID, err)
					}
				}
			}
		})
	}
	// Halfway: a ghost claims some attempts; every execution of v1 moves to v2, while the
	// writers go on; and a sweep abandons what the ghost claimed and runs retention.
	work.Go(func() error {
		<-halfway
		if _, err := s.Claim(ctx, "ghost", 3); err != nil {
			return fmt.Errorf("the ghost's claim: %w", err)
		}
		if _, err := s.MoveVersion(ctx, "stress", "v1", "v2"); err != nil {
			return fmt.Errorf("moving: %w", err)
		}
		_, err := s.Sweep(ctx, SweepOptions{Holder: "sweeper", Limit: 1000, Retention: time.Millisecond})
		return err
	})
	require.NoError(t, work.Wait())
	// Two executions more, whose attempts the ghost claims until sweeps have abandoned them for
	// good, as it does what is left; then retention once more.
	for range 2 {
		e, err := s.CreateExecution(ctx, v2)
		require.NoError(t, err)
		_, err = s.SetValues(ctx, e.ID, map[string]json.RawMessage{"b": raw("ok")}, nil, nil)
		require.NoError(t, err)
	}
	for {
		_, err := s.Sweep(ctx, SweepOptions{Holder: "sweeper", Limit: 1000})
		require.NoError(t, err)
		cs, err := s.Claim(ctx, "ghost", 100)
		require.NoError(t, err)
		if len(cs) == 0 {
			var active int
			require.NoError(t, b.db.NewRaw(s.q(`SELECT count(*) FROM {s}.computations WHERE state IN ('PENDING', 'AVAILABLE', 'RUNNING')`)).
				Scan(ctx, &active))
			if active == 0 {
				break
			}
		}
	}
	_, err = s.Sweep(ctx, SweepOptions{Holder: "sweeper", Limit: 1000, Retention: time.Millisecond})
	require.NoError(t, err)
	close(stopRolling)
	require.NoError(t, roll.Wait())
	require.Positive(t, rolls.Load())

	for {
		left, err := s.RollInsights(ctx, "", 10*time.Second)
		require.NoError(t, err)
		if left == 0 {
			break
		}
	}
	for _, version := range []string{"", "v1", "v2"} {
		ins, err := s.Insights(ctx, InsightsQuery{Graph: "stress", Version: version, Since: time.Hour, Scope: ScopeAll,
			IdleAfter: time.Nanosecond}.WithDefaults())
		require.NoError(t, err)
		require.Zero(t, ins.Pending)
		var nodes []string
		for _, n := range ins.Nodes {
			nodes = append(nodes, n.Node)
		}
		want := b.countTables(t, version, nodes)
		require.Equal(t, want, countsOf(ins), "version %q", version)
		if version == "" {
			require.EqualValues(t, writers*perWriter+2, want.Executions)
			require.Positive(t, want.Nodes["c"].FailedForGood)
			require.Positive(t, want.Abandoned, "the ghost's attempts were abandoned")
		}
	}
}
