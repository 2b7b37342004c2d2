package persistence

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/journey-go/journey/persistence/machine"
)

// The statements that stay set-based for speed (the claim, the promotions) take their predicates
// from the table of states: every combination of an attempt's state, its gating, whether it is
// due, and its execution's archive, cancel and pause goes through both the statement and Step,
// and the two leave the same states.
func TestSetBasedStatementsFollowTheTable(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	now := b.clock.Now()
	type combo struct {
		id                         string
		state                      string
		gated, due                 bool
		archived, canceled, paused bool
	}
	var combos []*combo
	for _, state := range []string{StatePending, StateAvailable, StatePaused, StateWaiting, StateSuccess} {
		for _, gated := range []bool{false, true} {
			for _, due := range []bool{false, true} {
				for flags := range 8 {
					combos = append(combos, &combo{state: state, gated: gated, due: due,
						archived: flags&1 != 0, canceled: flags&2 != 0, paused: flags&4 != 0})
				}
			}
		}
	}
	// One execution a combination, whose y is in it: each gated one with a key of its own, so that
	// the key has room, and the table alone decides.
	for i, c := range combos {
		e, err := b.store.CreateExecution(ctx, b.g)
		require.NoError(t, err)
		c.id = e.ID
		runAt := now.Add(-time.Minute)
		if !c.due {
			runAt = now.Add(time.Hour)
		}
		var key *string
		if c.gated {
			key = new(fmt.Sprintf("key-%d", i))
		}
		at := func(set bool) *time.Time {
			if set {
				return &now
			}
			return nil
		}
		_, err = b.db.ExecContext(ctx, b.store.q(`INSERT INTO {s}.nodes (lane, execution_id, node, graph_key, rev, changed_at, hseq,
				attempt_id, state, attempt, max_attempts, run_at, abandon_after_ms, heartbeat_timeout_ms, computed_with,
				concurrency_key, created_at)
			VALUES (?, ?, 'y', ?, 1, ?, 0, ?, ?, 1, 2, ?, 10000, 3000, '{}', ?, ?)`),
			e.Lane, e.ID, GraphKey(b.g.Name(), b.g.Version()), now, int64(1000+i), c.state, runAt, key, now)
		require.NoError(t, err)
		reason := "stop"
		_, err = b.db.ExecContext(ctx, b.store.q(`UPDATE {s}.executions SET archived_at = ?, canceled_at = ?, cancel_reason = ?,
				paused_at = ? WHERE lane = ? AND id = ?`), at(c.archived), at(c.canceled), &reason, at(c.paused), e.Lane, e.ID)
		require.NoError(t, err)
	}
	// What Step says of each, as loaded.
	want := func(ev func() machine.Event) map[string]string {
		out := map[string]string{}
		for _, c := range combos {
			x := b.loadOne(t, c.id)
			p, err := machine.Step(x, ev(), machine.Env{Now: now, NewID: newAttemptID, NewToken: NewUUID})
			if err != nil {
				require.ErrorIs(t, err, machine.ErrNothingToDo)
			}
			out[c.id] = p.Latest("y").State
		}
		return out
	}
	got := func() map[string]string {
		out := map[string]string{}
		for _, c := range combos {
			x := b.loadOne(t, c.id)
			for _, r := range x.Rows {
				if r.Node == "y" {
					out[c.id] = r.Attempt.State
				}
			}
		}
		return out
	}
	// The promotions.
	promoted := want(func() machine.Event { return machine.Promote{Node: "y"} })
	_, err := b.store.PromoteDue(ctx)
	require.NoError(t, err)
	require.Equal(t, promoted, got(), "the promotions move what Step's Promote moves, and nothing else")
	moved := 0
	for _, c := range combos {
		if c.state == StatePending && promoted[c.id] == StateAvailable {
			moved++
		}
	}
	require.Equal(t, 2, moved, "those due of live executions, gated or not")
	// The claim.
	claimed := want(func() machine.Event { return machine.Claim{Node: "y", Replica: "r1", Token: "t"} })
	_, err = b.store.Claim(ctx, "r1", len(combos))
	require.NoError(t, err)
	require.Equal(t, claimed, got(), "the claim takes what Step's Claim takes, and nothing else")
	n := 0
	for _, state := range claimed {
		if state == StateRunning {
			n++
		}
	}
	require.Equal(t, 4+2, n, "the AVAILABLE attempts of live executions (due or not, gated or not), and those just promoted")
}

// loadOne loads execution id as a write does, without its lock.
func (b *bundle) loadOne(t *testing.T, id string) *machine.Loaded {
	t.Helper()
	var xs []*machine.Loaded
	err := b.store.inTxn(context.Background(), b.db, func(ctx context.Context, tx *txn) error {
		var err error
		xs, _, err = b.store.load(ctx, tx, []string{id}, nil, nil)
		return err
	})
	require.NoError(t, err)
	return xs[0]
}

// The statements that end or hold a running attempt under its claim, outside Step (the sweep's
// abandonment of an attempt alone, a map node's wait for its children), take the attempts that
// Step's Abandon and the table's Waitable take: an attempt in each state, of an execution canceled
// or not, each under its claim.
func TestClaimHeldStatementsFollowTheTable(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	now := b.clock.Now()
	type combo struct {
		id, token string
		state     string
		canceled  bool
	}
	var combos []*combo
	for _, state := range []string{StatePending, StateAvailable, StatePaused, StateWaiting, StateRunning, StateSuccess} {
		for _, canceled := range []bool{false, true} {
			e, err := b.store.CreateExecution(ctx, b.g)
			require.NoError(t, err)
			c := &combo{id: e.ID, token: NewUUID(), state: state, canceled: canceled}
			combos = append(combos, c)
			b.exec(t, `INSERT INTO {s}.nodes (lane, execution_id, node, graph_key, rev, changed_at, hseq, attempt_id, state, attempt,
					max_attempts, run_at, abandon_after_ms, heartbeat_timeout_ms, computed_with, claim_token, replica_id, created_at)
				VALUES (?, ?, 'y', ?, 1, ?, 0, ?, ?, 1, 2, ?, 10000, 3000, '{}', ?::uuid, 'r1', ?)`,
				e.Lane, e.ID, GraphKey(b.g.Name(), b.g.Version()), now, int64(2000+len(combos)), state, now, c.token, now)
			b.exec(t, `INSERT INTO {s}.map_progress (lane, execution_id, node, gen, sig, total, done) VALUES (?, ?, 'y', 1, '{}', 2, 0)`,
				e.Lane, e.ID)
			if canceled {
				b.exec(t, `UPDATE {s}.executions SET canceled_at = ?, cancel_reason = 'stop' WHERE lane = ? AND id = ?`, now, e.Lane, e.ID)
			}
		}
	}
	attempt := func(c *combo) (*machine.Loaded, *machine.Attempt) {
		x := b.loadOne(t, c.id)
		for _, r := range x.Rows {
			if r.Node == "y" {
				return x, r.Attempt
			}
		}
		t.Fatalf("no attempt of y in %s", c.id)
		return nil, nil
	}
	waited, abandoned := 0, 0
	for _, c := range combos {
		x, a := attempt(c)
		// A map node's wait: the table's Waitable, under the claim.
		want := machine.Waitable.Holds(&x.Exec, a, now)
		waiting, err := b.store.WaitChildren(ctx, &Computation{ID: a.ID, ExecutionID: c.id, Node: "y", ClaimToken: &c.token},
			b.g, nil, "{}")
		if want {
			require.NoError(t, err, "%s, canceled %t", c.state, c.canceled)
			require.True(t, waiting)
			waited++
			continue // WAITING now: the abandonment below is of the other attempts
		}
		require.ErrorIs(t, err, ErrClaimLost, "%s, canceled %t", c.state, c.canceled)
		// The abandonment alone: what Step's Abandon takes.
		_, stepErr := machine.Step(x, machine.Abandon{Node: "y", Token: c.token, Reason: ReasonReplica("r1")},
			machine.Env{Now: now, NewID: newAttemptID, NewToken: NewUUID})
		got, err := b.store.abandonAlone(ctx, expired{ID: a.ID, Lane: x.Exec.Lane, ExecutionID: c.id, Node: "y", ClaimToken: &c.token,
			Reason: ReasonReplica("r1")}, 1, fmt.Errorf("test"))
		require.NoError(t, err)
		require.Equal(t, stepErr == nil, got != nil, "%s, canceled %t: the abandonment alone takes what Step's Abandon takes", c.state, c.canceled)
		if got != nil {
			abandoned++
		}
	}
	require.Equal(t, 1, waited, "the running map node of the live execution")
	require.Equal(t, 1, abandoned, "the running attempt of the canceled execution")
}
