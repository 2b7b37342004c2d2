package persistence

import (
	"context"
	"encoding/json"
	"errors"
	"slices"

	"go.opentelemetry.io/otel/trace"

	"github.com/journey-go/journey/persistence/machine"
)

// promoteWithin promotes, in t, the gated work that the plans ps of a batch of outcomes made due or
// freed a slot for: their ends free the slots that the next attempts wait for. Their node rows go
// first, as the promotion reads them. A promotion lock that another transaction holds is left for
// after the commit (afterCommit).
func (s *Store) promoteWithin(ctx context.Context, t *txn, ps []*machine.Plan) error {
	if !slices.ContainsFunc(ps, (*machine.Plan).Promote) {
		return nil
	}
	if err := t.send(ctx, t.tail...); err != nil {
		return err
	}
	t.tail = nil
	promoted, err := s.promoteGated(ctx, t, ps[0].Now(), false)
	switch {
	case errors.Is(err, errPromotionBusy):
		t.promoteLater = !ps[0].PromoteByCaller()
		return nil
	case err != nil:
		return err
	}
	byID := make(map[string]*machine.Plan, len(ps))
	for _, p := range ps {
		byID[p.Exec().ID] = p
	}
	for _, r := range promoted {
		if p := byID[r.ExecutionID]; p != nil {
			p.Promoted(r.Node, r.Rev) // the write's own: its revision is the execution's after the promotion
		}
	}
	if len(promoted) > 0 {
		t.notes = append(t.notes, PayloadWork)
	}
	return nil
}

// Outcome is how one claimed attempt ended, for Record.
type Outcome struct {
	C *Computation
	// Err is the attempt's failure; nil means it succeeded with Result.
	Err error
	// Result is the JSON of the value computed.
	Result json.RawMessage
	// Used holds the upstream revisions the function read.
	Used map[string]int64
	// Span is the attempt's span: the attempts its outcome creates (a retry, the nodes downstream)
	// link to it.
	Span trace.SpanContext
}

// Record records the outcomes of many attempts in one transaction, each fenced by its claim, and
// returns, for each, nil or ErrClaimLost: a lost claim drops its own outcome, not the others. A
// success stores its value unless the node's gate no longer holds (the attempt is then CANCELED);
// a failure is retried with the node's backoff while attempts remain and it is not permanent, else
// the node has failed. Every execution concerned is then advanced.
//
// It takes two round trips: the first locks the executions of the batch, in (lane, id) order, and
// loads their node rows; the rules record the outcomes, each fenced by its node row (still
// RUNNING under the same replica and token: no writer but the heartbeats changes a node row
// without its execution's lock), in the order of the batch, and advance each execution after each
// of its outcomes; the second writes what changed, a statement per table for the whole batch,
// with the COMMIT. An error of the transaction is returned for the whole batch: nothing was
// written. The transaction waits for no lock longer than the store's lock timeout: a batch must
// not stall behind one execution that another transaction holds, while the heartbeats of its
// attempts report them busy. It then fails with ErrLockTimeout, naming what it waited for.
func (s *Store) Record(ctx context.Context, outs []Outcome) ([]error, error) {
	lost := make([]error, len(outs))
	err := s.inTxn(ctx, s.workDB(), func(ctx context.Context, t *txn) error {
		ids := make([]string, len(outs))
		for i, o := range outs {
			ids[i] = o.C.ExecutionID
		}
		xs, now, err := s.load(ctx, t, ids, []step{{s.lockTimeoutSQL(), nil, nil}}, nil)
		if err != nil {
			return err
		}
		byID := make(map[string]*machine.Loaded, len(xs))
		for _, x := range xs {
			byID[x.Exec.ID] = x
		}
		plans := map[string]*machine.Plan{}
		var ps []*machine.Plan // in the order of their first outcome
		for i, o := range outs {
			x := byID[o.C.ExecutionID]
			env := s.env(trace.ContextWithSpanContext(ctx, o.Span), now, x.GraphKey)
			p := plans[x.Exec.ID]
			if p == nil {
				p = machine.Begin(x, env)
			}
			err := p.Step(machine.Outcome{Claim: o.C, Err: o.Err, Result: o.Result, Used: o.Used}, env)
			if errors.Is(err, ErrClaimLost) {
				lost[i] = err
				continue
			}
			if err != nil {
				return err
			}
			if c := p.Latest(o.C.Node); c != nil && c.ID == o.C.ID {
				o.C.State, o.C.Error, o.C.ComputedWith = c.State, c.Error, c.ComputedWith // as recorded
			} else {
				for _, c := range p.Superseded() {
					if c.ID == o.C.ID {
						o.C.State, o.C.Error, o.C.ComputedWith = c.State, c.Error, c.ComputedWith
					}
				}
			}
			if plans[x.Exec.ID] == nil {
				plans[x.Exec.ID] = p
				ps = append(ps, p)
			}
		}
		if len(ps) == 0 {
			return nil
		}
		// Ending attempts, the write needs no mark: the roll finds them by their finished_at.
		t.promoteHere = true
		if err := s.finish(ctx, t, ps, true); err != nil {
			return err
		}
		return s.promoteWithin(ctx, t, ps)
	})
	if hasCode(err, lockNotAvailable) {
		return nil, s.recordGaveUp(ctx, outs, err)
	}
	if err != nil {
		return nil, err
	}
	return lost, nil
}
