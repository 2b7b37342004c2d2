package machine

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestFailure(t *testing.T) {
	t.Parallel()
	// panicText is what recovered records for user code named what that panics.
	panicText := func(what string) string {
		_, err := recovered(what, func() int { panic("boom") })
		require.Error(t, err)
		return err.Error()
	}
	for _, tc := range []struct {
		name         string
		state        string
		attempt, max int
		err, want    string
	}{
		{"permanent before the last attempt", StateFailed, 2, 4, "card declined",
			"failed permanently at attempt 2 of 4"},
		{"a result that cannot be stored", StateFailed, 1, 3, `the result of "x" cannot be stored: too big`,
			"failed permanently at attempt 1 of 3"},
		{"the last attempt failed", StateFailed, 4, 4, "card declined", "used up its 4 attempts"},
		{"the only attempt failed", StateFailed, 1, 1, "card declined", "used up its 1 attempt"},
		{"the last attempt was abandoned", StateAbandoned, 3, 3, ReasonHeartbeat, "used up its 3 attempts"},
		{"the function panicked at each attempt", StateFailed, 3, 3, `computation of "x" panicked: boom`,
			"used up its 3 attempts"},
		{"a gate panicked", StateFailed, 1, 3, panicText(`the gate of node "x"`),
			"failed at attempt 1 of 3 because user code panicked"},
		{"a gate panicked after the last attempt", StateFailed, 3, 3, panicText(`the gate of node "x"`),
			"failed at attempt 3 of 3 because user code panicked"},
		{"a ConcurrencyKey panicked", StateFailed, 2, 3, panicText(`the ConcurrencyKey of node "a \"quoted\" name"`),
			"failed at attempt 2 of 3 because user code panicked"},
		{"a Backoff panicked after the function did", StateFailed, 1, 3,
			fmt.Sprintf("%s; then %s", `computation of "x" panicked: boom`, panicText(`the Backoff of node "x"`)),
			"failed at attempt 1 of 3 because user code panicked"},
		{"a success", StateSuccess, 1, 3, "", ""},
		{"a retry waits", StatePending, 2, 3, "", ""},
		{"canceled", StateCanceled, 1, 3, ReasonArchived, ""},
	} {
		require.Equal(t, tc.want, Failure(tc.state, tc.attempt, tc.max, tc.err), tc.name)
	}
}
