package journey

import (
	"errors"

	"github.com/journey-go/journey/graph"
	"github.com/journey-go/journey/internal/persistence"
)

// Errors, matched with errors.Is. The errors returned wrap them with the details.
var (
	// ErrNotFound means there is no such execution.
	ErrNotFound = persistence.ErrNotFound
	// ErrNotSet means the node has no value (yet).
	ErrNotSet = graph.ErrNotSet
	// ErrComputationFailed means the node used up its attempts and nothing is pending.
	// Retry gives it a fresh budget.
	ErrComputationFailed = errors.New("journey: computation failed")
	// ErrUnknownNode means the execution's graph has no node of that name.
	ErrUnknownNode = persistence.ErrUnknownNode
	// ErrNotInput means only input nodes can be set or unset.
	ErrNotInput = persistence.ErrNotInput
	// ErrUnknownGraph means the graph is not registered on this replica (Config.Graphs).
	ErrUnknownGraph = persistence.ErrUnknownGraph
	// ErrInvalidValue means a value or metadata cannot be stored: it is not JSON-encodable, it
	// holds a NUL character (which PostgreSQL's jsonb rejects), or it is larger than
	// Config.MaxValueBytes. A Set or Start also fails with it, and changes nothing, when the
	// values it sets would give a node a concurrency key that cannot be stored.
	ErrInvalidValue = persistence.ErrInvalidValue
	// ErrStopped means the runtime was stopped.
	ErrStopped = errors.New("journey: runtime stopped")
)
