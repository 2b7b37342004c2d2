package persistence

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
)

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

// IdempotencyKey is the key of c's computation: its execution, its node and the upstream
// revisions it was made for (its signature as made, which its retries and the attempts that
// replace an abandoned one keep). It is the same on every attempt of the computation and every
// replica, and another when the node is computed again for new upstream values.
func (c *Computation) IdempotencyKey() string {
	sum := sha256.Sum256([]byte(parseSignature(c.ComputedWith).String()))
	return c.ExecutionID + "/" + c.Node + "/" + hex.EncodeToString(sum[:8])
}
