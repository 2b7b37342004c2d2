package journey_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/journey-go/journey"
	"github.com/journey-go/journey/graph"
	"github.com/journey-go/journey/internal/clock"
)

func reportGraph() *graph.Graph {
	return graph.MustNew("report", "v1", []graph.Node{
		graph.Input("kind"),
		graph.Compute("made", graph.Needs("kind"), func(ctx context.Context, in graph.Values) (any, error) {
			return "report " + in.String("kind"), nil
		}),
	})
}

// scheduleConfig is a Config on a fresh schema, with one schedule of the report graph, on the
// stub clock.
func scheduleConfig(t *testing.T, stub *clock.Stub, s journey.Schedule) journey.Config {
	t.Helper()
	g := reportGraph()
	cfg := testConfig(t, g)
	cfg.Test.Clock = stub
	s.Graph = g
	cfg.Schedules = []journey.Schedule{s}
	return cfg
}

// scheduledKeys are the keys of the executions of the report graph, in order.
func scheduledKeys(t *testing.T, rt *journey.Runtime) []string {
	t.Helper()
	execs, err := rt.List(testCtx(t), journey.ListQuery{Graph: "report", OrderBy: "id"})
	require.NoError(t, err)
	keys := make([]string, 0, len(execs))
	for _, e := range execs {
		keys = append(keys, e.Key)
	}
	slices.Sort(keys)
	return keys
}

// keysAt are the keys of schedule name's executions for the fire times given.
func keysAt(name string, fires ...time.Time) []string {
	keys := make([]string, len(fires))
	for i, f := range fires {
		keys[i] = "schedule:" + name + ":" + f.UTC().Format(time.RFC3339)
	}
	slices.Sort(keys)
	return keys
}

// Two replicas that list one schedule, and pass at once at each move of the clock (each move is
// told to both from two goroutines), start one execution per fire time between them, with the
// schedule's values.
func TestScheduleFiresOncePerFireTimeAcrossReplicas(t *testing.T) {
	t.Parallel()
	start := time.Date(2025, 5, 1, 0, 30, 0, 0, time.UTC)
	stub := clock.NewStub(start)
	cfg := scheduleConfig(t, stub, journey.Schedule{Name: "hourly", Cron: "0 * * * *", Values: map[string]any{"kind": "sales"},
		CatchUp: journey.CatchUpEach})
	a := newRuntime(t, cfg)
	cfg.ReplicaID = ""
	b := newRuntime(t, cfg)
	require.Empty(t, scheduledKeys(t, a), "a schedule seen for the first time fires nothing of the past")

	var want []time.Time
	for h := 1; h <= 4; h++ {
		now := start.Add(time.Duration(h) * time.Hour)
		var wg sync.WaitGroup
		for range 3 {
			wg.Go(func() { stub.Set(now) })
		}
		wg.Wait()
		want = append(want, now.Truncate(time.Hour))
		require.Equal(t, keysAt("hourly", want...), scheduledKeys(t, b), "after %s", now)
		// Each execution's work is done before the clock moves an hour on: an attempt still
		// running then would be past its deadline, and abandoned.
		execs, err := a.List(testCtx(t), journey.ListQuery{Graph: "report"})
		require.NoError(t, err)
		for _, e := range execs {
			v, err := a.Get(testCtx(t), e.ID, "kind")
			require.NoError(t, err)
			require.Equal(t, "sales", v.String())
			made, err := journey.GetAs[string](testCtx(t), a, e.ID, "made", journey.WaitAny())
			require.NoError(t, err)
			require.Equal(t, "report sales", made)
		}
	}
}

// After a downtime across five fire times, CatchUpNone starts none of them, CatchUpOnce the
// latest, CatchUpEach each; then each fires on time again.
func TestScheduleCatchUpAfterDowntime(t *testing.T) {
	t.Parallel()
	start := time.Date(2025, 5, 1, 0, 30, 0, 0, time.UTC)
	hour := func(h int) time.Time { return start.Truncate(time.Hour).Add(time.Duration(h) * time.Hour) }
	for _, tc := range []struct {
		catchUp journey.CatchUp
		want    []time.Time
	}{
		{journey.CatchUpNone, nil},
		{journey.CatchUpOnce, []time.Time{hour(5)}},
		{journey.CatchUpEach, []time.Time{hour(1), hour(2), hour(3), hour(4), hour(5)}},
	} {
		t.Run(tc.catchUp.String(), func(t *testing.T) {
			t.Parallel()
			stub := clock.NewStub(start)
			cfg := scheduleConfig(t, stub, journey.Schedule{Name: "hourly", Cron: "0 * * * *", CatchUp: tc.catchUp})
			first, err := journey.New(testCtx(t), cfg)
			require.NoError(t, err)
			require.NoError(t, first.Stop(testCtx(t)))

			stub.Set(hour(5).Add(30 * time.Minute)) // the downtime: no runtime hears of it
			rt := newRuntime(t, cfg)
			require.Equal(t, keysAt("hourly", tc.want...), scheduledKeys(t, rt), "New fires what the downtime left")

			stub.Set(hour(6).Add(10 * time.Second))
			require.Equal(t, keysAt("hourly", append(tc.want, hour(6))...), scheduledKeys(t, rt), "on time again")
		})
	}
}

// walk moves the clock from from to to by step, telling the runtimes of each move.
func walk(stub *clock.Stub, from, to time.Time, step time.Duration) {
	for now := from; !now.After(to); now = now.Add(step) {
		stub.Set(now)
	}
}

// In New York the clocks go from 02:00 EST to 03:00 EDT on 9 March 2025, and back from 02:00 EDT
// to 01:00 EST on 2 November 2025. A schedule at 02:30 fires at the jump on the day the hour is
// skipped; one at 01:30 fires once on the day it is repeated, at its first occurrence.
func TestScheduleAcrossDaylightSavingTime(t *testing.T) {
	t.Parallel()
	ny, err := time.LoadLocation("America/New_York")
	require.NoError(t, err)
	for _, tc := range []struct {
		name, cron string
		from, to   time.Time
		want       []time.Time
	}{
		{"spring forward", "30 2 * * *", time.Date(2025, 3, 8, 22, 0, 0, 0, ny), time.Date(2025, 3, 10, 4, 0, 0, 0, ny),
			[]time.Time{time.Date(2025, 3, 9, 7, 0, 0, 0, time.UTC), time.Date(2025, 3, 10, 6, 30, 0, 0, time.UTC)}},
		{"fall back", "30 1 * * *", time.Date(2025, 11, 1, 22, 0, 0, 0, ny), time.Date(2025, 11, 3, 4, 0, 0, 0, ny),
			[]time.Time{time.Date(2025, 11, 2, 5, 30, 0, 0, time.UTC), time.Date(2025, 11, 3, 6, 30, 0, 0, time.UTC)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			stub := clock.NewStub(tc.from)
			rt := newRuntime(t, scheduleConfig(t, stub, journey.Schedule{Name: "nightly", Cron: tc.cron, Location: ny,
				CatchUp: journey.CatchUpNone}))
			// Ten minutes a step, within the minute of grace of CatchUpNone: each fire time is found
			// on time, and the repeated hour is passed through twice.
			walk(stub, tc.from, tc.to, 10*time.Minute)
			require.Equal(t, keysAt("nightly", tc.want...), scheduledKeys(t, rt))
		})
	}
}

func TestScheduleConfigIsValidated(t *testing.T) {
	t.Parallel()
	g := reportGraph()
	other := graph.MustNew("other", "v1", []graph.Node{graph.Input("x")})
	cfg := testConfig(t, g)
	cfg.Schedules = []journey.Schedule{
		{Name: "", Graph: g, Cron: "0 * * * *"},
		{Name: "dup", Graph: g, Cron: "0 * * * *"},
		{Name: "dup", Graph: g, Cron: "0 * * * *"},
		{Name: "no-graph", Cron: "0 * * * *"},
		{Name: "unserved", Graph: other, Cron: "0 * * * *"},
		{Name: "bad-cron", Graph: g, Cron: "0 25 * * *"},
		{Name: "four-fields", Graph: g, Cron: "0 9 * *"},
		{Name: "never", Graph: g, Cron: "0 0 30 2 *"},
		{Name: "zoned", Graph: g, Cron: "CRON_TZ=Europe/Rome 0 9 * * *"},
		{Name: "catch-up", Graph: g, Cron: "0 * * * *", CatchUp: journey.CatchUp(7)},
		{Name: "not-input", Graph: g, Cron: "0 * * * *", Values: map[string]any{"made": "x"}},
		{Name: "unknown-node", Graph: g, Cron: "0 * * * *", Values: map[string]any{"nope": "x"}},
		{Name: "bad-value", Graph: g, Cron: "0 * * * *", Values: map[string]any{"kind": func() {}}},
		{Name: "fine", Graph: g, Cron: "0 9 * * MON", Values: map[string]any{"kind": "weekly"}},
	}
	_, err := journey.New(testCtx(t), cfg)
	require.Error(t, err)
	for _, want := range []string{
		`Schedules[0]: Name is empty`,
		`Schedules[2] ("dup"): Name is used by another schedule`,
		`Schedules[3] ("no-graph"): Graph is nil`,
		`Schedules[4] ("unserved"): Graph "other" version "v1" is not in Config.Graphs`,
		`Schedules[5] ("bad-cron"): Cron: cron "0 25 * * *"`,
		`Schedules[6] ("four-fields"): Cron: cron "0 9 * *"`,
		`Schedules[7] ("never"): Cron "0 0 30 2 *" never fires`,
		`Schedules[8] ("zoned"): Cron: cron "CRON_TZ=Europe/Rome 0 9 * * *" names a time zone: drop the prefix, and set Location instead`,
		`Schedules[9] ("catch-up"): CatchUp is CatchUp(7)`,
		`Schedules[10] ("not-input"): Values: journey: node is not an input`,
		`Schedules[11] ("unknown-node"): Values: journey: unknown node`,
		`Schedules[12] ("bad-value"): Values: journey: invalid value: node "kind"`,
	} {
		require.ErrorContains(t, err, want)
	}
	require.NotContains(t, err.Error(), `Schedules[1]`)
	require.NotContains(t, err.Error(), `"fine"`)
	require.ErrorIs(t, err, journey.ErrInvalidValue)
}
