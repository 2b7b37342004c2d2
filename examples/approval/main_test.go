package main

import (
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/journey-go/journey"
	"github.com/journey-go/journey/examples/internal/exampletest"
	"github.com/journey-go/journey/journeytest"
)

// TestMain stops the throwaway PostgreSQL that the tests start when TEST_DATABASE_URL is unset.
func TestMain(m *testing.M) { journeytest.Main(m) }

// The program as it runs, on the wall clock with seconds for days: ada's claim is approved at
// once and gets no reminder; bob's is reminded after the sleep, then rejected at the deadline.
func TestApproval(t *testing.T) {
	t.Parallel()
	require.Equal(t, []string{
		"ada claims 42.00 for a train ticket",
		"  to the manager: please approve ada's 42.00 for a train ticket within 4s",
		"  the manager approves",
		"  to ada: your 42.00 for a train ticket is approved",
		"bob claims 980.00 for a conference pass",
		"  to the manager: please approve bob's 980.00 for a conference pass within 4s",
		"  to the manager: reminder: bob's 980.00 for a conference pass waits for your decision",
		"  to bob: your 980.00 for a conference pass is rejected: no decision in time",
	}, exampletest.Run(t, run))
}

// days is the timing of a real deployment. The tests below move journeytest's clock across it,
// and take a fraction of a second.
var days = timing{RemindAfter: 24 * time.Hour, DecideWithin: 72 * time.Hour}

// The same graph with days in it, on the test's clock: whichever of the decision and the deadline
// comes first decides, and the other, arriving later, changes nothing.
func TestDecisionAndDeadline(t *testing.T) {
	t.Parallel()
	const (
		ask    = "to the manager: please approve ada's 42.00 for a train ticket within 72h0m0s"
		remind = "to the manager: reminder: ada's 42.00 for a train ticket waits for your decision"
	)
	tests := []struct {
		name     string
		decision string        // "" for none
		decideAt time.Duration // after the claim
		want     string        // the outcome
		sent     []string
	}{
		{name: "approved at once", decision: approved, decideAt: 0, want: approved,
			sent: []string{ask, "to ada: your 42.00 for a train ticket is approved"}},
		{name: "approved after the reminder", decision: approved, decideAt: days.RemindAfter, want: approved,
			sent: []string{ask, remind, "to ada: your 42.00 for a train ticket is approved"}},
		{name: "rejected a millisecond before the deadline", decision: rejected,
			decideAt: days.DecideWithin - time.Millisecond, want: rejected,
			sent: []string{ask, remind, "to ada: your 42.00 for a train ticket is rejected"}},
		{name: "no decision", want: timedOut,
			sent: []string{ask, remind, "to ada: your 42.00 for a train ticket is rejected: no decision in time"}},
		{name: "approved after the deadline", decision: approved, decideAt: days.DecideWithin + time.Minute, want: timedOut,
			sent: []string{ask, remind, "to ada: your 42.00 for a train ticket is rejected: no decision in time"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			claimed := b.rt.Now() // the clock stands still until Advance moves it

			// The ticks have chosen their times, and nothing runs until the clock moves.
			b.rt.WaitIdle(b.id)
			require.Equal(t, claimed.Add(days.RemindAfter).UTC(), dueTime(b, "reminder_due"))
			require.Equal(t, claimed.Add(days.DecideWithin).UTC(), dueTime(b, "deadline"))

			// The clock stops at the reminder, at the decision, and an hour past the deadline,
			// so that each step's messages are sent in order.
			stops := []time.Duration{days.RemindAfter, days.DecideWithin + time.Hour}
			if tt.decision != "" {
				stops = append(stops, tt.decideAt)
			}
			slices.Sort(stops)
			for _, at := range slices.Compact(stops) {
				b.rt.Advance(claimed.Add(at).Sub(b.rt.Now()))
				b.rt.WaitIdle(b.id)
				if tt.decision != "" && at == tt.decideAt {
					_, err := b.rt.Set(t.Context(), b.id, "decision", tt.decision)
					require.NoError(t, err)
					b.rt.WaitIdle(b.id)
				}
			}
			b.rt.RequireValue(b.id, "outcome", tt.want)
			require.Equal(t, tt.sent, b.mail.messages())
		})
	}
}

// bundle is what a test of the graph needs.
type bundle struct {
	rt   *journeytest.Runtime
	mail *mailer
	id   string // ada's claim
}

// setup starts a runtime on the test's clock that serves the graph with days in it, and submits
// ada's claim.
func setup(t *testing.T) *bundle {
	t.Helper()
	mail := &mailer{out: t.Output()}
	g := approval(mail, days)
	rt := journeytest.New(t, g)
	ex, err := rt.Start(t.Context(), g, journey.WithValues(map[string]any{
		"expense": expense{Employee: "ada", Cents: 4200, For: "a train ticket"},
	}))
	require.NoError(t, err)
	return &bundle{rt: rt, mail: mail, id: ex.ID}
}

// dueTime returns the time a tick node comes due: its value, in Unix milliseconds.
func dueTime(b *bundle, tick string) time.Time {
	return time.UnixMilli(b.rt.WaitValue(b.id, tick).Int()).UTC()
}
