package persistence

import "context"

// attemptKey is the context key of the attempt whose function runs.
type attemptKey struct{}

// WithAttempt returns ctx for the function of attempt c, which AttemptOf reads.
func WithAttempt(ctx context.Context, c *Computation) context.Context {
	return context.WithValue(ctx, attemptKey{}, c)
}

// AttemptOf returns the attempt whose function ctx was given to, or nil.
func AttemptOf(ctx context.Context) *Computation {
	c, _ := ctx.Value(attemptKey{}).(*Computation)
	return c
}
