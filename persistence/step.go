package persistence

import "github.com/journey-go/journey/persistence/machine"

// The state machine's types and rules (package machine), as this package and its callers name
// them: every change of an attempt or an execution is planned by machine.Step, and written by
// this package (load.go loads, apply.go applies).
type (
	// Execution is a row of the executions table. Its Revision, as the store returns it, is the
	// execution's: the greatest of the column's and of its node rows'.
	Execution = machine.Execution
	// Parent is what a child execution knows of its parent.
	Parent = machine.Parent
	// Computation is one attempt of one node: the current attempt of a node row, or a row of the
	// attempts table.
	Computation = machine.Attempt
	// ClaimRef identifies a claim for a fenced write.
	ClaimRef = machine.ClaimRef
	// FailedNode is a node that had failed for good when a failure was claimed.
	FailedNode = machine.FailedNode
	// HistoryEntry is one entry of a historian's value.
	HistoryEntry = machine.HistoryEntry
)

// Attempt states.
const (
	StatePending   = machine.StatePending
	StateAvailable = machine.StateAvailable
	StateRunning   = machine.StateRunning
	StateSuccess   = machine.StateSuccess
	StateFailed    = machine.StateFailed
	StateAbandoned = machine.StateAbandoned
	StateCanceled  = machine.StateCanceled
	StatePaused    = machine.StatePaused
	StateWaiting   = machine.StateWaiting
)

// Lifecycle events.
const (
	EventFailed    = machine.EventFailed
	EventCompleted = machine.EventCompleted
	EventCanceled  = machine.EventCanceled
)

// Reasons recorded in an attempt's error.
const (
	ReasonDeadline  = machine.ReasonDeadline
	ReasonHeartbeat = machine.ReasonHeartbeat
	ReasonArchived  = machine.ReasonArchived
)

// Errors of the state machine, which the root package re-exports.
var (
	ErrUnknownNode  = machine.ErrUnknownNode
	ErrNotInput     = machine.ErrNotInput
	ErrInvalidValue = machine.ErrInvalidValue
	ErrClaimLost    = machine.ErrClaimLost
	ErrNotFailed    = machine.ErrNotFailed
	ErrCanceled     = machine.ErrCanceled
)

// CheckInput reports why node name of g cannot be set (see machine.CheckInput).
var CheckInput = machine.CheckInput

// Failure says how a node failed for good (see machine.Failure).
var Failure = machine.Failure

// Signature returns the revisions of n's upstream nodes that are set in vals.
var Signature = machine.Signature

// TickValue encodes the time a tick function returned.
var TickValue = machine.TickValue
