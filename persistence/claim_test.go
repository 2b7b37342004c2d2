package persistence

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A claim reads the values under the lock it holds, not from an older snapshot. A write that
// commits after the claim's statement began, but before the claim locks the execution, is what
// the function must see: the claim locks the newest row of the execution, so the write's values
// are the execution's as of the claim.
//
// The claim is held between the two moments by a trigger of the test's schema: before the claim's
// UPDATE of computations does anything (it has its snapshot, and has not yet looked for its
// attempts), it waits for an advisory lock that the test holds while it writes.
func TestClaimReadsTheValuesUnderItsLock(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	id := b.ready(t, 1)[0]
	b.exec(t, `CREATE FUNCTION {s}.hold_claims() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN PERFORM pg_advisory_xact_lock_shared(hashtext(TG_TABLE_SCHEMA)); RETURN NULL; END $$`)
	b.exec(t, `CREATE TRIGGER hold_claims BEFORE UPDATE ON {s}.computations
		FOR EACH STATEMENT EXECUTE FUNCTION {s}.hold_claims()`)

	holder, err := b.db.Conn(ctx)
	require.NoError(t, err)
	defer func() { _ = holder.Close() }()
	var pid int
	require.NoError(t, holder.QueryRowContext(ctx, "SELECT pg_backend_pid()").Scan(&pid))
	_, err = holder.NewRaw("SELECT pg_advisory_lock(hashtext(?))", b.schema).Exec(ctx)
	require.NoError(t, err)
	released := false
	release := func() {
		if !released {
			released = true
			_, err := holder.NewRaw("SELECT pg_advisory_unlock(hashtext(?))", b.schema).Exec(ctx)
			require.NoError(t, err)
		}
	}
	defer release()

	type result struct {
		got []*Computation
		err error
	}
	claimed := make(chan result, 1)
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	go func() {
		got, err := b.store.Claim(cctx, "r1", 1)
		claimed <- result{got, err}
	}()
	waitFor(t, "the claim to wait for the test's lock", func() bool {
		var waiting bool
		require.NoError(t, b.db.NewRaw(`SELECT EXISTS (SELECT 1 FROM pg_locks
			WHERE locktype = 'advisory' AND NOT granted AND ? = ANY(pg_blocking_pids(pid)))`, pid).Scan(ctx, &waiting))
		return waiting
	})

	// The write commits while the claim waits: after its snapshot, before its lock.
	wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
	defer wcancel()
	_, err = b.store.SetValues(wctx, id, map[string]json.RawMessage{"x": json.RawMessage(`2`)}, nil, nil)
	require.NoError(t, err)
	release()

	res := <-claimed
	require.NoError(t, res.err)
	require.Len(t, res.got, 1, "the attempt is claimed, its execution's row as of the write")
	vals, err := res.got[0].ClaimedValues()
	require.NoError(t, err)
	require.JSONEq(t, `2`, string(vals["x"].Raw), "the function sees the value committed before the claim locked the execution")
	e, err := b.store.LoadExecution(ctx, id)
	require.NoError(t, err)
	require.Equal(t, e.Revision-1, vals["x"].Revision, "the claim is the revision after the write")
}
