package journey

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

// groupMax is the most calls that one grouped write takes.
const groupMax = 200

// writeLinger is the linger of the Sets and Starts under load (see group.linger). journey bench
// -rate 1000, alternated: 250µs took the p50 from Set to Get from 5.2–5.5 ms to 4.5–4.6 ms, and
// the transactions per computation from 1.6 to 1.4; 500µs did no better. Lingering only before a
// write that leads, not before one that takes what queued behind the last, gained nothing.
const writeLinger = 250 * time.Microsecond

// group gathers concurrent calls into one write, as a database's group commit does: while a
// write is under way, the calls that come queue, and the next write takes them all. A call that
// finds no write under way goes at once, alone: when the replica is idle, grouping costs nothing.
// Under load, a write may first linger for company, as PostgreSQL's commit_delay does: see
// linger.
//
// A write that fails for a group of more than one is made again for each call alone, so that
// each gets its own answer: one bad input fails its own call, not the others. A write whose
// COMMIT got no answer may have gone through: only the calls that again allows are made again,
// and the others get its error. A call made alone whose COMMIT got no answer is made again once,
// if again allows.
type group[In, Out any] struct {
	// write makes the writes of ins in one transaction, and returns their results in order.
	write func(ctx context.Context, ins []In) ([]Out, error)
	// again reports whether in's write may be made again once a write that held it got no
	// answer to its COMMIT (ErrOutcomeUnknown): whether it finds what that write made, if it
	// did, rather than make it twice. Nil: none may.
	again func(in In) bool
	// max is the most calls one write takes.
	max int
	// linger is how long a write waits for more calls to join those queued, if the group is
	// busy: a write that had company (more than one call, or calls queued behind it) ended less
	// than 4 lingers ago. A caller alone, even one that writes again and again, never lingers;
	// nor does a write once max calls wait. 0 never lingers.
	linger time.Duration

	mu      sync.Mutex
	queue   []*groupCall[In, Out]
	writing bool
	busy    time.Time     // until when a call that leads lingers
	full    chan struct{} // closed once max calls wait, while one lingers
}

type groupCall[In, Out any] struct {
	ctx  context.Context
	in   In
	out  Out
	err  error
	done chan struct{}
}

// do makes in's write, with the others queued beside it, and returns its result. If ctx ends
// while in is still queued, it is withdrawn, and nothing is written; once its write has begun,
// do returns ctx's error, and the write goes on for the others.
func (g *group[In, Out]) do(ctx context.Context, in In) (Out, error) {
	c := &groupCall[In, Out]{ctx: ctx, in: in, done: make(chan struct{})}
	g.mu.Lock()
	g.queue = append(g.queue, c)
	lead := !g.writing
	g.writing = true
	if g.full != nil && len(g.queue) >= g.max {
		close(g.full)
		g.full = nil
	}
	g.mu.Unlock()
	if lead {
		g.writeQueued()
	} else {
		select {
		case <-c.done:
		case <-ctx.Done():
			// Withdrawn, nothing is written; else the outcome is unknown, as when a statement's
			// context ends while the server runs it.
			g.withdraw(c)
			var zero Out
			return zero, ctx.Err()
		}
	}
	return c.out, c.err
}

// joined returns a context that ends once the contexts of every call have, so that the write
// goes on while any caller waits for it, and the function that releases it.
func joined[In, Out any](calls []*groupCall[In, Out]) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.WithoutCancel(calls[0].ctx))
	var left atomic.Int64
	left.Store(int64(len(calls)))
	stops := make([]func() bool, len(calls))
	for i, c := range calls {
		stops[i] = context.AfterFunc(c.ctx, func() {
			if left.Add(-1) == 0 {
				cancel()
			}
		})
	}
	return ctx, func() {
		for _, stop := range stops {
			stop()
		}
		cancel()
	}
}

// withdraw takes c out of the queue, and reports whether it was still there.
func (g *group[In, Out]) withdraw(c *groupCall[In, Out]) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	for i, q := range g.queue {
		if q == c {
			g.queue = append(g.queue[:i], g.queue[i+1:]...)
			return true
		}
	}
	return false
}

// lingerIfBusy waits for the linger, or until max calls wait, if the group is busy.
func (g *group[In, Out]) lingerIfBusy() {
	g.mu.Lock()
	if g.linger <= 0 || !time.Now().Before(g.busy) || len(g.queue) >= g.max {
		g.mu.Unlock()
		return
	}
	full := make(chan struct{})
	g.full = full
	g.mu.Unlock()
	t := time.NewTimer(g.linger)
	defer t.Stop()
	select {
	case <-t.C:
	case <-full:
	}
	g.mu.Lock()
	g.full = nil
	g.mu.Unlock()
}

// writeQueued makes one write of what is queued, after the linger if the group is busy, the
// leader's call among it, and hands what
// queued meanwhile to a goroutine of its own, so that the leader returns as soon as its own write
// has.
func (g *group[In, Out]) writeQueued() {
	g.lingerIfBusy()
	g.mu.Lock()
	n := min(len(g.queue), g.max)
	calls := g.queue[:n:n]
	g.queue = g.queue[n:]
	g.mu.Unlock()

	g.writeAll(calls)

	g.mu.Lock()
	more := len(g.queue) > 0
	if len(calls) > 1 || more {
		g.busy = time.Now().Add(4 * g.linger)
	}
	g.writing = more
	g.mu.Unlock()
	if more {
		go g.writeQueued()
	}
}

// writeAll writes calls together, or, if that fails, each alone, and answers each.
func (g *group[In, Out]) writeAll(calls []*groupCall[In, Out]) {
	defer func() {
		for _, c := range calls {
			close(c.done)
		}
	}()
	if len(calls) > 1 {
		ins := make([]In, len(calls))
		for i, c := range calls {
			ins[i] = c.in
		}
		ctx, release := joined(calls)
		outs, err := g.write(ctx, ins)
		release()
		if err == nil {
			for i, c := range calls {
				c.out = outs[i]
			}
			return
		}
		if errors.Is(err, ErrOutcomeUnknown) {
			var again []*groupCall[In, Out]
			for _, c := range calls {
				if g.again != nil && g.again(c.in) {
					again = append(again, c)
				} else {
					c.err = err
				}
			}
			calls = again
		}
	}
	for _, c := range calls {
		outs, err := g.write(c.ctx, []In{c.in})
		if errors.Is(err, ErrOutcomeUnknown) && c.ctx.Err() == nil && g.again != nil && g.again(c.in) {
			outs, err = g.write(c.ctx, []In{c.in}) // once more: it finds what the first try made
		}
		if err == nil {
			c.out = outs[0]
		}
		c.err = err
	}
}
