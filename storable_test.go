package journey_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/journey-go/journey"
	"github.com/journey-go/journey/graph"
)

// quickCtx bounds a wait for an outcome well below the 30 seconds for which a computation retries
// a write that fails: an outcome that is retried until then, rather than recorded, fails the test.
func quickCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// An error whose text PostgreSQL cannot hold (a NUL, invalid UTF-8) or that is very long is
// stored as readable text, cut short, at once; its siblings are not held up.
func TestErrorTextsAreMadeStorable(t *testing.T) {
	t.Parallel()
	fail := func(msg string) graph.ComputeFunc {
		return func(ctx context.Context, in graph.Values) (any, error) { return nil, graph.Permanent(errors.New(msg)) }
	}
	g := graph.MustNew("texts", "v1", []graph.Node{
		graph.Input("x"),
		graph.Compute("nul", graph.Needs("x"), fail("bad\x00byte and \xff too"), graph.MaxAttempts(1)),
		graph.Compute("long", graph.Needs("x"), fail(strings.Repeat("é", 10_000)), graph.MaxAttempts(1)),
		graph.Compute("sibling", graph.Needs("x"), func(ctx context.Context, in graph.Values) (any, error) {
			return "fine", nil
		}),
	})
	rt := newRuntime(t, testConfig(t, g))
	ctx := quickCtx(t)
	ex, err := rt.Start(ctx, g, journey.WithValues(map[string]any{"x": 1}))
	require.NoError(t, err)

	v, err := rt.Get(ctx, ex.ID, "sibling", journey.WaitAny())
	require.NoError(t, err)
	require.Equal(t, "fine", v.String())

	_, err = rt.Get(ctx, ex.ID, "nul", journey.WaitAny())
	require.ErrorIs(t, err, journey.ErrComputationFailed)
	require.ErrorContains(t, err, "bad\uFFFDbyte and \uFFFD too")
	got := attempts(t, rt, ex.ID, "nul")
	require.Len(t, got, 1)
	require.Equal(t, journey.StateFailed, got[0].State)
	require.Equal(t, "bad\uFFFDbyte and \uFFFD too", got[0].Error)

	_, err = rt.Get(ctx, ex.ID, "long", journey.WaitAny())
	require.ErrorIs(t, err, journey.ErrComputationFailed)
	got = attempts(t, rt, ex.ID, "long")
	require.Len(t, got, 1)
	require.LessOrEqual(t, len(got[0].Error), 4<<10, "the text is cut to 4 KiB")
	require.True(t, strings.HasPrefix(got[0].Error, "éé"), got[0].Error[:20])
	require.True(t, strings.HasSuffix(got[0].Error, "bytes cut)"), "the text says it was cut: %s", got[0].Error[len(got[0].Error)-40:])
}

// A send error that PostgreSQL cannot hold is stored as readable text: the delivery's attempt is
// recorded, not lost.
func TestSendErrorsAreMadeStorable(t *testing.T) {
	t.Parallel()
	g := failingGraph()
	cfg := testConfig(t, g)
	cfg.OnExecutionFailed = func(ctx context.Context, e journey.ExecutionEvent) error {
		return errors.New("receiver\x00down \xfe")
	}
	rt := newRuntime(t, cfg)
	ctx := testCtx(t)
	ex, err := rt.Start(ctx, g, journey.WithValues(map[string]any{"x": 1}))
	require.NoError(t, err)

	var last string
	waitFor(t, "the first attempt of the delivery", func() bool {
		ns, err := rt.Notifications(ctx, ex.ID)
		require.NoError(t, err)
		if len(ns) != 1 || len(ns[0].Deliveries) != 1 || ns[0].Deliveries[0].Attempts == 0 {
			return false
		}
		last = ns[0].Deliveries[0].LastError
		return true
	})
	require.Equal(t, "receiver\uFFFDdown \uFFFD", last)
}

// Texts that the runtime stores as they are, and that a write of every replica carries (its id,
// its webhooks), must be storable: New refuses them.
func TestConfigTextsMustBeStorable(t *testing.T) {
	t.Parallel()
	g := onboardingGraph(t)
	for _, tc := range []struct {
		name string
		edit func(cfg *journey.Config)
		want string
	}{
		{"replica id with a NUL", func(cfg *journey.Config) { cfg.ReplicaID = "r\x001" },
			`config: ReplicaID "r\x001" must be valid UTF-8 with no control characters`},
		{"replica id not UTF-8", func(cfg *journey.Config) { cfg.ReplicaID = "r\xff" },
			`config: ReplicaID "r\xff" must be valid UTF-8`},
		{"webhook URL not UTF-8", func(cfg *journey.Config) {
			cfg.Webhooks = []journey.Webhook{{URL: "https://example.com/h\xffok", Secret: "x"}}
		}, `config: Webhooks[0].URL "https://example.com/h\xffok" is not valid UTF-8 with no control characters: percent-encode it`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := testConfig(t, g)
			tc.edit(&cfg)
			rt, err := journey.New(context.Background(), cfg)
			if rt != nil {
				require.NoError(t, rt.Stop(context.Background()))
			}
			require.ErrorContains(t, err, tc.want)
		})
	}
}
