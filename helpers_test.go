package journey_test

import (
	"context"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/journey-go/journey"
	"github.com/journey-go/journey/graph"
	"github.com/journey-go/journey/internal/pgtest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(pgtest.Runner{M: m})
}

// testLogger writes warnings and errors to stderr when JOURNEY_TEST_LOG is set.
func testLogger() *slog.Logger {
	if os.Getenv("JOURNEY_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// testConfig is a Config with short intervals on a fresh schema.
func testConfig(t testing.TB, graphs ...*graph.Graph) journey.Config {
	t.Helper()
	return journey.Config{
		DatabaseURL:   pgtest.URL(t),
		Schema:        pgtest.Schema(t),
		Graphs:        graphs,
		PollInterval:  100 * time.Millisecond,
		SweepInterval: 50 * time.Millisecond,
		Logger:        testLogger(),
	}
}

// numbered returns the inputs of n executions that set x to 0, 1, …, n-1.
func numbered(n int) []map[string]any {
	inputs := make([]map[string]any, n)
	for i := range inputs {
		inputs[i] = map[string]any{"x": i}
	}
	return inputs
}

// newRuntime starts a runtime and stops it when the test ends.
func newRuntime(t testing.TB, cfg journey.Config) *journey.Runtime {
	t.Helper()
	rt, err := journey.New(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		require.NoError(t, rt.Stop(ctx))
	})
	return rt
}

// testCtx is a context that ends with the test, or after a timeout generous enough for a whole
// test on a busy two-core machine under -race.
func testCtx(t testing.TB) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func onboardingGraph(t testing.TB) *graph.Graph {
	t.Helper()
	return graph.MustNew("onboarding", "v1", []graph.Node{
		graph.Input("name"),
		graph.Input("email"),
		graph.Compute("greeting", graph.Needs("name", "email"),
			func(ctx context.Context, in graph.Values) (any, error) {
				return "Welcome, " + in.String("name") + " at " + in.String("email"), nil
			}),
	})
}

// waitFor polls cond until it holds or the test's patience runs out. It waits on database state
// that no notification announces (such as an unchanged recomputation), never for a fixed time.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	if !pgtest.Poll(20*time.Second, 10*time.Millisecond, cond) {
		t.Fatalf("timed out waiting for %s", what)
	}
}

// countStates counts the attempts of node in each state.
func countStates(t testing.TB, rt *journey.Runtime, id, node string) map[journey.ComputationState]int {
	t.Helper()
	comps, err := rt.Computations(context.Background(), id)
	require.NoError(t, err)
	out := map[journey.ComputationState]int{}
	for _, c := range comps {
		if c.Node == node {
			out[c.State]++
		}
	}
	return out
}

// attempts returns the attempts of node, oldest first.
func attempts(t testing.TB, rt *journey.Runtime, id, node string) []journey.Computation {
	t.Helper()
	comps, err := rt.Computations(context.Background(), id)
	require.NoError(t, err)
	var out []journey.Computation
	for _, c := range comps {
		if c.Node == node {
			out = append(out, c)
		}
	}
	return out
}

// fastBackoff retries at once, so that retry tests don't wait for a sweep.
func fastBackoff(int) time.Duration { return 0 }

// waitIdle waits until no attempt of the execution is pending, available or running.
func waitIdle(t testing.TB, rt *journey.Runtime, id string) {
	t.Helper()
	waitFor(t, "the execution to be idle", func() bool {
		comps, err := rt.Computations(context.Background(), id)
		require.NoError(t, err)
		for _, c := range comps {
			switch c.State {
			case journey.StatePending, journey.StateAvailable, journey.StateRunning:
				return false
			}
		}
		return true
	})
}

// unreleased returns the attempts of cs that were not handed back at a Stop, and checks that
// those that were are in the history as such: CANCELED, with the release's reason, and with the
// claim's time, which keeps their place in a rate window.
func unreleased(t testing.TB, cs []journey.Computation) []journey.Computation {
	t.Helper()
	var out []journey.Computation
	for _, c := range cs {
		if !strings.HasPrefix(c.Error, "released: replica ") {
			out = append(out, c)
			continue
		}
		require.Equal(t, journey.StateCanceled, c.State, "a released claim: %+v", c)
		require.NotNil(t, c.ClaimedAt, "a released claim keeps its time: %+v", c)
	}
	return out
}
