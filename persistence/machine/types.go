package machine

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"time"

	"github.com/journey-go/journey/graph"
)

// Execution is a row of the executions table. Its Revision, as the store returns it, is the
// execution's: the greatest of the column's and of its node rows'.
type Execution struct {
	ID           string     `bun:"id"`
	Lane         int16      `bun:"lane"`
	GraphName    string     `bun:"graph_name"`
	GraphVersion string     `bun:"graph_version"`
	Revision     int64      `bun:"revision"`
	ArchivedAt   *time.Time `bun:"archived_at"`
	CreatedAt    time.Time  `bun:"created_at"`
	UpdatedAt    time.Time  `bun:"updated_at"`
	// WakeAt is when the execution must be advanced again without a write: its next due tick.
	WakeAt *time.Time `bun:"wake_at"`
	// FailurePhase counts the Retry calls, each of which re-arms the failure notification.
	FailurePhase int `bun:"failure_phase"`
	// Key is the key the execution was started with, nil for none. While the execution is not
	// archived, no other execution of its graph holds it.
	Key *string `bun:"key"`
	// CanceledAt is when the execution was canceled (Cancel), with CancelReason; nil if it was not.
	CanceledAt   *time.Time `bun:"canceled_at"`
	CancelReason *string    `bun:"cancel_reason"`
	// PausedAt is when the execution was paused (Pause), nil while it is not.
	PausedAt *time.Time `bun:"paused_at"`
	// Priority is the execution's priority (journey.WithPriority), which adds to each node's.
	Priority int16 `bun:"priority"`
	// Parent is, for a child execution (graph.Map, graph.Child), its parent's map node; nil for
	// any other.
	Parent *Parent `bun:"parent,type:jsonb"`
	// EndedAt, for a child execution, is when it last ended for its parent's map node (see
	// Ended): nil while it runs. The child's writes keep it, and count its changes in the
	// node's progress, in their own transactions.
	EndedAt *time.Time `bun:"ended_at"`
	// Existing is set by CreateExecutions and Write, on the execution of a keyed start that held
	// the key already: that start started nothing.
	Existing bool `bun:"-" db:"-"`
}

// Parent is what a child execution knows of its parent: the parent's id, the map node that
// started it, the node's generation (see MapProgress) and the child's place in its list.
type Parent struct {
	ID    string `json:"id"`
	Node  string `json:"node"`
	Gen   int64  `json:"gen"`
	Index int    `json:"index"`
}

// Attempt is one attempt of one node: the current attempt of a node row, or a row of the
// attempts table.
type Attempt struct {
	ID                 int64      `bun:"id"`
	Lane               int16      `bun:"lane"`
	ExecutionID        string     `bun:"execution_id"`
	GraphKey           string     `bun:"graph_key"`
	Node               string     `bun:"node"`
	State              string     `bun:"state"`
	Attempt            int        `bun:"attempt"`
	MaxAttempts        int        `bun:"max_attempts"`
	ReplicaID          *string    `bun:"replica_id"`
	ClaimToken         *string    `bun:"claim_token"`
	RunAt              time.Time  `bun:"run_at"`
	ClaimedAt          *time.Time `bun:"claimed_at"`
	Deadline           *time.Time `bun:"deadline"`
	HeartbeatDeadline  *time.Time `bun:"heartbeat_deadline"`
	LastHeartbeatAt    *time.Time `bun:"last_heartbeat_at"`
	AbandonAfterMS     int64      `bun:"abandon_after_ms"`
	HeartbeatTimeoutMS int64      `bun:"heartbeat_timeout_ms"`
	ComputedWith       string     `bun:"computed_with"`
	Error              *string    `bun:"error"`
	ConcurrencyKey     *string    `bun:"concurrency_key"`
	MaxParallel        *int       `bun:"max_parallel"`
	CreatedAt          time.Time  `bun:"created_at"`
	FinishedAt         *time.Time `bun:"finished_at"`
	// AvailableAt is when the attempt last became AVAILABLE.
	AvailableAt *time.Time `bun:"available_at"`
	// Traceparent is the W3C traceparent of the span of the write that created the attempt, if
	// that write was traced: the attempt's span links to it.
	Traceparent *string `bun:"traceparent"`
	// RateKey is the key of the attempt's rate limit (graph.RateLimit, graph.RateKey; "" for a
	// node limited as a whole), nil for an attempt that no rate limits.
	RateKey *string `bun:"rate_key"`
	// The values of the execution when Claim returned the computation, shared by the computations
	// of one execution unless claimedOwn: read them with ClaimedValues. Other reads leave them
	// empty.
	claimed    graph.Values
	claimedOwn bool
}

// Gated reports whether the attempt waits for a concurrency key or a parallel limit.
func (c *Attempt) Gated() bool { return c.ConcurrencyKey != nil || c.MaxParallel != nil }

// Waits reports whether the attempt, once due, waits for a promotion: its concurrency key, its
// parallel limit or its rate limit. A rate-limited attempt holds no slot that its end frees
// (Gated): only time frees room in its window.
func (c *Attempt) Waits() bool { return c.Gated() || c.RateKey != nil }

// Active reports whether the attempt is still to run or running.
func (c *Attempt) Active() bool {
	return c.State == StatePending || c.State == StateAvailable || c.State == StateRunning || c.State == StatePaused ||
		c.State == StateWaiting
}

// FailedForGood reports whether this attempt ended the node's budget: a failed or abandoned
// attempt that no retry follows (the latest row of its node).
func (c *Attempt) FailedForGood() bool {
	return c.State == StateFailed || c.State == StateAbandoned
}

// Attempt states.
const (
	StatePending   = "PENDING"
	StateAvailable = "AVAILABLE"
	StateRunning   = "RUNNING"
	StateSuccess   = "SUCCESS"
	StateFailed    = "FAILED"
	StateAbandoned = "ABANDONED"
	StateCanceled  = "CANCELED"
	// StatePaused: the attempt waits for its execution's Resume; no claim or promotion reads it.
	StatePaused = "PAUSED"
	// StateWaiting: a map node's attempt waits for its children to end (see graph.Map); the end
	// of the last makes it AVAILABLE again, to collect their results.
	StateWaiting = "WAITING"
)

// Errors of the events. The persistence package and the root package re-export them.
var (
	// ErrUnknownNode means the graph has no node of that name.
	ErrUnknownNode = errors.New("journey: unknown node")
	// ErrNotInput means only input nodes can be set or unset.
	ErrNotInput = errors.New("journey: node is not an input")
	// ErrInvalidValue means values given to a write cannot be stored, or would give a node a
	// concurrency key that cannot be.
	ErrInvalidValue = errors.New("journey: invalid value")
	// ErrClaimLost means a fenced write matched no row: the computation was abandoned, released or
	// claimed elsewhere, and its result must be dropped.
	ErrClaimLost = errors.New("journey: claim lost")
	// ErrNotFailed means Retry was asked for a node that has not failed.
	ErrNotFailed = errors.New("journey: node has not failed")
	// ErrCanceled means the execution is canceled (Cancel).
	ErrCanceled = errors.New("journey: execution canceled")
	// ErrNothingToDo means an event found its work done, or no longer to do: an abandonment of
	// an attempt that has ended, a release of one that is no longer claimed. The write changes
	// nothing.
	ErrNothingToDo = errors.New("nothing to do")
)

// Lifecycle events.
const (
	EventFailed    = "execution.failed"
	EventCompleted = "execution.completed"
	EventCanceled  = "execution.canceled"
)

// FailedNode is a node that had failed for good when a failure was claimed.
type FailedNode struct {
	Node     string `json:"node"`
	Attempts int    `json:"attempts"`
	Error    string `json:"error"`
}

// ClaimRef identifies a claim for a fenced write: the node row of the attempt, and its token.
type ClaimRef struct {
	ID          int64 // the attempt's
	Lane        int16
	ExecutionID string
	Node        string
	Token       string
	// Returned: the attempt's function has returned, and its outcome waits to be recorded: a
	// heartbeat keeps the attempt's deadline too, so that no sweep abandons work that is done.
	Returned bool
}

// Ref returns the claim reference of a claimed attempt.
func (c *Attempt) Ref() ClaimRef {
	return ClaimRef{ID: c.ID, Lane: c.Lane, ExecutionID: c.ExecutionID, Node: c.Node, Token: deref(c.ClaimToken)}
}

// ClaimedValues returns the values of the execution of a claimed attempt, as they were when it
// was claimed: a map of its own, which the caller may change. It is called once a claim: the map
// of an attempt claimed alone in its execution is handed over, not copied.
func (c *Attempt) ClaimedValues() graph.Values {
	if c.claimedOwn {
		vals := c.claimed
		c.claimed, c.claimedOwn = nil, false
		return vals
	}
	return maps.Clone(c.claimed)
}

// SetClaimedValues gives a claimed attempt the values of its execution, as ClaimedValues returns
// them; own says that no other attempt shares the map.
func (c *Attempt) SetClaimedValues(vals graph.Values, own bool) { c.claimed, c.claimedOwn = vals, own }

// CheckInput reports why node name of g cannot be set: it is not in the graph (ErrUnknownNode),
// or it is not an input (ErrNotInput).
func CheckInput(g *graph.Graph, name string) error {
	n, ok := g.Node(name)
	if !ok {
		return fmt.Errorf("%w: graph %q has no node %q", ErrUnknownNode, g.Name(), name)
	}
	if n.Kind() != graph.KindInput {
		return fmt.Errorf("%w: %q is a %s node; only input nodes can be set", ErrNotInput, name, n.Kind())
	}
	return nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// IdempotencyKey is the key of c's computation: its execution, its node and the upstream
// revisions it was made for (its signature as made, which its retries and the attempts that
// replace an abandoned one keep). It is the same on every attempt of the computation and every
// replica, and another when the node is computed again for new upstream values.
func (c *Attempt) IdempotencyKey() string {
	sum := sha256.Sum256([]byte(parseSignature(c.ComputedWith).String()))
	return c.ExecutionID + "/" + c.Node + "/" + hex.EncodeToString(sum[:8])
}
