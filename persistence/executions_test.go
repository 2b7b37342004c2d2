package persistence

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/journey-go/journey/graph"
	"github.com/journey-go/journey/internal/pgtest"
)

// startState is what a start left in the database, without ids and times.
type startState struct {
	Revision     int64
	Values       []string
	History      []string
	Computations []string
}

func (b *bundle) startState(t *testing.T, id string) startState {
	t.Helper()
	ctx := context.Background()
	var st startState
	e, err := b.store.LoadExecution(ctx, id)
	require.NoError(t, err)
	st.Revision = e.Revision
	var lines []string
	require.NoError(t, b.db.NewRaw(b.store.q(`SELECT node || '=' || value::text || '@' || revision || ' ' || coalesce(metadata::text, '-')
		FROM {s}."values" WHERE execution_id = ? ORDER BY node`), id).Scan(ctx, &lines))
	st.Values = lines
	changes, err := b.store.History(ctx, id)
	require.NoError(t, err)
	for _, c := range changes {
		v := "-"
		if c.Value != nil {
			v = string(c.Value)
		}
		st.History = append(st.History, fmt.Sprintf("%s=%s@%d", c.Node, v, c.Revision))
	}
	lines = nil
	require.NoError(t, b.db.NewRaw(b.store.q(`SELECT concat_ws(' ', node, state, attempt, computed_with::text, concurrency_key, max_parallel, error)
		FROM {s}.computations WHERE execution_id = ? ORDER BY node, id`), id).Scan(ctx, &lines))
	st.Computations = lines
	return st
}

// A bulk start leaves each execution as CreateExecution, then SetValues with its item, leaves it:
// the same revisions, values, history and computations, for every kind of node that advancing a
// new execution can touch.
func TestCreateExecutionsIsCreateThenSetValues(t *testing.T) {
	t.Parallel()
	echo := func(ctx context.Context, in graph.Values) (any, error) { return 1, nil }
	g := graph.MustNew("starts", "v1", []graph.Node{
		graph.Input("a"),
		graph.Input("b"),
		graph.Input("flag"),
		graph.Compute("sum", graph.Needs("a", "b"), echo),
		graph.Compute("at_start", graph.Needs(), echo),
		graph.Compute("no_flag", graph.Not(graph.Provided("flag")), echo),
		graph.Compute("keyed", graph.Needs("a"), echo, graph.ConcurrencyKey(func(in graph.Values) string { return "k" })),
		graph.Compute("limited", graph.Needs("b"), echo, graph.MaxParallel(1)),
		graph.Historian("hist", graph.Needs("a")),
	})
	// Each path on a schema of its own, for gating counts every execution of the schema.
	ref, bulk := setup(t, g), setup(t, g)
	at := time.Now().Truncate(time.Millisecond)
	ref.clock.Set(at)
	bulk.clock.Set(at)
	ctx := context.Background()
	items := []map[string]json.RawMessage{
		{"a": json.RawMessage(`1`), "b": json.RawMessage(`{"z": [1, "two"], "y": null}`)},
		{"flag": json.RawMessage(`true`)},
		nil,
		{},
		{"a": json.RawMessage(`"x"`), "b": json.RawMessage(`2`), "flag": json.RawMessage(`false`)},
	}
	var want []startState
	for _, item := range items {
		e, err := ref.store.CreateExecution(ctx, g)
		require.NoError(t, err)
		if item != nil {
			_, err = ref.store.SetValues(ctx, e.ID, item, nil, nil)
			require.NoError(t, err)
		}
		want = append(want, ref.startState(t, e.ID))
	}
	execs, err := bulk.store.CreateExecutions(ctx, g, items, nil, nil, nil)
	require.NoError(t, err)
	require.Len(t, execs, len(items))
	for i, e := range execs {
		got := bulk.startState(t, e.ID)
		require.Equal(t, want[i], got, "item %d", i)
		require.Equal(t, got.Revision, e.Revision, "item %d: the returned revision", i)
		t.Logf("item %d: %+v", i, got)
	}
}

// A start with no values, of a graph where no gate holds on no values, takes one round trip:
// advancing it does nothing, so the BEGIN, the INSERT and the COMMIT go in one batch. A graph
// with a gate that holds on no values still gets its attempt at the start, in a second batch.
func TestIdleStartIsOneRoundTrip(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	eager := graph.MustNew("eager", "v1", []graph.Node{
		graph.Input("x"),
		graph.Compute("y", graph.Not(graph.Provided("x")), func(ctx context.Context, in graph.Values) (any, error) {
			return 1, nil
		}),
	})
	for _, c := range []struct {
		g            *graph.Graph
		batches      int
		computations int
	}{{testGraph("store"), 1, 0}, {eager, 2, 1}} {
		b := setup(t, c.g)
		s, log, _ := b.tracedStore(t)
		execs, err := s.CreateExecutions(ctx, c.g, []map[string]json.RawMessage{nil, {}}, nil, nil, nil)
		require.NoError(t, err)
		// The NOTIFY of the eager graph's work follows the commit, on a connection of its own.
		s.NotesSent()
		batches := map[int]bool{}
		for _, st := range log.sent {
			if strings.Contains(st.sql, "pg_notify") {
				continue
			}
			require.NotZero(t, st.batch, "%s: sent alone: %s", c.g.Name(), st.sql)
			batches[st.batch] = true
		}
		require.Len(t, batches, c.batches, c.g.Name())
		require.Len(t, execs, 2)
		for _, e := range execs {
			stored, err := s.LoadExecution(ctx, e.ID)
			require.NoError(t, err)
			require.Equal(t, stored, e, "%s: what the start returned", c.g.Name())
			require.Len(t, b.startState(t, e.ID).Computations, c.computations, c.g.Name())
		}
	}
}

// Idle Starts with keys go with the COMMIT of the Sets they meet, as unkeyed ones do: the write
// takes the round trips it takes without them. A key held returns its execution, Existing.
func TestKeyedIdleStartsGoWithTheCommit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	s, log, _ := b.tracedStore(t)
	set, err := s.CreateExecution(ctx, b.g)
	require.NoError(t, err)
	setting := func(x string) []Setting {
		return []Setting{{ID: set.ID, Set: map[string]json.RawMessage{"x": json.RawMessage(x)}}}
	}
	log.take()
	_, _, err = s.Write(ctx, []*graph.Graph{b.g}, nil, nil, nil, setting("1"))
	require.NoError(t, err)
	unkeyed := log.roundTrips()

	execs, _, err := s.Write(ctx, []*graph.Graph{b.g, b.g, b.g}, []string{"a", "", "a"}, nil, nil, setting("2"))
	require.NoError(t, err)
	require.Equal(t, unkeyed, log.roundTrips(), "the keyed INSERT and the read of the holders go with the COMMIT")
	require.False(t, execs[0].Existing)
	require.Equal(t, "a", *execs[0].Key)
	require.Nil(t, execs[1].Key)
	require.Equal(t, execs[0].ID, execs[2].ID, "one execution for the key")
	require.True(t, execs[2].Existing)

	again, _, err := s.Write(ctx, []*graph.Graph{b.g}, []string{"a"}, nil, nil, nil)
	require.NoError(t, err)
	require.Equal(t, 1, log.roundTrips(), "alone, BEGIN, INSERT, read and COMMIT in one batch")
	require.Equal(t, execs[0].ID, again[0].ID)
	require.True(t, again[0].Existing)
}

// A bulk start sends one NOTIFY for the work it makes available, and none per execution: no one
// can be waiting on an execution that did not exist before the commit.
func TestCreateExecutionsNotifiesOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, pgtest.URL(t))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	_, err = conn.Exec(ctx, "LISTEN "+pgx.Identifier{b.store.Channel()}.Sanitize())
	require.NoError(t, err)

	const n = 50
	items := make([]map[string]json.RawMessage, n)
	for i := range items {
		items[i] = map[string]json.RawMessage{"x": json.RawMessage(`1`)}
	}
	execs, err := b.store.CreateExecutions(ctx, b.g, items, nil, nil, nil)
	require.NoError(t, err)
	require.Len(t, execs, n)
	counts, err := b.store.StateCounts(ctx)
	require.NoError(t, err)
	require.Equal(t, map[string]int{StateAvailable: n}, counts, "one computation of y per execution")

	// Notifications arrive in commit order: the marker comes after everything the call sent,
	// once its notes have gone.
	b.store.NotesSent()
	const marker = "test-marker"
	_, err = conn.Exec(ctx, "SELECT pg_notify($1, $2)", b.store.Channel(), marker)
	require.NoError(t, err)
	var got []string
	for {
		note, err := conn.WaitForNotification(ctx)
		require.NoError(t, err)
		if note.Payload == marker {
			break
		}
		got = append(got, note.Payload)
	}
	require.Equal(t, []string{PayloadWork}, got)
}

// An id is its prefix and 20 characters of idAlphabet, and ids made in a later millisecond sort
// after: they go to the right edge of the indexes keyed by execution id. The id tells its lane.
func TestIDsSortByTheirTime(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 23, 18, 0, 0, 0, time.UTC)
	var prev string
	for i := range 200 {
		lane := int16(i % Lanes)
		id := newID("ONB", lane, at.Add(time.Duration(i)*time.Millisecond))
		require.Regexp(t, `^ONB[`+idAlphabet+`]{20}$`, id)
		require.Greater(t, id, prev, "id %d", i)
		require.Equal(t, lane, LaneOf(id))
		prev = id
	}
	// In the same millisecond, the random part tells them apart.
	seen := map[string]bool{}
	for range 1000 {
		id := newID("", 7, at)
		require.False(t, seen[id], "a repeated id: %s", id)
		seen[id] = true
	}
}

// The changes of a write go out in as few NOTIFYs as fit under PostgreSQL's payload limit, each
// naming its changes in order.
func TestPayloadsFillEachNotify(t *testing.T) {
	t.Parallel()
	s := &Store{channel: "journey:test"}
	var changed []string
	for i := range 1000 {
		changed = append(changed, fmt.Sprintf("exec_%020d@%d", i, i))
	}
	payloads := s.payloads(true, changed)
	require.Equal(t, PayloadWork, payloads[0])
	var named []string
	for i, p := range payloads[1:] {
		require.LessOrEqual(t, len(p), maxPayload)
		require.True(t, strings.HasPrefix(p, PayloadExecution), "payload %d has no prefix", i)
		changes := strings.Split(strings.TrimPrefix(p, PayloadExecution), ",")
		if i > 0 {
			prev := payloads[i]
			require.Greater(t, len(prev)+1+len(changes[0]), maxPayload, "payload %d had room for the next change", i-1)
		}
		named = append(named, changes...)
	}
	require.Greater(t, len(payloads), 2, "the changes need several payloads")
	require.Equal(t, changed, named)
}
