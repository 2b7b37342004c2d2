package graph

import (
	"context"
	"math/rand/v2"
	"time"
)

// Defaults of the node options.
const (
	// DefaultMaxAttempts is the number of attempts per upstream change.
	DefaultMaxAttempts = 3
	// DefaultAbandonAfter is the hard deadline of one attempt.
	DefaultAbandonAfter = 60 * time.Second
	// DefaultHeartbeatInterval is how often a running attempt heartbeats.
	DefaultHeartbeatInterval = 10 * time.Second
	// DefaultHeartbeatTimeout is how long an attempt may go without a heartbeat before it is
	// abandoned.
	DefaultHeartbeatTimeout = 30 * time.Second
	// DefaultMaxEntries is the number of entries a historian keeps.
	DefaultMaxEntries = 100
)

// Bounds of DefaultBackoff.
const (
	backoffBase   = time.Second
	backoffMax    = 5 * time.Minute
	backoffJitter = 0.2
)

// Settings are a node's options, resolved: every field not given as an option holds its
// default.
type Settings struct {
	// MaxAttempts is the number of attempts per upstream change before the node fails.
	// Default 3.
	MaxAttempts int
	// AbandonAfter is the hard deadline of one attempt. Default 60s.
	AbandonAfter time.Duration
	// HeartbeatInterval is how often a running attempt heartbeats. Default 10s.
	HeartbeatInterval time.Duration
	// HeartbeatTimeout is how long an attempt may go without a heartbeat before it is
	// abandoned. Default 30s.
	HeartbeatTimeout time.Duration
	// Backoff returns the wait before the next attempt, given the 1-based number of the
	// attempt that just failed. Default DefaultBackoff.
	Backoff func(attempt int) time.Duration
	// OnSave is called after the node's value is saved, or once it fails for good.
	// Default nil.
	OnSave func(ctx context.Context, e SaveEvent)
	// ConcurrencyKey, when not nil, allows at most one computation per key to be available or
	// running, across all replicas. Default nil.
	ConcurrencyKey func(Values) string
	// MaxParallel is how many computations of the node may be available or running at once,
	// across all replicas. Default 0, meaning no limit.
	MaxParallel int
	// UpdateRevisionOnChange, for a mutate node, gives the targets whose value changed a new
	// revision, so that their dependents recompute. Default false.
	UpdateRevisionOnChange bool
	// MaxEntries is the number of entries a historian keeps, newest first. Default 100.
	MaxEntries int
	// Priority puts the node's attempts ahead in the queue of ready work (see Priority).
	// Default 0.
	Priority int
	// Result, for a map node, is the child's node whose value is a child's result. Default "":
	// the object of the child's values.
	Result string
	// CollectFailures, for a map node, keeps a child's failure as its result instead of failing
	// the node. Default false.
	CollectFailures bool
	// RateLimit is how many attempts of the node may start within any RatePer, per RateKey,
	// across all replicas (see RateLimit). Default 0, meaning no limit.
	RateLimit int
	// RatePer is the length of RateLimit's sliding window. Default 0.
	RatePer time.Duration
	// RateKey, when not nil, gives each key its own RateLimit. Default nil: one window for the
	// node.
	RateKey func(Values) string
}

// defaultSettings returns the settings of a node given no options.
func defaultSettings() Settings {
	return Settings{
		MaxAttempts:       DefaultMaxAttempts,
		AbandonAfter:      DefaultAbandonAfter,
		HeartbeatInterval: DefaultHeartbeatInterval,
		HeartbeatTimeout:  DefaultHeartbeatTimeout,
		Backoff:           DefaultBackoff,
		MaxEntries:        DefaultMaxEntries,
	}
}

// DefaultBackoff is the default retry backoff: 1s after the first failed attempt, doubling
// with each further one, capped at 5 minutes, then spread by a random ±20% so that retries of
// many executions do not land together. attempt is the 1-based number of the attempt that just
// failed; values below 1 count as 1.
func DefaultBackoff(attempt int) time.Duration {
	d := backoffMax
	// 2^9 s is past the cap already; stopping there also keeps the shift from overflowing.
	if attempt = max(attempt, 1); attempt <= 9 {
		d = min(backoffBase<<(attempt-1), backoffMax)
	}
	factor := 1 - backoffJitter + 2*backoffJitter*rand.Float64()
	return time.Duration(float64(d) * factor)
}

// option names an option, for validation messages.
type option int

const (
	optMaxAttempts option = iota
	optAbandonAfter
	optHeartbeat
	optBackoff
	optOnSave
	optConcurrencyKey
	optMaxParallel
	optUpdateRevisionOnChange
	optMaxEntries
	optPriority
	optResult
	optCollectFailures
	optRateLimit
	numOptions
)

var optionNames = [numOptions]string{
	optMaxAttempts:            "MaxAttempts",
	optAbandonAfter:           "AbandonAfter",
	optHeartbeat:              "Heartbeat",
	optBackoff:                "Backoff",
	optOnSave:                 "OnSave",
	optConcurrencyKey:         "ConcurrencyKey",
	optMaxParallel:            "MaxParallel",
	optUpdateRevisionOnChange: "UpdateRevisionOnChange",
	optMaxEntries:             "MaxEntries",
	optPriority:               "Priority",
	optResult:                 "Result",
	optCollectFailures:        "CollectFailures",
	optRateLimit:              "RateLimit",
}

func (o option) String() string { return optionNames[o] }

// nodeOptions collects the options given to a node constructor.
type nodeOptions struct {
	settings Settings
	given    [numOptions]bool
	// rateKeyGiven: RateLimit was given a RateKey, whose function may be nil.
	rateKeyGiven bool
}

// NodeOption configures a node. Options are checked by New: a value out of range, or an option
// used on a kind of node it does not apply to, is reported there.
type NodeOption func(*nodeOptions)

// MaxAttempts sets how many attempts a node gets per upstream change before it fails. An
// abandoned attempt counts. Default 3.
func MaxAttempts(n int) NodeOption {
	return func(o *nodeOptions) {
		o.settings.MaxAttempts = n
		o.given[optMaxAttempts] = true
	}
}

// AbandonAfter sets the hard deadline of one attempt, after which it is abandoned and counts
// as failed. Default 60s.
func AbandonAfter(d time.Duration) NodeOption {
	return func(o *nodeOptions) {
		o.settings.AbandonAfter = d
		o.given[optAbandonAfter] = true
	}
}

// Heartbeat sets how often a running attempt heartbeats, and how long it may go without one
// before it is abandoned. The interval must be at most half the timeout. Default 10s and 30s.
func Heartbeat(interval, timeout time.Duration) NodeOption {
	return func(o *nodeOptions) {
		o.settings.HeartbeatInterval = interval
		o.settings.HeartbeatTimeout = timeout
		o.given[optHeartbeat] = true
	}
}

// Backoff sets the wait before a retry, given the 1-based number of the attempt that just
// failed. Default DefaultBackoff.
func Backoff(fn func(attempt int) time.Duration) NodeOption {
	return func(o *nodeOptions) {
		o.settings.Backoff = fn
		o.given[optBackoff] = true
	}
}

// OnSave sets a callback that runs, after the commit, once per change of the node's value, and
// once with the error when the node fails for good. It runs before the graph's WithOnSave.
func OnSave(fn func(ctx context.Context, e SaveEvent)) NodeOption {
	return func(o *nodeOptions) {
		o.settings.OnSave = fn
		o.given[optOnSave] = true
	}
}

// ConcurrencyKey allows at most one computation of the node per key to be available or
// running, across all replicas. fn derives the key from the execution's values; an empty key
// sets no limit. A key is valid UTF-8 with no NUL character, at most 1024 bytes: one that is not
// fails the Set or Start that would create the node's attempt, and changes nothing, or, computed
// after a completion or a sweep, fails the node, as a panic of fn does.
func ConcurrencyKey(fn func(Values) string) NodeOption {
	return func(o *nodeOptions) {
		o.settings.ConcurrencyKey = fn
		o.given[optConcurrencyKey] = true
	}
}

// MaxParallel allows at most n computations of the node to be available or running at once,
// across all replicas and executions. Default: no limit.
func MaxParallel(n int) NodeOption {
	return func(o *nodeOptions) {
		o.settings.MaxParallel = n
		o.given[optMaxParallel] = true
	}
}

// MaxPriority bounds Priority and journey.WithPriority.
const MaxPriority = 100

// PriorityStep is what one point of priority is worth in the queue of ready work: an attempt of
// priority p is queued as though it had become ready p steps earlier.
const PriorityStep = time.Minute

// Priority puts the node's attempts ahead of others in the queue of ready work, by p from 0 (the
// default) to MaxPriority; an execution's priority (journey.WithPriority) adds to it. Claims take
// ready attempts in the order of when they became ready, less PriorityStep for each point of
// priority: among attempts that became ready within a minute of each other, the higher priority
// goes first, and a point is worth a minute of waiting. Nothing starves: an attempt of priority 0
// goes ahead of one of priority 10 that became ready more than ten minutes after it. Equal
// priorities keep the order of readiness.
//
// The head start is taken when an attempt becomes ready as it is made. An attempt that waits
// for a time first (a retry's Backoff, a tick) enters the queue when it comes due, without one.
// Priority orders a queue; it does not make room: with free workers, every ready attempt is
// claimed at once whatever its priority.
func Priority(p int) NodeOption {
	return func(o *nodeOptions) {
		o.settings.Priority = p
		o.given[optPriority] = true
	}
}

// Result names the node of a Map's or Child's child graph whose value is a child's result. It
// applies to map nodes only.
func Result(node string) NodeOption {
	return func(o *nodeOptions) {
		o.settings.Result = node
		o.given[optResult] = true
	}
}

// CollectFailures makes a Map or Child complete when its children have all completed or failed
// for good, with the failure of a child as its result: {"failed": true, "execution": id,
// "error": text}. Without it, the first child that fails for good fails the node. It applies to
// map nodes only.
func CollectFailures() NodeOption {
	return func(o *nodeOptions) {
		o.settings.CollectFailures = true
		o.given[optCollectFailures] = true
	}
}

// RateLimit allows at most n attempts of the node to start within any window of length per,
// across all replicas and executions: per key with RateKey (per customer, per API account), or
// for the whole node without. It is a sliding window: for any instant t, at most n attempts
// started in (t-per, t]. An attempt starts when a replica claims it (its Computations
// ClaimedAt); a retry is an attempt of its own, and starts again.
//
// An attempt that would exceed the limit waits PENDING, in the order it became ready (its
// priority's head start included, see Priority), and is made AVAILABLE once the window has room:
// only time frees room, never the end of an attempt, so a limit of 100 per minute holds however
// fast the calls return. The promotion counts an attempt it made AVAILABLE as started until a
// replica claims it, so that a claim that comes late cannot crowd a window. No write announces
// that a window has room again: a replica whose promotion found a window full polls when it frees,
// rather than at its PollInterval. An attempt that a stopping replica hands back unrun (see
// Runtime.Stop) counts again from its next claim, and no longer from the one it gave back.
//
// With ConcurrencyKey or MaxParallel on the same node, an attempt waits until all of them let it
// start. RateLimit limits starts, MaxParallel limits attempts available or running at once: use
// both to bound the calls in flight as well as their rate.
//
// Every replica that runs a graph version with a rate limit must run a release that knows
// RateLimit: a replica of an earlier release would promote the waiting attempts as though
// nothing limited them. Adopt it once every replica runs this release.
func RateLimit(n int, per time.Duration, opts ...RateOption) NodeOption {
	var r rateOptions
	for _, o := range opts {
		o(&r)
	}
	return func(o *nodeOptions) {
		o.settings.RateLimit, o.settings.RatePer = n, per
		o.settings.RateKey = r.key
		o.given[optRateLimit] = true
		o.rateKeyGiven = r.keyGiven
	}
}

// rateOptions collects the options given to RateLimit.
type rateOptions struct {
	key      func(Values) string
	keyGiven bool
}

// RateOption configures a RateLimit.
type RateOption func(*rateOptions)

// RateKey gives each key its own RateLimit: fn derives the key from the execution's values, such
// as the customer or the API account that the node calls for. The empty key is a key like any
// other. A key is checked and stored as a ConcurrencyKey is: valid UTF-8 with no NUL character, at
// most 1024 bytes; one that is not fails the Set or Start that would create the node's attempt,
// and changes nothing, or, computed after a completion or a sweep, fails the node, as a panic of
// fn does.
func RateKey(fn func(Values) string) RateOption {
	return func(o *rateOptions) {
		o.key, o.keyGiven = fn, true
	}
}

// UpdateRevisionOnChange makes a mutate node give each target whose value it changed a new
// revision, so that the target's dependents recompute. It applies to Mutate nodes only, and no
// target may be upstream of the mutate itself.
func UpdateRevisionOnChange() NodeOption {
	return func(o *nodeOptions) {
		o.settings.UpdateRevisionOnChange = true
		o.given[optUpdateRevisionOnChange] = true
	}
}

// MaxEntries sets how many entries a historian keeps, newest first. It applies to Historian
// nodes only. Default 100.
func MaxEntries(n int) NodeOption {
	return func(o *nodeOptions) {
		o.settings.MaxEntries = n
		o.given[optMaxEntries] = true
	}
}

// SaveEvent is passed to OnSave callbacks.
type SaveEvent struct {
	// ExecutionID is the execution the node belongs to.
	ExecutionID string
	// Graph is the graph's name.
	Graph string
	// Node is the node's name.
	Node string
	// Value is the saved value. It is the zero Value when Err is not nil.
	Value Value
	// Err is not nil when the node failed for good.
	Err error
}

// graphOptions collects the options given to New.
type graphOptions struct {
	onSave             func(ctx context.Context, e SaveEvent)
	onSaveGiven        bool
	idPrefix           string
	idPrefixGiven      bool
	completesWhen      Gate
	completesWhenGiven bool
	singleton          bool
}

// Option configures a graph.
type Option func(*graphOptions)

// WithOnSave sets a callback that runs, after the commit, once per change of any node's value,
// and once with the error when a node fails for good. It runs after the node's own OnSave.
func WithOnSave(fn func(ctx context.Context, e SaveEvent)) Option {
	return func(o *graphOptions) {
		o.onSave = fn
		o.onSaveGiven = true
	}
}

// IDPrefix sets the prefix of the graph's execution IDs: 1 to 16 characters of A-Z, a-z, 0-9
// and _. The default is the first three letters or digits of the graph's name, in upper case,
// or "EXE" when the name has none.
func IDPrefix(p string) Option {
	return func(o *graphOptions) {
		o.idPrefix = p
		o.idPrefixGiven = true
	}
}

// CompletesWhen sets the gate that says when an execution counts as completed, for lifecycle
// notifications: it holds and nothing is pending or running.
func CompletesWhen(g Gate) Option {
	return func(o *graphOptions) {
		o.completesWhen = g
		o.completesWhenGiven = true
	}
}

// SingletonKey is the key that every execution of a Singleton graph holds.
const SingletonKey = "singleton"

// Singleton makes the graph a singleton: at most one unarchived execution of it exists, across
// every replica and version, as Journey's find_or_start gives. Every Start of it is a keyed start
// with the fixed key SingletonKey: the first starts the execution, and the others, concurrent or
// later, return that one (Execution.Existing) without applying their values, until it is
// archived, which frees the key. A Start of it given a key of its own is refused.
func Singleton() Option {
	return func(o *graphOptions) { o.singleton = true }
}
