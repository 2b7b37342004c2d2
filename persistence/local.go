package persistence

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"time"

	"github.com/journey-go/journey/persistence/machine"
)

// Local takes the attempts that a caller's write (Start, Set, Unset), or a completion, makes
// AVAILABLE, as far as this replica's dispatcher has free workers: the write inserts them already
// claimed by this replica, in its own transaction, and hands them over once it has committed. They
// need no claim, and no NOTIFY, as no other replica may take them. A process that dies between the COMMIT and
// the handover leaves them RUNNING under its claim, as a claim would: the sweeper abandons them
// once their heartbeat deadline passes, or their replica stops heartbeating.
//
// Every reservation that Reserve grants is given back exactly once, through Handed or Unreserve.
// The calls must not block.
type Local interface {
	// ReplicaID is the replica that claims the attempts.
	ReplicaID() string
	// Reserve reserves room for up to n attempts, and returns how many it reserved, 0 to n.
	Reserve(n int) int
	// Handed receives, after the COMMIT, the attempts claimed with reserved reservations
	// (len(cs) <= reserved), with their claims and their execution's values.
	Handed(cs []*Computation, reserved int)
	// Unreserve gives back n reservations: the write failed, or its COMMIT's outcome is unknown.
	Unreserve(n int)
}

// claimLocally claims for this replica the AVAILABLE attempts that the plan p made ready, as many
// as Local has room for (machine.ClaimLocally): each is written RUNNING, with its claim, whose
// token the plan chooses, before the COMMIT (see releaseUnknown), and whose time and deadlines the
// statement that writes it stamps (see nodeRows).
func (s *Store) claimLocally(t *txn, p *machine.Plan) {
	if s.local == nil || t.caller || p.Exec().ArchivedAt != nil {
		return
	}
	ready := p.Ready()
	if ready == 0 {
		return
	}
	n := s.local.Reserve(ready)
	t.reserved += n
	if n == 0 {
		return
	}
	_ = p.Step(machine.ClaimLocally{Replica: s.local.ReplicaID(), N: n}, machine.Env{}) // it refuses nothing
	t.claiming = append(t.claiming, p)
}

// NewUUID returns a random version 4 UUID, such as a claim token.
func NewUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	b[6], b[8] = b[6]&0x0f|0x40, b[8]&0x3f|0x80
	h := hex.EncodeToString(b[:])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// releaseUnknown gives back to AVAILABLE the attempts claimed locally in t, whose COMMIT got no
// answer: committed or not, nothing here runs them, and a claim left RUNNING would wait for its
// heartbeat deadline and spend an attempt (with MaxAttempts(1), fail a node that never ran). The
// release is fenced by the claims' tokens, which t chose, and first locks t's executions: if the
// server still runs t's COMMIT, it waits for its end, so that what it releases is what committed.
// It tries a few times; if the database stays out of reach, the claims wait for the sweeper.
func (s *Store) releaseUnknown(ctx context.Context, t *txn) {
	var ids, tokens []string
	for _, p := range t.claiming {
		for _, c := range p.Claimed() {
			if c.ClaimToken != nil {
				ids, tokens = append(ids, p.Exec().ID), append(tokens, *c.ClaimToken)
			}
		}
	}
	if len(tokens) == 0 {
		return
	}
	ctx = context.WithoutCancel(ctx)
	var err error
	for try := range 3 {
		if try > 0 {
			time.Sleep(time.Duration(try) * 200 * time.Millisecond)
		}
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		var n int
		n, err = s.releaseTokens(rctx, s.local.ReplicaID(), ids, tokens)
		cancel()
		if err == nil {
			if n > 0 {
				s.logger.Warn("released the attempts that a write claimed, whose COMMIT got no answer but went through",
					"count", n)
			}
			return
		}
	}
	s.logger.Error("releasing the attempts claimed by a write whose COMMIT got no answer failed; "+
		"if it went through, they wait for their heartbeat deadline", "attempts", len(tokens), "error", err)
}

// handOver gives the attempts claimed locally in t, with their execution's values as committed,
// to Local, once t has committed; or gives back its reservations if it has not.
func (s *Store) handOver(t *txn, committed bool) {
	if s.local == nil || t.reserved == 0 {
		return
	}
	if !committed {
		s.local.Unreserve(t.reserved)
		return
	}
	var cs []*Computation
	for _, p := range t.claiming {
		for _, c := range p.Claimed() {
			c.SetClaimedValues(p.ClaimedValues(), len(p.Claimed()) == 1)
			cs = append(cs, c)
		}
	}
	s.local.Handed(cs, t.reserved)
}
