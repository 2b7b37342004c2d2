package journey

import (
	"errors"

	"github.com/journey-go/journey/graph"
	"github.com/journey-go/journey/persistence"
)

// Errors, matched with errors.Is. The errors returned wrap them with the details.
var (
	// ErrNotFound means there is no such execution.
	ErrNotFound = persistence.ErrNotFound
	// ErrNotSet means the node has no value (yet).
	ErrNotSet = graph.ErrNotSet
	// ErrComputationFailed means the node failed for good and nothing is pending: it used up its
	// attempts, or failed at once (a graph.Permanent error, or a panic of its gate, ConcurrencyKey
	// or Backoff). The error says which. Retry gives it a fresh budget.
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
	// ErrInvalidText means a string given as an execution id, a node, graph or version name, or
	// in a ListQuery cannot reach PostgreSQL: it holds a NUL character, is not valid UTF-8, or
	// is over 1 KiB, longer than any id or name stored. It is refused before any SQL, and the
	// error is a *TextError, which names the field and the rule.
	ErrInvalidText = persistence.ErrInvalidText
	// ErrIncompatibleVersions means MoveVersion refused: the newer version does not keep every
	// node of the older, of the same kind.
	ErrIncompatibleVersions = persistence.ErrIncompatibleVersions
	// ErrGraphChanged means New refused a graph whose version is recorded with another
	// definition (other nodes, kinds, gates or options), which executions of the version or
	// live replicas still use. The error says what changed: give the changed graph a new
	// version (docs/operating.md, "Graph versions and fingerprints").
	ErrGraphChanged = persistence.ErrGraphChanged
	// ErrCanceled means the execution is canceled (Runtime.Cancel): Get of a node with no value
	// and Retry answer it, and a waiting Get ends with it.
	ErrCanceled = persistence.ErrCanceled
	// ErrKeyHeld means Unarchive refused: another unarchived execution of the graph holds the
	// execution's key (see WithKey). Archive that one first.
	ErrKeyHeld = persistence.ErrKeyHeld
	// ErrSingleton means a key was given to a Start or StartMany of a graph made with
	// graph.Singleton(), whose executions all have the key graph.SingletonKey.
	ErrSingleton = errors.New("journey: the graph is a singleton")
	// ErrStopped means the runtime was stopped.
	ErrStopped = errors.New("journey: runtime stopped")
	// ErrOutcomeUnknown means a write's COMMIT got no answer (the connection broke, or the
	// context ended, as it was sent): it may or may not have committed. The runtime never answers
	// it by making the write again blind. A Start is made again with the execution's id, chosen
	// before the first try, and gets the execution that the first try made, if it did: a Start
	// returns it only if it could not find out. Read the execution (Load, Get) to learn whether a
	// Set went through.
	ErrOutcomeUnknown = persistence.ErrOutcomeUnknown
	// ErrReplicaIDInUse means another live process holds Config.ReplicaID: New refuses to start,
	// and a replica that finds its row taken by another process claims nothing more, and returns
	// it from every call. Give each process an id of its own.
	ErrReplicaIDInUse = persistence.ErrReplicaIDInUse
	// ErrReleaseRetired means the schema was migrated for a newer release of journey-go, which
	// this one cannot run beside: New refuses to start, and a replica that finds it at a
	// heartbeat claims nothing more, and returns it from every call. Stop it, and deploy the new
	// release.
	ErrReleaseRetired = persistence.ErrReleaseRetired
)

// TextError is the error of ErrInvalidText: Field names what the string was, Value quotes it,
// Rule says what it broke.
type TextError = persistence.TextError
