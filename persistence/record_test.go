package persistence

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/journey-go/journey/graph"
	"github.com/journey-go/journey/internal/pgtest"
)

// A batch's lost claim drops its own outcome only; the others are recorded, and one NOTIFY names
// every execution that changed.
func TestRecordDropsOnlyTheLostClaims(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	b.ready(t, 3)
	claimed, err := b.store.Claim(ctx, "r1", 3)
	require.NoError(t, err)
	require.Len(t, claimed, 3)
	refs := make([]ClaimRef, len(claimed))
	for i, c := range claimed {
		refs[i] = c.Ref()
	}
	n, err := b.store.Release(ctx, "r1", refs) // every claim is void…
	require.NoError(t, err)
	require.Equal(t, 3, n)
	again, err := b.store.Claim(ctx, "r1", 3) // …and claimed again, under new tokens
	require.NoError(t, err)
	require.Len(t, again, 3)

	// The notifications of the writes so far go out after their commits: they must not reach
	// the listener, which hears those of the batch alone.
	b.store.NotesSent()
	conn, err := pgx.Connect(ctx, pgtest.URL(t))
	require.NoError(t, err)
	defer func() { _ = conn.Close(ctx) }()
	_, err = conn.Exec(ctx, "LISTEN "+pgx.Identifier{b.store.channel}.Sanitize())
	require.NoError(t, err)

	outs := []Outcome{
		{C: again[0], Result: json.RawMessage(`10`), Used: map[string]int64{"x": 1}},
		{C: claimed[1], Result: json.RawMessage(`11`), Used: map[string]int64{"x": 1}}, // the void claim
		{C: again[2], Err: graph.Permanent(context.DeadlineExceeded)},
	}
	lost, err := b.store.Record(ctx, outs)
	require.NoError(t, err)
	require.NoError(t, lost[0])
	require.ErrorIs(t, lost[1], ErrClaimLost)
	require.NoError(t, lost[2])

	vals, err := b.store.Values(ctx, again[0].ExecutionID)
	require.NoError(t, err)
	require.Equal(t, int64(10), vals.Int("y"))
	vals, err = b.store.Values(ctx, again[1].ExecutionID)
	require.NoError(t, err)
	require.False(t, vals.Has("y"), "the lost claim wrote nothing")
	require.Equal(t, StateRunning, b.latest(t, again[1].ExecutionID, "y").State, "the live claim is untouched")
	failed := b.latest(t, again[2].ExecutionID, "y")
	require.Equal(t, StateFailed, failed.State)
	require.Contains(t, *failed.Error, "deadline exceeded")

	var changed []string
	for len(changed) < 2 {
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		note, err := conn.WaitForNotification(wctx)
		cancel()
		require.NoError(t, err, "the changes were announced")
		if rest, ok := strings.CutPrefix(note.Payload, PayloadExecution); ok {
			require.Empty(t, changed, "one NOTIFY for the batch's changes")
			changed = strings.Split(rest, ",")
		}
	}
	var ids []string
	for _, c := range changed {
		id, rev := ParseChange(c)
		ids = append(ids, id)
		e, err := b.store.LoadExecution(ctx, id)
		require.NoError(t, err)
		require.Equal(t, e.Revision, rev, "each change names the revision it made")
	}
	require.ElementsMatch(t, []string{again[0].ExecutionID, again[2].ExecutionID}, ids)
}

// Two outcomes of one execution in one batch are recorded one after the other, as two writes
// would: each value gets a revision of its own, and the execution's revision counts both.
func TestRecordTwoOutcomesOfOneExecution(t *testing.T) {
	t.Parallel()
	one := func(ctx context.Context, in graph.Values) (any, error) { return 1, nil }
	g := graph.MustNew("pair", "v1", []graph.Node{
		graph.Input("x"),
		graph.Compute("y", graph.Needs("x"), one),
		graph.Compute("z", graph.Needs("x"), one),
		graph.Compute("sum", graph.Needs("y", "z"), one),
	})
	b := setup(t, g)
	ctx := context.Background()
	id := b.start(t, g, map[string]any{"x": 1})
	_, err := b.store.SetValues(ctx, id, map[string]json.RawMessage{"x": json.RawMessage(`1`)}, json.RawMessage(`{"by": "test"}`), nil)
	require.NoError(t, err)
	stored, err := b.store.Values(ctx, id)
	require.NoError(t, err)
	set, err := b.store.LoadExecution(ctx, id)
	require.NoError(t, err)
	claimed, err := b.store.Claim(ctx, "r1", 2)
	require.NoError(t, err)
	require.Len(t, claimed, 2)
	before, err := b.store.LoadExecution(ctx, id)
	require.NoError(t, err)
	require.Equal(t, set.Revision+2, before.Revision, "one revision per claim")
	for _, c := range claimed {
		vals := c.ClaimedValues()
		require.Equal(t, stored, vals, "the claim returns the values its function reads")
		require.JSONEq(t, `{"by": "test"}`, string(vals["x"].Metadata))
		delete(vals, "x") // each function has a map of its own: the other's still has x
	}

	lost, err := b.store.Record(ctx, []Outcome{
		{C: claimed[0], Result: json.RawMessage(`2`), Used: map[string]int64{"x": 1}},
		{C: claimed[1], Result: json.RawMessage(`3`), Used: map[string]int64{"x": 1}},
	})
	require.NoError(t, err)
	require.Equal(t, []error{nil, nil}, lost)
	after, err := b.store.LoadExecution(ctx, id)
	require.NoError(t, err)
	require.Equal(t, before.Revision+2, after.Revision, "one revision per completion")
	vals, err := b.store.Values(ctx, id)
	require.NoError(t, err)
	revs := []int64{vals["y"].Revision, vals["z"].Revision}
	slices.Sort(revs)
	require.Equal(t, []int64{before.Revision + 1, before.Revision + 2}, revs)
	sum := b.latest(t, id, "sum")
	require.Equal(t, StateAvailable, sum.State, "advanced once both were in")
	require.JSONEq(t, `{"y": `+jsonInt(vals["y"].Revision)+`, "z": `+jsonInt(vals["z"].Revision)+`}`, sum.ComputedWith)
}

func jsonInt(n int64) string { b, _ := json.Marshal(n); return string(b) }

// Two batches that record outcomes of the same executions, given in opposite orders, never
// deadlock: each locks the executions in id order.
func TestRecordBatchesNeverDeadlock(t *testing.T) {
	t.Parallel()
	one := func(ctx context.Context, in graph.Values) (any, error) { return 1, nil }
	g := graph.MustNew("crossed", "v1", []graph.Node{
		graph.Input("x"),
		graph.Compute("y", graph.Needs("x"), one),
		graph.Compute("z", graph.Needs("x"), one),
	})
	b := setup(t, g)
	ctx := context.Background()
	const n = 20
	for range n {
		b.start(t, g, map[string]any{"x": 1})
	}
	claimed, err := b.store.Claim(ctx, "r1", 2*n)
	require.NoError(t, err)
	require.Len(t, claimed, 2*n)
	var ys, zs []Outcome
	for _, c := range claimed {
		o := Outcome{C: c, Result: json.RawMessage(`1`), Used: map[string]int64{"x": 1}}
		if c.Node == "y" {
			ys = append(ys, o)
		} else {
			zs = append(zs, o)
		}
	}
	slices.SortFunc(ys, func(a, b Outcome) int { return strings.Compare(a.C.ExecutionID, b.C.ExecutionID) })
	slices.SortFunc(zs, func(a, b Outcome) int { return strings.Compare(b.C.ExecutionID, a.C.ExecutionID) })
	errs := make(chan error, 2)
	for _, batch := range [][]Outcome{ys, zs} {
		go func() {
			lost, err := b.store.Record(ctx, batch)
			if err == nil {
				err = errors.Join(lost...)
			}
			errs <- err
		}()
	}
	require.NoError(t, <-errs)
	require.NoError(t, <-errs)
}

// Outcomes of sibling nodes in one batch are each recorded once: while the first is advanced, the
// others, fenced but not yet recorded, still count as running, and are not started again.
func TestRecordSiblingsInOneBatchRunOnce(t *testing.T) {
	t.Parallel()
	g := siblings()
	b := setup(t, g)
	ctx := context.Background()
	id := b.start(t, g, map[string]any{"x": 1})
	claimed, err := b.store.Claim(ctx, "r1", 3)
	require.NoError(t, err)
	require.Len(t, claimed, 3)
	var outs []Outcome
	for _, c := range claimed {
		outs = append(outs, Outcome{C: c, Result: json.RawMessage(`1`), Used: map[string]int64{"x": 1}})
	}
	lost, err := b.store.Record(ctx, outs)
	require.NoError(t, err)
	require.Equal(t, []error{nil, nil, nil}, lost)
	comps, err := b.store.Computations(ctx, id)
	require.NoError(t, err)
	require.Len(t, comps, 3, "no node started again")
	for _, c := range comps {
		require.Equal(t, StateSuccess, c.State, "node %s", c.Node)
	}
}

// Two writers of one execution, at once: each batch loads after its lock, so the second sees
// what the first committed. A node that needs both inputs gets exactly one attempt, with both.
func TestConcurrentSetsSeeEachOther(t *testing.T) {
	t.Parallel()
	g := graph.MustNew("both", "v1", []graph.Node{
		graph.Input("a"), graph.Input("b"),
		graph.Compute("sum", graph.Needs("a", "b"), func(ctx context.Context, in graph.Values) (any, error) { return 0, nil }),
	})
	b := setup(t, g)
	ctx := context.Background()
	const n = 30
	ids := make([]string, n)
	for i := range ids {
		ids[i] = b.start(t, g, nil)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 2*n)
	for _, id := range ids {
		for _, node := range []string{"a", "b"} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := b.store.SetValues(ctx, id, map[string]json.RawMessage{node: json.RawMessage(`1`)}, nil, nil)
				errs <- err
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	for _, id := range ids {
		comps, err := b.store.Computations(ctx, id)
		require.NoError(t, err)
		require.Len(t, comps, 1, "execution %s: one attempt of sum", id)
		sig := signatureOf(t, comps[0].ComputedWith)
		require.ElementsMatch(t, []int64{1, 2}, []int64{sig["a"], sig["b"]}, "both inputs, each at its own revision: %s",
			comps[0].ComputedWith)
	}
}

// A completion that leaves AVAILABLE siblings in its execution announces work, though it made
// none: a claim that ran while the completion held the execution's row skipped them, and waits
// for that NOTIFY; without it they waited for the poll.
func TestRecordAnnouncesTheSiblingsItHeldFromTheClaims(t *testing.T) {
	t.Parallel()
	g := siblings()
	b := setup(t, g)
	ctx := context.Background()
	b.start(t, g, map[string]any{"x": 1})
	claimed, err := b.store.Claim(ctx, "r1", 1)
	require.NoError(t, err)
	require.Len(t, claimed, 1)

	conn, err := pgx.Connect(ctx, pgtest.URL(t))
	require.NoError(t, err)
	defer func() { _ = conn.Close(ctx) }()
	_, err = conn.Exec(ctx, "LISTEN "+pgx.Identifier{b.store.channel}.Sanitize())
	require.NoError(t, err)
	lost, err := b.store.Record(ctx, []Outcome{{C: claimed[0], Result: json.RawMessage(`1`), Used: map[string]int64{"x": 1}}})
	require.NoError(t, err)
	require.NoError(t, lost[0])

	var payloads []string
	for !slices.ContainsFunc(payloads, func(p string) bool { return strings.HasPrefix(p, PayloadExecution) }) {
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		note, err := conn.WaitForNotification(wctx)
		cancel()
		require.NoError(t, err, "the change was announced")
		payloads = append(payloads, note.Payload)
	}
	require.Contains(t, payloads, PayloadWork, "the siblings left AVAILABLE are announced with the change")
}

// siblings is a graph of three nodes a, b and c, each of which needs the input x and computes 1.
func siblings() *graph.Graph {
	one := func(ctx context.Context, in graph.Values) (any, error) { return 1, nil }
	return graph.MustNew("siblings", "v1", []graph.Node{
		graph.Input("x"),
		graph.Compute("a", graph.Needs("x"), one),
		graph.Compute("b", graph.Needs("x"), one),
		graph.Compute("c", graph.Needs("x"), one),
	})
}

// The ten siblings of a fan-out, recorded in one batch, are recorded as ten completions one after
// the other would be: each value has a revision of its own, one higher than the one before it in
// the batch, and its entry in the history. The downstream nodes are advanced once all ten are in:
// each gets one attempt, which reads every sibling it depends on at its revision.
func TestRecordAFanOutInOneBatch(t *testing.T) {
	t.Parallel()
	g := fanOut(10)
	b := setup(t, g)
	ctx := context.Background()
	id := b.start(t, g, map[string]any{"x": 1})
	claimed, err := b.store.Claim(ctx, "r1", 20)
	require.NoError(t, err)
	require.Len(t, claimed, 10)
	slices.Reverse(claimed) // the batch's order, not the claim's, decides the revisions
	before, err := b.store.LoadExecution(ctx, id)
	require.NoError(t, err)
	var outs []Outcome
	for i, c := range claimed {
		outs = append(outs, Outcome{C: c, Result: json.RawMessage(strconv.Itoa(i)), Used: map[string]int64{"x": 1}})
	}
	lost, err := b.store.Record(ctx, outs)
	require.NoError(t, err)
	require.Equal(t, make([]error, 10), lost)

	after, err := b.store.LoadExecution(ctx, id)
	require.NoError(t, err)
	require.Equal(t, before.Revision+10, after.Revision, "one revision per completion")
	vals, err := b.store.Values(ctx, id)
	require.NoError(t, err)
	var history []struct {
		Node     string `bun:"node"`
		Revision int64  `bun:"revision"`
	}
	require.NoError(t, b.db.NewRaw(b.store.q(`SELECT node, revision FROM (`+historyQuery+`) h
		WHERE node <> 'x' ORDER BY revision`), LaneOf(id), id).Scan(ctx, &history))
	require.Len(t, history, 10, "each value is in the history")
	for i, c := range claimed {
		rev := before.Revision + int64(i) + 1
		require.Equal(t, rev, vals[c.Node].Revision, "%s is the batch's outcome %d", c.Node, i)
		require.Equal(t, int64(i), vals.Int(c.Node))
		require.Equal(t, c.Node, history[i].Node)
		require.Equal(t, rev, history[i].Revision)
	}

	comps, err := b.store.Computations(ctx, id)
	require.NoError(t, err)
	require.Len(t, comps, 12, "the ten, and one attempt of each node downstream")
	for _, c := range comps {
		switch c.Node {
		case "all":
			want := map[string]int64{}
			for i := range 10 {
				f := "f" + strconv.Itoa(i+1)
				want[f] = vals[f].Revision
			}
			require.Equal(t, StateAvailable, c.State)
			require.Equal(t, want, signatureOf(t, c.ComputedWith))
		case "either":
			require.Equal(t, StateAvailable, c.State)
			require.Equal(t, map[string]int64{"f1": vals["f1"].Revision, "f2": vals["f2"].Revision}, signatureOf(t, c.ComputedWith),
				"it reads both siblings that the batch wrote: it need not run again for the second")
		default:
			require.Equal(t, StateSuccess, c.State, "node %s", c.Node)
		}
	}
}

// A batch that holds the ten siblings of one execution takes as many round trips as one that
// holds one outcome of each of ten executions: the siblings' values are written in one statement.
func TestRecordAFanOutInAsManyRoundTripsAsOneNode(t *testing.T) {
	t.Parallel()
	g := fanOut(10)
	b := setup(t, g)
	ctx := context.Background()
	b.start(t, g, map[string]any{"x": 1})
	siblings, err := b.store.Claim(ctx, "r1", 20)
	require.NoError(t, err)
	require.Len(t, siblings, 10)
	for range 10 {
		b.start(t, g, map[string]any{"x": 1})
	}
	claimed, err := b.store.Claim(ctx, "r1", 100)
	require.NoError(t, err)
	require.Len(t, claimed, 100)
	var firsts []*Computation
	for _, c := range claimed {
		if c.Node == "f1" {
			firsts = append(firsts, c)
		}
	}
	require.Len(t, firsts, 10)

	s, log, _ := b.tracedStore(t)
	record := func(cs []*Computation) int {
		t.Helper()
		log.take()
		var outs []Outcome
		for _, c := range cs {
			outs = append(outs, Outcome{C: c, Result: json.RawMessage(`1`), Used: map[string]int64{"x": 1}})
		}
		lost, err := s.Record(ctx, outs)
		require.NoError(t, err)
		require.Equal(t, make([]error, len(cs)), lost)
		s.NotesSent()
		return log.roundTrips()
	}
	apart := record(firsts)
	together := record(siblings)
	require.Equal(t, apart, together, "round trips of ten siblings, against those of ten executions")
}

// fanOut is a graph whose input x fans out to n compute nodes f1…fn, each of which computes 1;
// all needs every one of them, and either needs f1 or f2.
func fanOut(n int) *graph.Graph {
	one := func(ctx context.Context, in graph.Values) (any, error) { return 1, nil }
	nodes := []graph.Node{graph.Input("x")}
	var fs []string
	for i := range n {
		f := "f" + strconv.Itoa(i+1)
		fs = append(fs, f)
		nodes = append(nodes, graph.Compute(f, graph.Needs("x"), one))
	}
	return graph.MustNew("fanout", "v1", append(nodes,
		graph.Compute("all", graph.Needs(fs...), one),
		graph.Compute("either", graph.Or(graph.Needs("f1"), graph.Needs("f2")), one)))
}

// A sibling whose value clears another node's value ends the batch's run of its execution: the
// siblings after it are recorded as if alone, after the clearing. Here a clears c, which b needs:
// b's result is dropped, as it would be after a's completion alone.
func TestRecordASiblingThatClearsEndsTheRun(t *testing.T) {
	t.Parallel()
	one := func(ctx context.Context, in graph.Values) (any, error) { return 1, nil }
	g := graph.MustNew("clears", "v1", []graph.Node{
		graph.Input("x"),
		graph.Compute("c", graph.And(graph.Needs("x"), graph.Not(graph.Needs("a"))), one),
		graph.Compute("a", graph.Needs("x"), one),
		graph.Compute("b", graph.Needs("c"), one),
	})
	b := setup(t, g)
	ctx := context.Background()
	id := b.start(t, g, map[string]any{"x": 1})
	claimed, err := b.store.Claim(ctx, "r1", 10)
	require.NoError(t, err)
	require.Len(t, claimed, 2)
	i := slices.IndexFunc(claimed, func(c *Computation) bool { return c.Node == "c" })
	lost, err := b.store.Record(ctx, []Outcome{{C: claimed[i], Result: json.RawMessage(`1`), Used: map[string]int64{"x": 1}}})
	require.NoError(t, err)
	require.NoError(t, lost[0])
	a := claimed[1-i]
	claimed, err = b.store.Claim(ctx, "r1", 10)
	require.NoError(t, err)
	require.Len(t, claimed, 1)
	require.Equal(t, "b", claimed[0].Node)

	lost, err = b.store.Record(ctx, []Outcome{
		{C: a, Result: json.RawMessage(`1`), Used: map[string]int64{"x": 1}},
		{C: claimed[0], Result: json.RawMessage(`1`), Used: map[string]int64{"c": 2}},
	})
	require.NoError(t, err)
	require.Equal(t, []error{nil, nil}, lost)
	vals, err := b.store.Values(ctx, id)
	require.NoError(t, err)
	require.True(t, vals.Has("a"))
	require.False(t, vals.Has("c"), "a's value cleared c")
	require.False(t, vals.Has("b"), "b's result came after c was cleared")
	require.Equal(t, StateCanceled, b.latest(t, id, "b").State)
}

// signatureOf reads an attempt's upstream revisions.
func signatureOf(t *testing.T, s string) map[string]int64 {
	t.Helper()
	sig := map[string]int64{}
	require.NoError(t, json.Unmarshal([]byte(s), &sig), s)
	return sig
}
