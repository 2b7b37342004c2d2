package persistence

import (
	"context"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/journey-go/journey/persistence/machine"
)

// A write in an application's transaction (SetTx, StartTx, a schedule's fire) commits when the
// application commits, which the store does not see. What its own writes do once they have
// committed (afterCommit: OnSave, a map node's wake, a parent's cascade, the advance that a Set in a
// REPEATABLE READ or SERIALIZABLE transaction leaves for after it) waits here, keyed by the
// transaction's id, until PostgreSQL says the transaction has committed (pg_xact_status) or
// rolled back. A goroutine looks, more and more seldom, while anything waits, and at once when a
// notification of the store's channel comes (Store.Heard), which a commit sends. A replica that
// stops drops what still waits: the sweep wakes the map nodes and carries the cascades (see
// repair), WakeDue advances the deferred Sets, and OnSave fires at most once, as after any write
// of a replica that dies after its commit.

// callerCommits are the writes in applications' transactions that wait for their commit.
type callerCommits struct {
	s       *Store
	mu      sync.Mutex
	pending map[string]*txn // by transaction id
	running bool
	stopped bool
	heard   chan struct{} // a notification came: look now
	idle    *sync.Cond    // signalled when the goroutine ends
}

// The goroutine looks first after callersFirstLook, then less and less often, up to
// callersLongestLook apart.
const (
	callersFirstLook   = 5 * time.Millisecond
	callersLongestLook = time.Second
)

func newCallerCommits(s *Store) *callerCommits {
	c := &callerCommits{s: s, pending: map[string]*txn{}, heard: make(chan struct{}, 1)}
	c.idle = sync.NewCond(&c.mu)
	return c
}

// afterCallerCommit reports whether t, a write in an application's transaction, leaves work for
// after its commit.
func (t *txn) afterCallerCommit() bool {
	if len(t.wakes) > 0 || len(t.deferred) > 0 {
		return true
	}
	for _, p := range t.plans {
		if len(p.Saved()) > 0 || len(p.Warnings()) > 0 || p.Cascade().Any() {
			return true
		}
	}
	return false
}

// xidStep reads the id of t's transaction into *xid, which pg_xact_status takes.
func xidStep(xid *string) step {
	return step{"SELECT pg_current_xact_id()::text", nil, func(br pgx.BatchResults) error {
		return br.QueryRow().Scan(xid)
	}}
}

// wait keeps t, whose transaction is xid, until that transaction ends.
func (c *callerCommits) wait(xid string, t *txn) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return
	}
	c.pending[xid] = t
	if !c.running {
		c.running = true
		go c.run()
	}
}

// Heard tells the store that a notification of its channel came: a transaction of an
// application's may have committed, and what waits for it is looked at now.
func (s *Store) Heard() {
	select {
	case s.callers.heard <- struct{}{}:
	default:
	}
}

// run looks at the transactions that writes wait for, until none is left.
func (c *callerCommits) run() {
	look := callersFirstLook
	timer := time.NewTimer(look)
	defer timer.Stop()
	for {
		select {
		case <-timer.C:
			look = min(2*look, callersLongestLook)
		case <-c.heard:
			look = callersFirstLook
			if !timer.Stop() {
				<-timer.C
			}
		}
		if !c.settle() {
			return
		}
		timer.Reset(look)
	}
}

// settle does what waits for the transactions that have committed, drops what waits for those
// that rolled back, and reports whether anything still waits; if not, the goroutine ends.
func (c *callerCommits) settle() bool {
	c.mu.Lock()
	xids := make([]string, 0, len(c.pending))
	for xid := range c.pending {
		xids = append(xids, xid)
	}
	c.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), notesTimeout)
	defer cancel()
	var committed []*txn
	err := withPgx(ctx, c.s.db, func(pg *pgx.Conn) error {
		rows, err := pg.Query(ctx, `SELECT x, coalesce(pg_xact_status(x::xid8), 'aborted') FROM unnest($1::text[]) AS x`, xids)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var xid, status string
			if err := rows.Scan(&xid, &status); err != nil {
				return err
			}
			if status == "in progress" {
				continue
			}
			c.mu.Lock()
			t := c.pending[xid]
			delete(c.pending, xid)
			c.mu.Unlock()
			if status == "committed" && t != nil {
				committed = append(committed, t)
			}
		}
		return rows.Err()
	})
	if err != nil {
		c.s.logger.Warn("looking whether applications' transactions have committed failed; looking again later", "error", err)
	}
	for _, t := range committed {
		c.s.afterCommit(context.WithoutCancel(ctx), t)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.pending) == 0 || c.stopped {
		c.running = false
		c.idle.Broadcast()
		return false
	}
	return true
}

// stop drops what still waits, and returns once the goroutine has ended.
func (c *callerCommits) stop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stopped = true
	if n := len(c.pending); n > 0 {
		c.s.logger.Warn("the replica stops before applications' transactions it wrote in have ended; the sweep does what "+
			"follows their commit, but their OnSave callbacks", "transactions", n)
	}
	c.pending = map[string]*txn{}
	select {
	case c.heard <- struct{}{}:
	default:
	}
	for c.running {
		c.idle.Wait()
	}
}

// deferAdvance leaves the advance of the plans ps for after their commit (see inCaller): the
// executions' wake time is now, for WakeDue should the replica stop first.
func (t *txn) deferAdvance(ps []*machine.Plan) {
	for _, p := range ps {
		if p.Deferred() {
			t.deferred = append(t.deferred, p.Exec().ID)
		}
	}
}

// advanceDeferred advances the executions whose Sets left their advance for after their commit.
func (s *Store) advanceDeferred(ctx context.Context, ids []string) {
	for _, id := range ids {
		if err := s.event(ctx, id, nil, machine.Advance{}); err != nil {
			s.logger.Warn("advancing an execution after an application's transaction set its values failed; WakeDue "+
				"advances it", "execution_id", id, "error", err)
		}
	}
}
