package journey

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/journey-go/journey/graph"
	"github.com/journey-go/journey/internal/pgtest"
	"github.com/journey-go/journey/persistence"
)

// testRuntime returns a runtime serving g, stopped when the test ends.
func testRuntime(t *testing.T, g *graph.Graph) *Runtime {
	t.Helper()
	return startRuntime(t, Config{DatabaseURL: pgtest.URL(t), Schema: pgtest.Schema(t), Graphs: []*graph.Graph{g}})
}

// startRuntime starts a runtime with cfg, logging nowhere unless cfg says, stopped when the test
// ends.
func startRuntime(t *testing.T, cfg Config) *Runtime {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	rt, err := New(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		require.NoError(t, rt.Stop(ctx))
	})
	return rt
}

// blocked returns a group that writes with write, whose first write waits for unblock; sizes
// returns the size of each write.
func blocked[In, Out any](write func(ctx context.Context, ins []In) ([]Out, error)) (grp *group[In, Out],
	unblock chan struct{}, sizes func() []int) {
	var mu sync.Mutex
	var written []int
	unblock = make(chan struct{})
	grp = &group[In, Out]{max: groupMax, write: func(ctx context.Context, ins []In) ([]Out, error) {
		mu.Lock()
		written = append(written, len(ins))
		first := len(written) == 1
		mu.Unlock()
		if first {
			<-unblock
		}
		return write(ctx, ins)
	}}
	return grp, unblock, func() []int {
		mu.Lock()
		defer mu.Unlock()
		return append([]int(nil), written...)
	}
}

// groupedStarts returns a runtime, and a group of Starts of g on it whose first write waits for
// unblock; it records the size of each write.
func groupedStarts(t *testing.T, g *graph.Graph) (rt *Runtime, grp *group[map[string]json.RawMessage, *persistence.Execution],
	unblock chan struct{}, sizes func() []int) {
	t.Helper()
	rt = testRuntime(t, g)
	grp, unblock, sizes = blocked(func(ctx context.Context, items []map[string]json.RawMessage) ([]*persistence.Execution, error) {
		return rt.store.CreateExecutions(ctx, g, items, nil, nil, nil)
	})
	return rt, grp, unblock, sizes
}

// queued waits until n calls are queued behind the write under way.
func queued[In, Out any](t *testing.T, grp *group[In, Out], n int) {
	t.Helper()
	require.Eventually(t, func() bool {
		grp.mu.Lock()
		defer grp.mu.Unlock()
		return len(grp.queue) == n
	}, 20*time.Second, time.Millisecond, "%d calls queued", n)
}

// Starts that queue behind a write go in one transaction together; one that PostgreSQL refuses
// gets its own error and starts nothing, and the others start.
func TestGroupedStartsAnswerEachCaller(t *testing.T) {
	t.Parallel()
	g := graph.MustNew("grouped", "v1", []graph.Node{graph.Input("x")})
	rt, grp, unblock, sizes := groupedStarts(t, g)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	type answer struct {
		e   *persistence.Execution
		err error
	}
	const callers = 10
	const bad = 4 // a number beyond numeric's range: PostgreSQL refuses it
	answers := make([]answer, callers+1)
	var wg sync.WaitGroup
	call := func(i int, x string) {
		defer wg.Done()
		e, err := grp.do(ctx, map[string]json.RawMessage{"x": json.RawMessage(x)})
		answers[i] = answer{e, err}
	}
	wg.Add(1)
	go call(callers, "0") // the leader, whose write waits
	queued(t, grp, 0)
	require.Eventually(t, func() bool { return len(sizes()) == 1 }, 20*time.Second, time.Millisecond)
	for i := range callers {
		wg.Add(1)
		x := "1"
		if i == bad {
			x = "1e1000000"
		}
		go call(i, x)
	}
	queued(t, grp, callers)
	close(unblock)
	wg.Wait()

	require.Equal(t, append([]int{1, callers}, make1s(callers)...), sizes(),
		"the leader alone, then the ten together, and after that failed, each alone")
	ids := map[string]bool{}
	for i, a := range answers {
		if i == bad {
			require.Error(t, a.err)
			require.True(t, persistence.Refused(a.err), "%v", a.err)
			continue
		}
		require.NoError(t, a.err, "caller %d", i)
		ids[a.e.ID] = true
	}
	require.Len(t, ids, callers, "every other caller started an execution of its own")
	counts, err := rt.store.StateCounts(ctx)
	require.NoError(t, err)
	require.Empty(t, counts, "the graph has no computations")
	var n int
	require.NoError(t, rt.store.DB().NewRaw("SELECT count(*) FROM "+pgx.Identifier{rt.cfg.Schema}.Sanitize()+".executions").Scan(ctx, &n))
	require.Equal(t, callers, n, "the refused Start started nothing")
}

func make1s(n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = 1
	}
	return s
}

// A caller whose context ends while it is queued is withdrawn: its Start writes nothing.
func TestGroupedStartWithdrawn(t *testing.T) {
	t.Parallel()
	g := graph.MustNew("withdrawn", "v1", []graph.Node{graph.Input("x")})
	_, grp, unblock, sizes := groupedStarts(t, g)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	led := make(chan error, 1)
	go func() {
		_, err := grp.do(ctx, nil)
		led <- err
	}()
	require.Eventually(t, func() bool { return len(sizes()) == 1 }, 20*time.Second, time.Millisecond)
	qctx, qcancel := context.WithCancel(ctx)
	gave := make(chan error, 1)
	go func() {
		_, err := grp.do(qctx, nil)
		gave <- err
	}()
	queued(t, grp, 1)
	qcancel()
	require.ErrorIs(t, <-gave, context.Canceled)
	queued(t, grp, 0)
	close(unblock)
	require.NoError(t, <-led)
	require.Equal(t, []int{1}, sizes(), "nothing was left to write")
}

// Gets' looks that queue behind a look go in one statement, and each gets its own node's state.
// Read together, a look of an execution that does not exist gets its own ErrNotFound, and the
// others their states.
func TestGroupedLooksAnswerEachCaller(t *testing.T) {
	t.Parallel()
	g := graph.MustNew("looks", "v1", []graph.Node{graph.Input("x")})
	rt := testRuntime(t, g)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const n = 5
	inputs := make([]map[string]any, n)
	for i := range inputs {
		inputs[i] = map[string]any{"x": i}
	}
	execs, err := rt.StartMany(ctx, g, inputs)
	require.NoError(t, err)
	refs := make([]persistence.NodeRef, n)
	for i, e := range execs {
		refs[i] = persistence.NodeRef{ID: e.ID, Node: "x"}
	}
	check := func(i int, ns persistence.NodeState) {
		t.Helper()
		require.EqualValues(t, i, ns.Value.Int(), "execution %d", i)
		require.Equal(t, execs[i].Revision, ns.Revision, "execution %d", i)
	}

	grp, unblock, sizes := blocked(rt.lookAll)
	states := make([]persistence.NodeState, n)
	errs := make([]error, n+1)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // the leader, whose look waits
		defer wg.Done()
		_, errs[n] = grp.do(ctx, refs[0])
	}()
	require.Eventually(t, func() bool { return len(sizes()) == 1 }, 20*time.Second, time.Millisecond)
	for i, ref := range refs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			states[i], errs[i] = grp.do(ctx, ref)
		}()
	}
	queued(t, grp, n)
	close(unblock)
	wg.Wait()
	require.Equal(t, []int{1, n}, sizes(), "the leader alone, then the others together")
	for i := range n {
		require.NoError(t, errs[i])
		check(i, states[i])
	}
	require.NoError(t, errs[n])

	mixed := append([]persistence.NodeRef{{ID: "missing", Node: "x"}}, refs...)
	got, gotErrs, err := rt.store.NodeStates(ctx, mixed)
	require.NoError(t, err)
	require.ErrorIs(t, gotErrs[0], ErrNotFound)
	for i := range n {
		require.NoError(t, gotErrs[i+1])
		check(i, got[i+1])
	}
}

// Sets, and idle Starts, that queue behind a write go in one transaction; a bad Set (here, of a
// node that is not an input) gets its own error and writes nothing, while the others succeed; two
// Sets of one execution each get a revision of their own.
func TestGroupedSetsAnswerEachCaller(t *testing.T) {
	pgtest.SkipOnCitus(t, "the writes of a group commit lane by lane, each in a transaction of its own")
	t.Parallel()
	g := graph.MustNew("sets", "v1", []graph.Node{
		graph.Input("x"),
		graph.Compute("y", graph.Needs("x"), func(ctx context.Context, in graph.Values) (any, error) { return 1, nil }),
	})
	rt := testRuntime(t, g)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	execs, err := rt.StartMany(ctx, g, make([]map[string]any, 6))
	require.NoError(t, err)
	set := func(id, node, value string) write {
		return write{set: persistence.Setting{ID: id, Set: map[string]json.RawMessage{node: json.RawMessage(value)}}}
	}
	started := func(a answer) {
		t.Helper()
		require.NoError(t, a.err)
		e, err := rt.Load(ctx, a.exec.ID)
		require.NoError(t, err)
		require.Equal(t, g.Name(), e.Graph)
	}

	for _, c := range []struct {
		name   string
		writes []write // queued behind a Set of execs[0]
		sizes  []int
		check  func(answers []answer)
	}{{
		name:   "one bad",
		writes: []write{set(execs[1].ID, "x", `1`), set(execs[2].ID, "y", `1`), {start: g}, set(execs[3].ID, "x", `3`)},
		sizes:  []int{1, 4, 1, 1, 1, 1},
		check: func(answers []answer) {
			require.ErrorIs(t, answers[1].err, ErrNotInput)
			for _, i := range []int{0, 3} {
				require.NoError(t, answers[i].err)
				require.Equal(t, int64(1), answers[i].rev)
			}
			started(answers[2])
			v, err := rt.Values(ctx, execs[2].ID)
			require.NoError(t, err)
			require.Empty(t, v, "the bad Set wrote nothing")
			x, err := rt.Get(ctx, execs[3].ID, "x")
			require.NoError(t, err)
			require.EqualValues(t, 3, x.Int())
		},
	}, {
		name:   "all good",
		writes: []write{set(execs[1].ID, "x", `11`), {start: g}, set(execs[3].ID, "x", `13`), {start: g}},
		sizes:  []int{1, 4},
		check: func(answers []answer) {
			for i, id := range []string{execs[1].ID, execs[3].ID} {
				require.NoError(t, answers[2*i].err)
				x, err := rt.Get(ctx, id, "x")
				require.NoError(t, err)
				require.EqualValues(t, 11+2*i, x.Int())
				require.Equal(t, answers[2*i].rev, x.Revision)
			}
			started(answers[1])
			started(answers[3])
			require.NotEqual(t, answers[1].exec.ID, answers[3].exec.ID)
			// now() is the transaction's start: the Starts went in the Sets' transaction.
			x, err := rt.Get(ctx, execs[1].ID, "x")
			require.NoError(t, err)
			require.True(t, x.SetAt.Equal(answers[1].exec.CreatedAt), "set at %v, started at %v", x.SetAt, answers[1].exec.CreatedAt)
		},
	}, {
		name:   "one execution twice",
		writes: []write{set(execs[4].ID, "x", `1`), set(execs[4].ID, "x", `2`), set(execs[5].ID, "x", `5`)},
		sizes:  []int{1, 3, 1, 1, 1},
		check: func(answers []answer) {
			for _, a := range answers {
				require.NoError(t, a.err)
			}
			require.NotEqual(t, answers[0].rev, answers[1].rev, "each Set of execs[4] has its own revision")
		},
	}} {
		grp, unblock, sizes := blocked(rt.writeAll)
		var led error
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, led = grp.do(ctx, set(execs[0].ID, "x", `0`))
		}()
		require.Eventually(t, func() bool { return len(sizes()) == 1 }, 20*time.Second, time.Millisecond, c.name)
		answers := make([]answer, len(c.writes))
		for i, w := range c.writes {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var got written
				got, answers[i].err = grp.do(ctx, w)
				answers[i].exec, answers[i].rev = got.exec, got.rev
			}()
		}
		queued(t, grp, len(c.writes))
		close(unblock)
		wg.Wait()
		require.NoError(t, led, c.name)
		require.Equal(t, c.sizes, sizes(), c.name)
		c.check(answers)
	}
}

// answer is what a grouped write answered one caller.
type answer struct {
	exec *persistence.Execution
	rev  int64
	err  error
}

// A caller alone never lingers, however often it writes; once a write had company, the next
// lingers until max calls wait. The linger is an hour: a call that lingered for it would outlast
// the test.
func TestGroupLingersOnlyWhenBusy(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	grp, unblock, sizes := blocked(func(_ context.Context, ins []int) ([]int, error) { return ins, nil })
	grp.max, grp.linger = 2, time.Hour
	close(unblock)
	for i := range 3 {
		got, err := grp.do(ctx, i)
		require.NoError(t, err)
		require.Equal(t, i, got)
	}
	require.Equal(t, []int{1, 1, 1}, sizes(), "alone, each call went at once")

	// A write with calls queued behind it: the group is busy. Those are max, and go at once.
	grp, unblock, sizes = blocked(func(_ context.Context, ins []int) ([]int, error) { return ins, nil })
	grp.max, grp.linger = 2, time.Hour
	var wg sync.WaitGroup
	do := func(i int) {
		defer wg.Done()
		got, err := grp.do(ctx, i)
		assert.NoError(t, err)
		assert.Equal(t, i, got)
	}
	wg.Add(3)
	go do(0)
	require.Eventually(t, func() bool { return len(sizes()) == 1 }, 20*time.Second, time.Millisecond)
	go do(1)
	go do(2)
	queued(t, grp, 2)
	close(unblock)
	wg.Wait()
	require.Equal(t, []int{1, 2}, sizes())

	wg.Add(1)
	go do(3) // it leads, and lingers
	queued(t, grp, 1)
	require.Equal(t, []int{1, 2}, sizes(), "the call lingers")
	wg.Add(1)
	go do(4) // the second: max calls wait
	wg.Wait()
	require.Equal(t, []int{1, 2, 2}, sizes(), "the lingering call and the one that came, together")
}

// Starts grouped into a write whose COMMIT got no answer, though the server committed it, are
// made again each alone with the ids chosen before the first try: each caller gets the execution
// that the first try made for it, never a second one, and a keyed one is not Existing. The
// executions are as the first try left them: not advanced again, their values not set again.
func TestGroupedStartsWhoseCommitGotNoAnswer(t *testing.T) {
	pgtest.SkipOnCitus(t, "Starts are grouped by lane, and the callers' Starts take several lanes")
	t.Parallel()
	for _, withValues := range []bool{false, true} {
		t.Run(map[bool]string{false: "idle", true: "with values"}[withValues], func(t *testing.T) {
			t.Parallel()
			g := graph.MustNew("no-answer", "v1", []graph.Node{graph.Input("x")})
			var commits atomic.Int64
			release := make(chan struct{})
			rt := startRuntime(t, Config{DatabaseURL: pgtest.URL(t), Schema: pgtest.Schema(t), Graphs: []*graph.Graph{g},
				Test: TestConfig{StoreHooks: persistence.Hooks{Committed: func([]string) error {
					switch commits.Add(1) {
					case 1: // the leader's: the others queue behind it
						<-release
					case 2: // theirs, together
						return errNoAnswer
					}
					return nil
				}}}})
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			start := func(i int) (*Execution, error) {
				opts := []StartOption{}
				if withValues {
					opts = append(opts, WithValues(map[string]any{"x": i}))
				}
				if i%2 == 1 {
					opts = append(opts, WithKey(fmt.Sprintf("key-%d", i)))
				}
				return rt.Start(ctx, g, opts...)
			}
			leader := make(chan error, 1)
			go func() {
				_, err := start(0)
				leader <- err
			}()
			require.Eventually(t, func() bool { return commits.Load() == 1 }, 20*time.Second, time.Millisecond)
			const callers = 4
			type answer struct {
				e   *Execution
				err error
			}
			answers := make([]answer, callers)
			var wg sync.WaitGroup
			for i := range callers {
				wg.Go(func() {
					e, err := start(i + 1)
					answers[i] = answer{e, err}
				})
			}
			if withValues {
				queued(t, rt.startsOf(g, ""), callers) // one group, on one PostgreSQL
			} else {
				queued(t, rt.writes[0], callers)
			}
			close(release)
			wg.Wait()
			require.NoError(t, <-leader)

			ids := map[string]bool{}
			for i, a := range answers {
				require.NoError(t, a.err, "caller %d", i)
				require.False(t, a.e.Existing, "caller %d made its execution", i)
				ids[a.e.ID] = true
				e, err := rt.Load(ctx, a.e.ID)
				require.NoError(t, err)
				require.Equal(t, a.e.Revision, e.Revision, "caller %d: written once", i)
				if withValues {
					require.EqualValues(t, 1, e.Revision)
				}
				if key := fmt.Sprintf("key-%d", i+1); i%2 == 0 {
					found, err := rt.FindByKey(ctx, g.Name(), key)
					require.NoError(t, err)
					require.Equal(t, a.e.ID, found.ID)
				}
			}
			require.Len(t, ids, callers, "an execution each")
			var n int
			require.NoError(t, rt.store.DB().NewRaw("SELECT count(*) FROM "+pgx.Identifier{rt.cfg.Schema}.Sanitize()+".executions").Scan(ctx, &n))
			require.Equal(t, callers+1, n, "the leader's and one per caller, never a second")
		})
	}
}

var errNoAnswer = errors.New("injected: the connection broke as the COMMIT was sent")

// A Start alone whose COMMIT got no answer, though the server committed it, is made again once,
// with its id: the caller gets the execution it made, and no second one.
func TestStartAloneWhoseCommitGotNoAnswer(t *testing.T) {
	t.Parallel()
	g := graph.MustNew("no-answer-alone", "v1", []graph.Node{graph.Input("x")})
	var commits atomic.Int64
	rt := startRuntime(t, Config{DatabaseURL: pgtest.URL(t), Schema: pgtest.Schema(t), Graphs: []*graph.Graph{g},
		Test: TestConfig{StoreHooks: persistence.Hooks{Committed: func([]string) error {
			if commits.Add(1) == 1 {
				return errNoAnswer
			}
			return nil
		}}}})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	e, err := rt.Start(ctx, g, WithKey("alone"))
	require.NoError(t, err)
	require.False(t, e.Existing)
	require.EqualValues(t, 2, commits.Load(), "made again once")
	var n int
	require.NoError(t, rt.store.DB().NewRaw("SELECT count(*) FROM "+pgx.Identifier{rt.cfg.Schema}.Sanitize()+".executions").Scan(ctx, &n))
	require.Equal(t, 1, n)
}
