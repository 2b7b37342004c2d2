package journey_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/journey-go/journey"
	"github.com/journey-go/journey/graph"
	"github.com/journey-go/journey/persistence"
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
		{"replica id over-long", func(cfg *journey.Config) { cfg.ReplicaID = strings.Repeat("r", 1025) },
			`with no control characters, at most 1024 bytes`},
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

// badKeys is a graph whose nodes direct and down have a ConcurrencyKey that PostgreSQL cannot
// store: direct's is computed when x is set, and down's when up completes, after y is set.
func badKeys() *graph.Graph {
	badKey := func(node string) graph.NodeOption {
		return graph.ConcurrencyKey(func(v graph.Values) string { return "k\x00" + v.String(node) })
	}
	value := func(v string) graph.ComputeFunc {
		return func(ctx context.Context, in graph.Values) (any, error) { return v, nil }
	}
	return graph.MustNew("badkeys", "v1", []graph.Node{
		graph.Input("x"),
		graph.Input("y"),
		graph.Compute("direct", graph.Needs("x"), value("direct"), badKey("x")),
		graph.Compute("up", graph.Needs("y"), value("up")),
		graph.Compute("down", graph.Needs("up"), value("down"), badKey("up")),
	})
}

// A ConcurrencyKey that returns a key PostgreSQL cannot store is a failing key function: a Set
// that would create the node's attempt fails, saying why, and changes nothing.
func TestConcurrencyKeyThatCannotBeStoredFailsTheSet(t *testing.T) {
	t.Parallel()
	g := badKeys()
	rt := newRuntime(t, testConfig(t, g))
	ctx := quickCtx(t)
	ex, err := rt.Start(ctx, g)
	require.NoError(t, err)

	_, err = rt.Set(ctx, ex.ID, "x", "a")
	require.ErrorIs(t, err, journey.ErrInvalidValue)
	require.ErrorContains(t, err, `the ConcurrencyKey of node "direct" returned a key that cannot be stored: `+
		`it holds a NUL character (byte 1); a key is valid UTF-8 with no NUL character, at most 1024 bytes`)
	after, err := rt.Load(ctx, ex.ID)
	require.NoError(t, err)
	require.Equal(t, ex.Revision, after.Revision, "the Set changed nothing")
	_, err = rt.Get(ctx, ex.ID, "x")
	require.ErrorIs(t, err, journey.ErrNotSet)
	require.Empty(t, attempts(t, rt, ex.ID, "direct"))

	_, err = rt.Start(ctx, g, journey.WithValues(map[string]any{"x": "a"}))
	require.ErrorIs(t, err, journey.ErrInvalidValue, "a Start with the same values fails the same way")
}

// Computed while a completion advances the execution, a ConcurrencyKey that PostgreSQL cannot
// store fails its own node, with the reason, and the completion is recorded.
func TestConcurrencyKeyThatCannotBeStoredFailsItsNode(t *testing.T) {
	t.Parallel()
	g := badKeys()
	rt := newRuntime(t, testConfig(t, g))
	ctx := quickCtx(t)
	ex, err := rt.Start(ctx, g, journey.WithValues(map[string]any{"y": "b"}))
	require.NoError(t, err)

	v, err := rt.Get(ctx, ex.ID, "up", journey.WaitAny())
	require.NoError(t, err, "the completion of up is recorded")
	require.Equal(t, "up", v.String())
	_, err = rt.Get(ctx, ex.ID, "down", journey.WaitAny())
	require.ErrorIs(t, err, journey.ErrComputationFailed)
	require.ErrorContains(t, err, `the ConcurrencyKey of node "down" returned a key that cannot be stored: it holds a NUL character (byte 1)`)
	require.Len(t, attempts(t, rt, ex.ID, "down"), 1, "down failed once, for good")
}

// A result that passes every check but that PostgreSQL still refuses (a number beyond jsonb's
// range) fails its own attempt at once, with the reason; its sibling is not held up.
func TestOutcomeTheDatabaseRefusesFailsItsAttempt(t *testing.T) {
	t.Parallel()
	g := graph.MustNew("refused", "v1", []graph.Node{
		graph.Input("x"),
		graph.Compute("huge", graph.Needs("x"), func(ctx context.Context, in graph.Values) (any, error) {
			return json.Number("1e1000000"), nil
		}),
		graph.Compute("sibling", graph.Needs("x"), func(ctx context.Context, in graph.Values) (any, error) {
			return "fine", nil
		}),
	})
	cfg := testConfig(t, g)
	reported := make(chan string, 1)
	cfg.Test.Hooks.ComputationFinished = func(c *persistence.Computation, outcome string) {
		if c.Node == "huge" {
			reported <- outcome
		}
	}
	rt := newRuntime(t, cfg)
	ctx := quickCtx(t)
	ex, err := rt.Start(ctx, g, journey.WithValues(map[string]any{"x": 1}))
	require.NoError(t, err)

	v, err := rt.Get(ctx, ex.ID, "sibling", journey.WaitAny())
	require.NoError(t, err)
	require.Equal(t, "fine", v.String())
	require.Equal(t, "failed: the outcome could not be stored: PostgreSQL refused it: value overflows numeric format (SQLSTATE 22003)",
		<-reported, "the attempt's log and metrics say it failed")
	_, err = rt.Get(ctx, ex.ID, "huge", journey.WaitAny())
	require.ErrorIs(t, err, journey.ErrComputationFailed)
	require.ErrorContains(t, err, "the outcome could not be stored: PostgreSQL refused it: value overflows numeric format (SQLSTATE 22003)")
	require.Len(t, attempts(t, rt, ex.ID, "huge"), 1, "the refusal is for good")
}

// Every string a caller can give the runtime that reaches SQL (execution ids, node names, the
// fields of a ListQuery, filter values) is checked first: a NUL character, invalid UTF-8 or an
// over-long string is refused with ErrInvalidText (a *TextError naming the field), or, for a
// filter's value, ErrInvalidValue; never with PostgreSQL's error, and nothing is written.
func TestTextsAreCheckedBeforeSQL(t *testing.T) {
	t.Parallel()
	g := onboardingGraph(t)
	rt := newRuntime(t, testConfig(t, g))
	ctx := testCtx(t)
	ex, err := rt.Start(ctx, g, journey.WithValues(map[string]any{"name": "Mario"}))
	require.NoError(t, err)
	before, err := rt.Load(ctx, ex.ID)
	require.NoError(t, err)

	list := func(q journey.ListQuery) error { _, err := rt.List(ctx, q); return err }
	for _, bad := range []struct{ name, s, rule string }{
		{"NUL", "a\x00b", "it holds a NUL character (byte 1)"},
		{"invalid UTF-8", "a\xffb", "it is not valid UTF-8 (byte 1 is 0xff)"},
		{"over-long", strings.Repeat("n", 1025), "it is 1025 bytes long, over the limit of 1024"},
	} {
		entries := map[string]struct {
			field string
			call  func() error
		}{
			"Set id":        {"execution id", func() error { _, err := rt.Set(ctx, bad.s, "email", "e"); return err }},
			"Set node":      {"node", func() error { _, err := rt.Set(ctx, ex.ID, bad.s, "e"); return err }},
			"SetMany node":  {"node", func() error { _, err := rt.SetMany(ctx, ex.ID, map[string]any{"email": "e", bad.s: 1}); return err }},
			"Unset node":    {"node", func() error { _, err := rt.Unset(ctx, ex.ID, bad.s); return err }},
			"Get id":        {"execution id", func() error { _, err := rt.Get(ctx, bad.s, "name"); return err }},
			"Get node":      {"node", func() error { _, err := rt.Get(ctx, ex.ID, bad.s); return err }},
			"Load":          {"execution id", func() error { _, err := rt.Load(ctx, bad.s); return err }},
			"Values":        {"execution id", func() error { _, err := rt.Values(ctx, bad.s); return err }},
			"Computations":  {"execution id", func() error { _, err := rt.Computations(ctx, bad.s); return err }},
			"History":       {"execution id", func() error { _, err := rt.History(ctx, bad.s); return err }},
			"Notifications": {"execution id", func() error { _, err := rt.Notifications(ctx, bad.s); return err }},
			"Summarize":     {"execution id", func() error { _, err := rt.Summarize(ctx, bad.s); return err }},
			"Archive":       {"execution id", func() error { return rt.Archive(ctx, bad.s) }},
			"Unarchive":     {"execution id", func() error { return rt.Unarchive(ctx, bad.s) }},
			"Retry id":      {"execution id", func() error { return rt.Retry(ctx, bad.s, "greeting") }},
			"Retry node":    {"node", func() error { return rt.Retry(ctx, ex.ID, bad.s) }},
			"List graph":    {"ListQuery.Graph", func() error { return list(journey.ListQuery{Graph: bad.s}) }},
			"List version":  {"ListQuery.Version", func() error { return list(journey.ListQuery{Version: bad.s}) }},
			"List order":    {"ListQuery.OrderBy", func() error { return list(journey.ListQuery{OrderBy: bad.s}) }},
			"List filter":   {"the node of a filter", func() error { return list(journey.ListQuery{Filters: []journey.Filter{journey.Eq(bad.s, 1)}}) }},
			"Count filter": {"the node of a filter", func() error {
				_, err := rt.Count(ctx, journey.ListQuery{Filters: []journey.Filter{journey.IsSet(bad.s)}})
				return err
			}},
		}
		for entry, e := range entries {
			err := e.call()
			var te *journey.TextError
			require.ErrorIs(t, err, journey.ErrInvalidText, "%s, %s", bad.name, entry)
			require.ErrorAs(t, err, &te)
			require.Equal(t, e.field, te.Field, "%s, %s", bad.name, entry)
			require.Equal(t, bad.rule, te.Rule, "%s, %s", bad.name, entry)
			require.NotContains(t, err.Error(), "SQLSTATE")
		}
	}
	// A filter's value is JSON, where a NUL is refused as in any value.
	err = list(journey.ListQuery{Filters: []journey.Filter{journey.Eq("name", "a\x00b")}})
	require.ErrorIs(t, err, journey.ErrInvalidValue)
	require.ErrorContains(t, err, `the value of the filter on node "name": it holds a NUL character`)
	err = list(journey.ListQuery{Filters: []journey.Filter{journey.In("name", "ok", "a\x00b")}})
	require.ErrorIs(t, err, journey.ErrInvalidValue)

	after, err := rt.Load(ctx, ex.ID)
	require.NoError(t, err)
	require.Equal(t, before.Revision, after.Revision, "nothing was written")
	n, err := rt.Count(ctx, journey.ListQuery{IncludeArchived: true})
	require.NoError(t, err)
	require.Equal(t, int64(1), n)
}
