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
