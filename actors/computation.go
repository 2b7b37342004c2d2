package actors

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/journey-go/journey/graph"
	"github.com/journey-go/journey/internal/telemetry"
	"github.com/journey-go/journey/persistence"
)

// writeTimeout bounds one try of the transaction that records an attempt's outcome.
const writeTimeout = 30 * time.Second

// Outcomes of an attempt that did not end here, as ComputationFinished reports them.
const (
	// OutcomeDropped: the claim was lost, and nothing was written.
	OutcomeDropped = "claim lost: result dropped"
	// OutcomeReleased: the replica stopped while the function ran, and the attempt went back to
	// AVAILABLE once the function had returned, without consuming an attempt.
	OutcomeReleased = "released: the replica stopped"
	// OutcomeOrphaned: the replica's Stop stopped waiting before the function returned. The
	// attempt stays RUNNING until its heartbeat deadline passes, and nothing was written.
	OutcomeOrphaned = "orphaned: the replica stopped before the function returned"
	// OutcomeWaiting: a map node started its children, or found them running, and waits for them
	// without a claim (WAITING): the end of the last makes it AVAILABLE again.
	OutcomeWaiting = "waiting for its children"
)

// releaseTimeout bounds the release of an attempt at a stop.
const releaseTimeout = 10 * time.Second

// Hooks are test-only knobs. The zero value changes nothing.
type Hooks struct {
	// SuppressHeartbeat, when it returns true, makes the heartbeats skip their write for c, as if
	// the process had frozen, while the computation keeps running.
	SuppressHeartbeat func(c *persistence.Computation) bool
	// ComputationStarted is called from a computation's Started with its watchdog's PID.
	ComputationStarted func(c *persistence.Computation, self, watchdog *actor.PID)
	// ComputationFinished is called when a computation's function has returned and its outcome
	// was recorded, or dropped ("claim lost: result dropped"), often on the completer's
	// goroutine: it must not block.
	ComputationFinished func(c *persistence.Computation, outcome string)
	// Heartbeating is called by the replica's heartbeats before each heartbeat statement,
	// with the claims it extends.
	Heartbeating func(refs []persistence.ClaimRef)
	// Claiming is called by the dispatcher before each claim, with the claim's context. A test
	// blocks in it to make the dispatcher busy, as in a slow claim.
	Claiming func(ctx context.Context)
	// Claimed is called by the dispatcher after each claim round that ran a claim, with the
	// number of attempts claimed, once the writes may again reserve its free workers.
	Claimed func(n int)
}

// computationEnv is what every computation actor of a replica shares.
type computationEnv struct {
	store     *persistence.Store
	replicaID string
	logger    *slog.Logger
	base      context.Context // the parent of every function's context
	running   *sync.WaitGroup // the claimed attempts whose goroutine has not ended
	// orphaned is set once the replica's Stop no longer waits for the functions: those still
	// running write nothing when they return.
	orphaned   *atomic.Bool
	heartbeats *actor.PID // the replica's heartbeats, with which the watchdogs register
	completer  *actor.PID // records the outcomes
	// workers run the mailboxes of the computations and their watchdogs.
	workers *workers
	// propsOnce makes the options of the computations' and the watchdogs' props, once: made for
	// each spawn, they were six of its allocations.
	propsOnce                  sync.Once
	computationOpts, watchOpts []actor.PropsOption
	// flight are the outcomes handed to the completer and not answered yet.
	flight *inflight
	system *actor.ActorSystem
	hooks  Hooks
	// maxValueBytes caps the JSON encoding of a result.
	maxValueBytes int
	tel           *telemetry.Telemetry
}

// claimLost tells a computation that its claim is gone or can no longer be kept.
type claimLost struct{ reason string }

// executionCanceled tells a computation that its execution was canceled: its function's context
// is canceled, and its outcome, once it returns, ends the attempt CANCELED (its slot is held
// until then).
type executionCanceled struct{}

// finished tells a computation that its goroutine has ended and recorded what it could.
type finished struct{ reason string }

// functionReturned tells the dispatcher that the function of the computation actor id has
// returned: its worker is free while the outcome is recorded.
type functionReturned struct{ id string }

// computation is the actor of one claimed attempt.
type computation struct {
	env      *computationEnv
	c        *persistence.Computation
	g        *graph.Graph
	node     graph.Node
	cancel   context.CancelFunc
	watchdog *actor.PID
	lost     atomic.Bool // set once the claim is lost: the goroutine then writes nothing
	stopping bool
	reason   string // why the actor ended; Terminated does not say
	self     *actor.PID
	// The attempt's span, its context and when it began: run sets them, and end, which runs once
	// the outcome is recorded, ends the span.
	span     trace.Span
	ctx      context.Context
	start    time.Time
	parent   *actor.PID // nil for a computation spawned alone, as tests do
	returned atomic.Bool
	// canceled is set once the execution is known canceled (executionCanceled): the function's
	// context ends, and its outcome is recorded all the same, as the attempt's end.
	canceled atomic.Bool
}

// tellReturned tells the dispatcher, once, that the function has returned, and the heartbeats,
// which keep the attempt's deadline from then on, until its outcome is recorded.
func (a *computation) tellReturned() {
	if !a.returned.CompareAndSwap(false, true) {
		return
	}
	if a.parent != nil {
		a.env.system.Root.Send(a.parent, functionReturned{id: a.self.Id})
	}
	if a.env.heartbeats != nil {
		a.env.system.Root.Send(a.env.heartbeats, claimReturned{id: a.c.ID})
	}
}

// spawnComputation spawns the actor of a claimed attempt. The attempt counts as running from
// here, not from the actor's Started, so that a stop that waits for the running functions waits
// for every attempt claimed before it.
func spawnComputation(parent actor.SpawnerContext, env *computationEnv, c *persistence.Computation, g *graph.Graph, n graph.Node) *actor.PID {
	env.running.Add(1)
	return parent.Spawn(actor.PropsFromProducer(func() actor.Actor {
		return &computation{
			env: env, c: c, g: g, node: n,
		}
	}, env.props(false)...))
}

// props returns the options of the props of a computation's actor, or of its watchdog's: on the
// replica's workers, in a computation's mailbox; a computation stops when it fails.
func (env *computationEnv) props(watchdog bool) []actor.PropsOption {
	env.propsOnce.Do(func() {
		env.watchOpts = []actor.PropsOption{actor.WithDispatcher(env.workers), actor.WithMailbox(newMailbox)}
		env.computationOpts = append([]actor.PropsOption{actor.WithSupervisor(stopStrategy)}, env.watchOpts...)
	})
	if watchdog {
		return env.watchOpts
	}
	return env.computationOpts
}

// Receive implements actor.Actor.
func (a *computation) Receive(ctx actor.Context) {
	switch msg := ctx.Message().(type) {
	case *actor.Started:
		runCtx, cancel := context.WithCancel(a.env.base)
		a.cancel = cancel
		set := a.node.Settings()
		a.watchdog = ctx.Spawn(watchdogProps(a.env, a.c, set.HeartbeatInterval, set.HeartbeatTimeout))
		if h := a.env.hooks.ComputationStarted; h != nil {
			h(a.c, ctx.Self(), a.watchdog)
		}
		a.self, a.parent = ctx.Self(), ctx.Parent()
		go a.run(runCtx)
	case finished:
		a.reason = msg.reason
		ctx.Stop(ctx.Self())
	case claimLost:
		a.lose(msg.reason)
		ctx.Stop(ctx.Self())
	case executionCanceled:
		if a.canceled.CompareAndSwap(false, true) {
			a.log(slog.LevelInfo, "computation canceled: its execution was canceled")
			a.cancel()
		}
	case *actor.Terminated:
		if msg.Who.Equal(a.watchdog) && !a.stopping {
			a.lose("watchdog ended")
			ctx.Stop(ctx.Self())
		}
	case *actor.Stopping:
		a.stopping = true
		a.cancel()
	case *actor.Stopped:
		a.cancel()
		a.log(slog.LevelDebug, "computation actor stopped", "reason", a.reason)
	}
}

// log logs msg with args and the attempt's attributes, if the level is enabled: the attributes
// are put together only then, as most attempts log nothing.
func (a *computation) log(level slog.Level, msg string, args ...any) {
	ctx, h := context.Background(), a.env.logger.Handler()
	if !h.Enabled(ctx, level) {
		return
	}
	var pc [1]uintptr
	runtime.Callers(2, pc[:]) // the caller's line, for AddSource
	r := slog.NewRecord(time.Now(), level, msg, pc[0])
	r.Add("service", "computation", "execution_id", a.c.ExecutionID, "node", a.c.Node,
		"computation_id", a.c.ID, "attempt", a.c.Attempt)
	r.Add(args...)
	_ = h.Handle(ctx, r)
}

func (a *computation) lose(reason string) {
	if a.reason == "" {
		a.reason = reason
	}
	a.lost.Store(true)
	a.cancel()
	a.log(slog.LevelWarn, "computation canceled", "reason", reason)
}

// run executes the function, in the attempt's span, which links to the write that created the
// attempt, and records its outcome through the fenced store methods. It returns once the outcome
// is handed to the completer: the goroutine does not wait for its answer, and end runs once it
// comes (see recorded).
func (a *computation) run(ctx context.Context) {
	a.start = time.Now()
	a.ctx, a.span = a.env.tel.Tracer.Start(ctx, "journey.attempt", spanOptions(a.c.Traceparent)...)
	// The attributes are made only for a span that keeps them: a sampler sees the span's name and
	// links, and a no-op tracer costs nothing more.
	if a.span.IsRecording() {
		a.span.SetAttributes(append(telemetry.NodeAttrs(a.g, a.c.Node), telemetry.KeyExecution.String(a.c.ExecutionID),
			telemetry.KeyComputation.Int64(a.c.ID), telemetry.KeyAttempt.Int(a.c.Attempt), telemetry.KeyReplica.String(a.env.replicaID))...)
	}
	if p := a.attempt(a.ctx); p != nil {
		a.submit(p)
	}
}

// rootSpan is the options of an attempt's span whose creation was not traced.
var rootSpan = []trace.SpanStartOption{trace.WithNewRoot()}

// spanOptions are the options of an attempt's span: a new root, linked to the write that created
// the attempt, if it was traced.
func spanOptions(traceparent *string) []trace.SpanStartOption {
	if links := telemetry.Links(traceparent); links != nil {
		return []trace.SpanStartOption{trace.WithNewRoot(), trace.WithLinks(links...)}
	}
	return rootSpan
}

// end ends the attempt here, once: reason is what happened, for the log; outcome is for the
// metrics, "" if the attempt did not end here (it was released, or its outcome could not be
// recorded and the sweeper will abandon it); err is recorded on the span. It tells the actor,
// which then stops.
func (a *computation) end(reason, outcome string, err error) {
	if outcome != "" {
		a.env.tel.Ran(a.ctx, a.g, a.c.Node, outcome, time.Since(a.start))
		if a.span.IsRecording() {
			a.span.SetAttributes(telemetry.KeyOutcome.String(outcome))
		}
	}
	if err != nil {
		a.span.RecordError(err)
		a.span.SetStatus(codes.Error, reason)
	}
	a.span.End()
	if h := a.env.hooks.ComputationFinished; h != nil {
		h(a.c, reason)
	}
	a.env.system.Root.Send(a.self, finished{reason: reason})
	a.env.running.Done()
}

// attempt runs the function, and returns its outcome to record, or nil once it has ended the
// attempt without one (the claim was lost, or the replica stops and released it).
func (a *computation) attempt(ctx context.Context) *pendingOutcome {
	if ctx.Err() != nil {
		switch {
		case a.lost.Load():
			a.end(OutcomeDropped, telemetry.OutcomeClaimLost, persistence.ErrClaimLost)
			return nil
		case a.canceled.Load() && a.env.base.Err() == nil:
			return a.record(ctx, ctx.Err(), nil, nil) // ends the attempt CANCELED
		}
		a.end(a.release()) // the replica stops
		return nil
	}
	vals := a.c.ClaimedValues()
	used := persistence.Signature(a.node, vals)
	result, err := a.invoke(persistence.WithAttempt(ctx, a.c), vals)
	switch {
	case errors.Is(err, errWaiting):
		a.tellReturned()
		a.end(OutcomeWaiting, "", nil)
		return nil
	case errors.Is(err, persistence.ErrClaimLost):
		a.tellReturned()
		a.end(OutcomeDropped, telemetry.OutcomeClaimLost, err)
		return nil
	}
	if err != nil {
		if a.env.base.Err() != nil && !a.lost.Load() {
			// The replica stops: the function was interrupted, not failed. A result that it
			// returned all the same is recorded below.
			a.end(a.release())
			return nil
		}
		return a.record(ctx, err, nil, nil)
	}
	raw, err := json.Marshal(result)
	if err != nil {
		return a.record(ctx, graph.Permanent(fmt.Errorf("the result of %q is not JSON-encodable: %w", a.c.Node, err)), nil, nil)
	}
	if err := persistence.CheckValue(raw, a.env.maxValueBytes); err != nil {
		return a.record(ctx, graph.Permanent(fmt.Errorf("the result of %q cannot be stored: %w", a.c.Node, err)), nil, nil)
	}
	return a.record(ctx, nil, raw, used)
}

// invoke calls the user's function, turning a panic into an error.
func (a *computation) invoke(ctx context.Context, vals graph.Values) (result any, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("computation of %q panicked: %v", a.c.Node, r)
		}
	}()
	switch a.node.Kind() {
	case graph.KindCompute, graph.KindMutate:
		return a.node.Func()(ctx, vals)
	case graph.KindMap:
		return a.mapChildren(ctx, vals)
	case graph.KindTickOnce, graph.KindTickRecurring:
		t, err := a.node.Tick()(ctx, vals)
		if err != nil {
			return nil, err
		}
		return persistence.TickValue(t), nil
	default:
		return nil, graph.Permanent(fmt.Errorf("node kind %s does not run a function", a.node.Kind()))
	}
}

// pendingOutcome is an outcome on its way to the database, with what its attempt's end reports
// once it is recorded.
type pendingOutcome struct {
	outcome
	wait time.Duration // before the next try, if this one fails
	// held: the last try waited past the lock timeout for the execution, which another
	// transaction holds: the next tries go alone, on goroutines of their own, and hold up no
	// batch of the completer.
	held   bool
	reason string
	metric string // the outcome for the metrics
	cause  error
}

// record returns the outcome to write. The write gets a context of its own so that a graceful
// stop still records finished work; the fence rejects it if the claim was released or reclaimed
// meanwhile. A failed write (the database restarting, or an execution held by an application's
// transaction, say) is tried again, however long it takes, until it succeeds or the claim is
// lost: the actor, and its watchdog, which keeps the claim's heartbeat, live on meanwhile, so that
// no sweep takes an attempt whose work is done for an abandoned one. The watchdog ends it if the
// claim is lost or can no longer be kept (the database out of reach for longer than the heartbeat
// timeout). One that the database refuses (persistence.Refused) is not tried again.
func (a *computation) record(ctx context.Context, cause error, raw json.RawMessage, used map[string]int64) *pendingOutcome {
	p := &pendingOutcome{wait: 50 * time.Millisecond, reason: "succeeded", metric: telemetry.OutcomeSucceeded, cause: cause}
	p.outcome = outcome{ctx: ctx,
		out:  persistence.Outcome{C: a.c, Err: cause, Result: raw, Used: used, Span: trace.SpanContextFromContext(ctx)},
		done: func(err error) { a.recorded(p, err) }}
	if cause != nil {
		p.reason, p.metric = "failed: "+cause.Error(), telemetry.OutcomeFailed
	}
	a.tellReturned() // the actor, and its watchdog, live on until the outcome is recorded
	return p
}

// submit hands p to the completer, unless the claim is known to be lost or the replica no longer
// waits for its attempts.
func (a *computation) submit(p *pendingOutcome) {
	switch {
	case a.lost.Load():
		a.end(OutcomeDropped, telemetry.OutcomeClaimLost, persistence.ErrClaimLost)
	case a.env.orphaned.Load():
		a.end(OutcomeOrphaned, "", nil)
	case p.held:
		p.answered.Store(false) // a try again
		go p.alone(a.env.store)
	default:
		p.answered.Store(false) // a try again
		a.env.hand(&p.outcome)
	}
}

// recorded takes the answer to p's write, on the goroutine that wrote it (the completer's): it
// ends the attempt, or submits p again after a wait.
func (a *computation) recorded(p *pendingOutcome, err error) {
	if err != nil {
		if refused := (*persistence.RecordedAsFailure)(nil); errors.As(err, &refused) {
			err, p.cause = nil, refused.Cause
			p.reason, p.metric = "failed: "+p.cause.Error(), telemetry.OutcomeFailed
		}
	}
	switch {
	case err == nil:
		if p.cause != nil {
			a.log(slog.LevelInfo, "attempt failed", "error", p.cause)
		}
		a.end(p.reason, p.metric, p.cause)
		return
	case errors.Is(err, persistence.ErrClaimLost):
		a.log(slog.LevelInfo, "result dropped: the claim was lost", "outcome", p.reason)
		a.end(OutcomeDropped, telemetry.OutcomeClaimLost, err)
		return
	case persistence.Refused(err): // refused as it is, and as a failure: trying again cannot help
		a.log(slog.LevelError, "the database refused the outcome; the sweeper will retry the attempt", "error", err)
		a.end("recording failed: "+err.Error(), "", err)
		return
	}
	wait := p.wait
	p.wait = min(2*p.wait, 2*time.Second)
	p.held = errors.Is(err, persistence.ErrLockTimeout)
	a.log(slog.LevelWarn, "recording the outcome failed; retrying", "error", err, "outcome", p.reason, "retry_in", wait)
	time.AfterFunc(wait, func() { a.submit(p) })
}

// release hands the attempt back to AVAILABLE, at a stop, once its function has returned (or
// before it ran), so that another replica runs it at once without consuming an attempt. An
// attempt whose function returns after the stop stopped waiting writes nothing: it stays RUNNING
// until its heartbeat deadline passes, as a crashed replica's would.
func (a *computation) release() (string, string, error) {
	a.tellReturned()
	if a.env.orphaned.Load() {
		return OutcomeOrphaned, "", nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	n, err := a.env.store.Release(ctx, a.env.replicaID, []persistence.ClaimRef{a.c.Ref()})
	switch {
	case err != nil:
		a.log(slog.LevelWarn, "releasing the attempt at stop failed; it is taken over once its heartbeat deadline passes", "error", err)
		return "release failed: " + err.Error(), "", err
	case n == 0:
		return OutcomeDropped, telemetry.OutcomeClaimLost, persistence.ErrClaimLost
	}
	return OutcomeReleased, "", nil
}
