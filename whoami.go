package journey

import (
	"context"

	"github.com/journey-go/journey/persistence"
)

// ExecutionID returns the id of the execution whose node's function ctx was given to (a
// compute, mutate or tick function), or "" for any other context.
func ExecutionID(ctx context.Context) string {
	if c := persistence.AttemptOf(ctx); c != nil {
		return c.ExecutionID
	}
	return ""
}

// NodeName returns the name of the node whose function ctx was given to, or "".
func NodeName(ctx context.Context) string {
	if c := persistence.AttemptOf(ctx); c != nil {
		return c.Node
	}
	return ""
}

// Attempt returns the number of the attempt that runs the function ctx was given to, from 1, or
// 0 for any other context.
func Attempt(ctx context.Context) int {
	if c := persistence.AttemptOf(ctx); c != nil {
		return c.Attempt
	}
	return 0
}

// IdempotencyKey returns a key for the side effects of the function ctx was given to, to pass to
// a payment API, say: the same on every attempt of this computation, on any replica (its
// retries, and the attempts that replace an abandoned one), and another when the node is
// computed again for new upstream values. It is "" for any other context.
func IdempotencyKey(ctx context.Context) string {
	if c := persistence.AttemptOf(ctx); c != nil {
		return c.IdempotencyKey()
	}
	return ""
}
