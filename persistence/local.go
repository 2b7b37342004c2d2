package persistence

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/uptrace/bun/dialect/pgdialect"

	"github.com/journey-go/journey/graph"
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

// claimLocally claims for this replica the AVAILABLE attempts that the write of st created, as
// many as Local has room for: each is then inserted RUNNING, with its claim, by t's claimStep. A
// claim is a revision of its execution, as Claim's is.
func (s *Store) claimLocally(t *txn, st *execState) {
	if s.local == nil || !st.claims || st.exec.ArchivedAt != nil {
		return
	}
	var ready []*Computation
	for _, c := range st.created {
		if c.State == StateAvailable {
			ready = append(ready, c)
		}
	}
	if len(ready) == 0 {
		return
	}
	n := s.local.Reserve(len(ready))
	t.reserved += n
	if n == 0 {
		return
	}
	replica := s.local.ReplicaID()
	for _, c := range ready[:n] {
		c.State, c.ReplicaID, c.AvailableAt = StateRunning, &replica, nil
		st.claimed = append(st.claimed, c)
		st.revision++
	}
	// They are inserted by claimStep, not with the others by finish.
	st.created = slices.DeleteFunc(st.created, func(c *Computation) bool { return c.State == StateRunning })
	// The work NOTIFY is for attempts that other replicas may claim.
	st.work = len(ready) > n
	t.claiming = append(t.claiming, st)
}

// claimLocallyQuery inserts attempts claimed by this replica ($1), with their claim tokens ($14),
// at their creation. The tokens are chosen here, before the COMMIT: if it gets no answer, the
// replica knows which claims to release (releaseUnknown). The claim's
// time, and the deadlines that follow from it as Claim sets them, are the statement's ($13, or
// statement_timestamp()): it goes with the COMMIT, once the write holds its executions' locks. The
// transaction's now() is when it began, before it waited for them: a write that waited longer
// than a heartbeat timeout would commit its attempts already past their heartbeat deadline, for
// the sweeper to abandon while their functions run.
var claimLocallyQuery = `INSERT INTO {s}.computations
		(execution_id, graph_key, node, state, attempt, max_attempts, run_at, abandon_after_ms,
		 heartbeat_timeout_ms, computed_with, created_at, traceparent, replica_id, claim_token, claimed_at,
		 deadline, heartbeat_deadline, last_heartbeat_at)
	SELECT execution_id, graph_key, node, 'RUNNING', attempt, max_attempts, run_at, abandon_after_ms,
		heartbeat_timeout_ms, computed_with::jsonb, created_at, traceparent, $1, token, t.at,
		t.at + abandon_after_ms * interval '1 millisecond',
		t.at + heartbeat_timeout_ms * interval '1 millisecond', t.at
	FROM unnest($2::text[], $3::text[], $4::text[], $5::int[], $6::int[], $7::timestamptz[], $8::bigint[],
		$9::bigint[], $10::text[], $11::timestamptz[], $12::text[], $14::uuid[]) WITH ORDINALITY AS c(execution_id,
		graph_key, node, attempt, max_attempts, run_at, abandon_after_ms, heartbeat_timeout_ms, computed_with,
		created_at, traceparent, token, ord),
		(SELECT coalesce($13::timestamptz, statement_timestamp()) AS at) t
	ORDER BY ord
	RETURNING ` + cols("", computationColumns)

// claimStep is the statement that inserts the attempts claimed locally in t, to go with the
// COMMIT. It gives each its id and claim, and its execution's values.
func (s *Store) claimStep(t *txn) (step, bool) {
	var cs []*Computation
	for _, st := range t.claiming {
		cs = append(cs, st.claimed...)
	}
	if len(cs) == 0 {
		return step{}, false
	}
	var ids, keys, nodes, sigs []string
	var attempts, maxAttempts []int
	var runAts, createdAts []time.Time
	var abandons, beats []int64
	var traceparents []*string
	tokens := make([]string, len(cs))
	for i, c := range cs {
		tokens[i] = NewUUID()
		c.ClaimToken = &tokens[i]
		ids, keys, nodes, sigs = append(ids, c.ExecutionID), append(keys, c.GraphKey), append(nodes, c.Node), append(sigs, c.ComputedWith)
		attempts, maxAttempts = append(attempts, c.Attempt), append(maxAttempts, c.MaxAttempts)
		runAts, createdAts = append(runAts, c.RunAt), append(createdAts, c.CreatedAt)
		abandons, beats, traceparents = append(abandons, c.AbandonAfterMS), append(beats, c.HeartbeatTimeoutMS), append(traceparents, c.Traceparent)
	}
	var rows []*Computation
	read := collect(&rows)
	return step{s.q(claimLocallyQuery),
		[]any{s.local.ReplicaID(), ids, keys, nodes, attempts, maxAttempts, runAts, abandons, beats, sigs, createdAts, traceparents,
			s.clock.NowOrNil(), tokens},
		func(br pgx.BatchResults) error {
			if err := read(br); err != nil {
				return fmt.Errorf("claiming the attempts made ready: %w", err)
			}
			if len(rows) != len(cs) {
				return fmt.Errorf("claiming %d attempts made ready inserted %d", len(cs), len(rows))
			}
			for i, c := range cs {
				// In the order given: an INSERT … SELECT … ORDER BY inserts, and returns, in that order.
				if rows[i].ExecutionID != c.ExecutionID || rows[i].Node != c.Node {
					return fmt.Errorf("claiming the attempts made ready: row %d is %q of %s, not %q of %s",
						i, rows[i].Node, rows[i].ExecutionID, c.Node, c.ExecutionID)
				}
				*c = *rows[i]
			}
			return nil
		}}, true
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
	for _, st := range t.claiming {
		for _, c := range st.claimed {
			if c.ClaimToken != nil {
				ids, tokens = append(ids, st.exec.ID), append(tokens, *c.ClaimToken)
			}
		}
	}
	if len(tokens) == 0 {
		return
	}
	ids = slices.Compact(slices.Sorted(slices.Values(ids)))
	ctx = context.WithoutCancel(ctx)
	var err error
	for try := range 3 {
		if try > 0 {
			time.Sleep(time.Duration(try) * 200 * time.Millisecond)
		}
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		var n int
		n, err = s.release(rctx, s.local.ReplicaID(), ids, `FROM unnest(?::uuid[]) AS r(token)
			WHERE c.claim_token = r.token AND`, pgdialect.Array(tokens))
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
	for _, st := range t.claiming {
		for _, c := range st.claimed {
			c.claimedValues = columnsOf(st.values)
			cs = append(cs, c)
		}
	}
	s.local.Handed(cs, t.reserved)
}

// columnsOf returns vals as the columns that Claim returns them in.
func columnsOf(vals graph.Values) claimedValues {
	var cv claimedValues
	for _, node := range slices.Sorted(maps.Keys(vals)) {
		v := vals[node]
		cv.ClaimedNodes, cv.ClaimedRaws = append(cv.ClaimedNodes, node), append(cv.ClaimedRaws, v.Raw)
		cv.ClaimedMetas, cv.ClaimedRevisions = append(cv.ClaimedMetas, v.Metadata), append(cv.ClaimedRevisions, v.Revision)
		cv.ClaimedSetAts = append(cv.ClaimedSetAts, v.SetAt)
	}
	return cv
}
