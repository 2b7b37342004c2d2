package persistence

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/journey-go/journey/graph"
)

func TestRefused(t *testing.T) {
	t.Parallel()
	pg := func(code string) error { return fmt.Errorf("writing: %w", &pgconn.PgError{Code: code}) }
	for err, want := range map[error]bool{
		pg("22003"):              true,  // numeric value out of range
		pg("22021"):              true,  // invalid byte sequence
		pg("54000"):              true,  // index row too large
		pg("08006"):              false, // connection failure
		pg("40001"):              false, // serialization failure
		pg("57P01"):              false, // admin shutdown
		pg("42601"):              false, // syntax error
		errors.New("plain"):      false,
		context.DeadlineExceeded: false,
	} {
		require.Equal(t, want, Refused(err), "Refused(%v)", err)
	}
}

func TestUnreachable(t *testing.T) {
	t.Parallel()
	pg := func(code string) error { return fmt.Errorf("writing: %w", &pgconn.PgError{Code: code}) }
	for err, want := range map[error]bool{
		pg("08006"): true,  // connection failure
		pg("57P01"): true,  // admin shutdown
		pg("57P03"): true,  // cannot connect now
		pg("55P03"): false, // lock not available
		pg("22003"): false, // numeric value out of range
		pg("40P01"): false, // deadlock
		fmt.Errorf("reading: %w", io.ErrUnexpectedEOF):                                          true,
		fmt.Errorf("dial: %w", &net.OpError{Op: "dial", Err: errors.New("connection refused")}): true,
		errors.New("plain"):      false,
		context.DeadlineExceeded: false,
	} {
		require.Equal(t, want, Unreachable(err), "Unreachable(%v)", err)
	}
}

// An outcome that PostgreSQL refuses even alone (here a number beyond jsonb's range, which no
// check before SQL catches) fails its attempt for good, with the reason, rather than being
// retried.
func TestRecordAloneFailsAnOutcomeTheDatabaseRefuses(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	ids := b.ready(t, 1)
	c := b.claimOne(t, "r1")

	err := b.store.RecordAlone(ctx, Outcome{C: c, Result: json.RawMessage(`1e1000000`), Used: map[string]int64{"x": 1}})
	var failed *RecordedAsFailure
	require.ErrorAs(t, err, &failed, "the caller learns that the attempt failed")
	require.True(t, graph.IsPermanent(failed.Cause))
	got := b.latest(t, ids[0], "y")
	require.Equal(t, c.ID, got.ID, "no other attempt: the refusal is for good")
	require.Equal(t, StateFailed, got.State)
	require.Equal(t, "the outcome could not be stored: PostgreSQL refused it: value overflows numeric format (SQLSTATE 22003)",
		deref(got.Error))
	ns, err := b.store.NodeState(ctx, ids[0], "y")
	require.NoError(t, err)
	require.True(t, ns.Failed())
}
