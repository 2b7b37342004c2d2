package journey_test

import (
	"context"
	"io"
	"log/slog"
	"os"
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
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// testConfig is a Config with short intervals on a fresh schema.
func testConfig(t testing.TB, graphs ...*graph.Graph) journey.Config {
	return journey.Config{
		DatabaseURL:   pgtest.URL(t),
		Schema:        pgtest.Schema(t),
		Graphs:        graphs,
		PollInterval:  100 * time.Millisecond,
		SweepInterval: 50 * time.Millisecond,
		Logger:        testLogger(),
	}
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

// testCtx is a context that ends with the test, or after a generous timeout.
func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func onboardingGraph(t testing.TB) *graph.Graph {
	return graph.MustNew("onboarding", "v1", []graph.Node{
		graph.Input("name"),
		graph.Input("email"),
		graph.Compute("greeting", graph.Needs("name", "email"),
			func(ctx context.Context, in graph.Values) (any, error) {
				return "Welcome, " + in.String("name") + " at " + in.String("email"), nil
			}),
	})
}
