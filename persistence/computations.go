package persistence

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"

	"github.com/journey-go/journey/graph"
)

// Claim takes up to limit AVAILABLE computations of the served graphs for replicaID, the
// longest due first (by run_at, then id), in one statement. Each claimed row gets a fresh claim
// token, its deadlines, and bumps its execution's revision; it comes back with its execution's
// values under the claim's lock (see ClaimedValues), so the function needs no other read. It never waits
// for a lock: a computation that another replica is claiming, or whose execution is being written
// (its writer will NOTIFY when it commits), is left for a later claim. So the deadlines it sets
// start when the claim starts, with nothing in between.
//
// The statement reads the values from its snapshot, but locks the newest row of each execution:
// a write that commits in between is under the lock, and not in the snapshot. Every write to an
// execution's values bumps its revision, so the statement compares the revision it locked with
// the one its snapshot sees, and Claim reads again, in a second statement, the values of the
// executions where they differ; that takes a write racing the claim, so the common case stays
// one statement.
//
// The statement is prepared, and planned once per connection for every limit and every state of
// the table. Its shape keeps that one plan cheap whatever the statistics say, which in a queue go
// stale within seconds:
//   - Each graph key is looked up on its own: a scan of an index for several keys at once
//     (graph_key = ANY) comes out of PostgreSQL (before 17) unordered, and sorts every available
//     attempt to find the first.
//   - The order (run_at, id) is one that only computations_claim_idx gives. Ordered by id, the
//     primary key gives it too, and a plan made when most attempts were AVAILABLE walked the
//     primary key through every finished attempt.
//   - The lookups' LIMIT is written into the text, as the power of two at or above limit (a few
//     statements in all), where a parameter would be planned as a tenth of the table; and the
//     rows are updated through the primary key, by = ANY(ARRAY(…)), whatever their estimate.
//     Each key locks at most that many rows, for the statement's duration, and the claim takes
//     limit of them.
func (s *Store) Claim(ctx context.Context, replicaID string, limit int) ([]*Computation, error) {
	if limit <= 0 || len(s.keys) == 0 {
		return nil, nil
	}
	window := 1
	for window < limit {
		window *= 2
	}
	var claimed []*Computation
	err := withPgx(ctx, s.workDB(), func(pg *pgx.Conn) error {
		rows, err := pg.Query(ctx, s.q(`WITH t AS (SELECT coalesce($1::timestamptz, now()) AS now),
			claimed AS (UPDATE {s}.computations c
				SET state = 'RUNNING', replica_id = $2, claim_token = gen_random_uuid(), claimed_at = t.now,
					deadline = t.now + c.abandon_after_ms * interval '1 millisecond',
					heartbeat_deadline = t.now + c.heartbeat_timeout_ms * interval '1 millisecond',
					last_heartbeat_at = t.now
				FROM t
				WHERE c.id = ANY(ARRAY(SELECT l.id FROM unnest($3::text[]) AS k(graph_key)
					CROSS JOIN LATERAL (
						SELECT a.id, a.run_at FROM {s}.computations a JOIN {s}.executions e ON e.id = a.execution_id
						WHERE a.state = 'AVAILABLE' AND a.graph_key = k.graph_key AND e.archived_at IS NULL
						ORDER BY a.run_at, a.id LIMIT `+strconv.Itoa(window)+`
						FOR UPDATE OF a, e SKIP LOCKED) l
					ORDER BY l.run_at, l.id LIMIT $4))
				RETURNING `+cols("c", computationColumns)+`),
			-- A claim is a revision of its execution; the claim above holds the executions' rows.
			-- This updates their newest versions, and reports those that are not the versions
			-- the statement's snapshot sees (x): the values below, read from that snapshot, may
			-- be older than the lock.
			bumped AS (UPDATE {s}.executions e SET revision = e.revision + n.claims
				FROM (SELECT execution_id, count(*) AS claims FROM claimed GROUP BY execution_id) n
				WHERE e.id = n.execution_id
				RETURNING e.id, e.revision - n.claims <> (SELECT x.revision FROM {s}.executions x WHERE x.id = e.id) AS stale)
			SELECT claimed.*, vs.*, claimed.execution_id = ANY(ARRAY(SELECT id FROM bumped WHERE stale)) AS claimed_stale
			FROM claimed CROSS JOIN LATERAL (SELECT `+claimedValuesColumns+`
				FROM {s}."values" v WHERE v.execution_id = claimed.execution_id) vs
			ORDER BY claimed.id`),
			s.clock.NowOrNil(), replicaID, s.keys, limit)
		if err != nil {
			return err
		}
		if claimed, err = scanAll[Computation](rows); err != nil {
			return err
		}
		if err := s.readClaimedAgain(ctx, pg, claimed); err != nil {
			// The claims hold: the values they carry are older than their locks, and the
			// completion's advance recomputes what ran on them.
			s.logger.Warn("reading again the values of claimed computations failed; they run on the values of the claim's snapshot",
				"service", "dispatcher", "error", err)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("claiming computations: %w", err)
	}
	return claimed, nil
}

// claimedValuesColumns aggregate the values v of an execution into the columns of claimedValues.
const claimedValuesColumns = `array_agg(v.node) AS claimed_nodes, array_agg(v.value) AS claimed_raws,
	array_agg(v.metadata) AS claimed_metas, array_agg(v.revision) AS claimed_revisions,
	array_agg(v.set_at) AS claimed_set_ats`

// readClaimedAgain reads again the values of the claimed computations whose execution changed
// between the claim statement's snapshot and its lock (see claimedValues.ClaimedStale), in one
// statement. A write to an execution's values bumps its revision in the same transaction, so the
// others' values are those under the lock. The claim has committed: what this reads is at least
// what the lock saw, and anything written since, the function may see too: its computed_with
// records the revisions it used, and a completion recomputes from there.
func (s *Store) readClaimedAgain(ctx context.Context, pg *pgx.Conn, claimed []*Computation) error {
	var ids []string
	for _, c := range claimed {
		if c.ClaimedStale {
			ids = append(ids, c.ExecutionID)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	type execValues struct {
		ExecutionID string `db:"execution_id"`
		claimedValues
	}
	rows, err := pg.Query(ctx, s.q(`SELECT v.execution_id, `+claimedValuesColumns+`
		FROM {s}."values" v WHERE v.execution_id = ANY($1::text[]) GROUP BY v.execution_id`), ids)
	if err != nil {
		return err
	}
	fresh, err := scanAll[execValues](rows)
	if err != nil {
		return err
	}
	byID := make(map[string]claimedValues, len(fresh))
	for _, f := range fresh {
		byID[f.ExecutionID] = f.claimedValues
	}
	for _, c := range claimed {
		if c.ClaimedStale {
			c.claimedValues = byID[c.ExecutionID] // none: the values were all cleared
		}
	}
	return nil
}

// ClaimedValues returns the values of the execution of a computation returned by Claim, as they
// were when it was claimed.
func (c *Computation) ClaimedValues() (graph.Values, error) {
	n := len(c.ClaimedNodes)
	if len(c.ClaimedRaws) != n || len(c.ClaimedMetas) != n || len(c.ClaimedRevisions) != n || len(c.ClaimedSetAts) != n {
		return nil, fmt.Errorf("the values claimed with computation %d are %d nodes, %d values, %d metadata, %d revisions and %d times",
			c.ID, n, len(c.ClaimedRaws), len(c.ClaimedMetas), len(c.ClaimedRevisions), len(c.ClaimedSetAts))
	}
	vals := make(graph.Values, n)
	for i, node := range c.ClaimedNodes {
		meta := json.RawMessage(c.ClaimedMetas[i])
		if string(meta) == "null" {
			meta = nil
		}
		vals[node] = graph.Value{Raw: c.ClaimedRaws[i], Revision: c.ClaimedRevisions[i], SetAt: c.ClaimedSetAts[i], Metadata: meta}
	}
	return vals, nil
}

// ClaimRef identifies a claim for a fenced write.
type ClaimRef struct {
	ID    int64
	Token string
}

// Ref returns the claim reference of a claimed computation.
func (c *Computation) Ref() ClaimRef {
	ref := ClaimRef{ID: c.ID}
	if c.ClaimToken != nil {
		ref.Token = *c.ClaimToken
	}
	return ref
}

// Beat is the outcome of one claim's heartbeat.
type Beat int

// Heartbeat outcomes.
const (
	// BeatLost: the claim is gone (abandoned, released or reclaimed): cancel the work.
	BeatLost Beat = iota
	// BeatAlive: the heartbeat deadline was extended.
	BeatAlive
	// BeatBusy: the row was locked, by its own completion most likely, and was left alone: the
	// claim is neither known alive nor lost. Try again soon.
	BeatBusy
	// BeatFinished: the claim's own outcome was recorded (SUCCESS or FAILED) while the heartbeat
	// ran: there is nothing left to extend, and nothing to cancel.
	BeatFinished
)

// Heartbeat extends the heartbeat deadlines of the given claims of replicaID, in one statement.
// It never waits for a row lock, so a batch is never held up by one computation whose completion
// holds its row, and two batches can never deadlock. It returns the outcome of each claim by id.
func (s *Store) Heartbeat(ctx context.Context, replicaID string, refs []ClaimRef) (map[int64]Beat, error) {
	ids := make([]int64, len(refs))
	tokens := make([]string, len(refs))
	for i, r := range refs {
		ids[i], tokens[i] = r.ID, r.Token
	}
	db := s.heartbeatDB()
	var alive []int64
	err := db.NewRaw(s.q(`WITH t AS (SELECT coalesce(?::timestamptz, now()) AS now),
		held AS (SELECT c.id FROM {s}.computations c
			JOIN unnest(?::bigint[], ?::uuid[]) AS r(id, token) ON c.id = r.id AND c.claim_token = r.token
			WHERE c.state = 'RUNNING' AND c.replica_id = ?
			ORDER BY c.id FOR UPDATE OF c SKIP LOCKED)
		UPDATE {s}.computations c
		SET heartbeat_deadline = t.now + c.heartbeat_timeout_ms * interval '1 millisecond', last_heartbeat_at = t.now
		FROM t, held WHERE c.id = held.id
		RETURNING c.id`),
		s.clock.NowOrNil(), pgdialect.Array(ids), pgdialect.Array(tokens), replicaID).Scan(ctx, &alive)
	if err != nil && !isNoRows(err) {
		return nil, fmt.Errorf("extending heartbeats: %w", err)
	}
	out := make(map[int64]Beat, len(refs))
	if alive == nil {
		alive = []int64{}
	}
	for _, id := range alive {
		out[id] = BeatAlive
	}
	if len(alive) == len(refs) {
		return out, nil
	}
	// Tell the lost claims from the locked ones, without waiting for the locks. A skipped row
	// whose lock was its own completion's may be committed by now: finished, not lost.
	var skipped []struct {
		ID    int64  `bun:"id"`
		State string `bun:"state"`
	}
	err = db.NewRaw(s.q(`SELECT c.id, c.state FROM {s}.computations c
		JOIN unnest(?::bigint[], ?::uuid[]) AS r(id, token) ON c.id = r.id AND c.claim_token = r.token
		WHERE c.state IN ('RUNNING', 'SUCCESS', 'FAILED') AND c.replica_id = ? AND NOT c.id = ANY(?::bigint[])`),
		pgdialect.Array(ids), pgdialect.Array(tokens), replicaID, pgdialect.Array(alive)).Scan(ctx, &skipped)
	if err != nil && !isNoRows(err) {
		return nil, fmt.Errorf("checking the claims whose heartbeat was skipped: %w", err)
	}
	for _, c := range skipped {
		out[c.ID] = BeatFinished
		if c.State == StateRunning {
			out[c.ID] = BeatBusy
		}
	}
	return out, nil
}

// Complete records a successful attempt and its value, fenced by the claim: if the claim was lost
// it writes nothing and returns ErrClaimLost. used holds the upstream revisions the function read.
// A value equal to the stored one keeps its revision. If the node's gate no longer holds, the
// result is dropped and the attempt CANCELED.
func (s *Store) Complete(ctx context.Context, c *Computation, result json.RawMessage, used map[string]int64) error {
	return s.RecordAlone(ctx, Outcome{C: c, Result: result, Used: used})
}

// forgetUndueTicks drops from a finished attempt's upstream revisions each tick whose value it
// read before that value came due: a recurring tick's next cycle, written while the attempt ran.
// For the attempt, that cycle has not happened yet; it must run again when it does. Gates and
// signatures see ticks only once they are due, so the attempt's record must too.
func (s *Store) forgetUndueTicks(ctx context.Context, tx *txn, st *execState, c *Computation) error {
	sig := parseSignature(c.ComputedWith)
	forgot := false
	for up, rev := range sig {
		if n, ok := st.g.Node(up); ok && isTick(n) && st.values[up].Revision == rev && !st.tickDue(up) {
			delete(sig, up)
			forgot = true
		}
	}
	if !forgot {
		return nil
	}
	c.ComputedWith = sig.String()
	_, err := tx.NewRaw(s.q("UPDATE {s}.computations SET computed_with = ?::jsonb WHERE id = ?"), c.ComputedWith, c.ID).Exec(ctx)
	if err != nil {
		return fmt.Errorf("recording what computation %d read: %w", c.ID, err)
	}
	return nil
}

// cancelAttempt marks a finished attempt CANCELED, with reason.
func (s *Store) cancelAttempt(ctx context.Context, tx *txn, c *Computation, reason string) error {
	reason = storable(reason)
	_, err := tx.NewRaw(s.q("UPDATE {s}.computations SET state = ?, error = ? WHERE id = ?"), StateCanceled, reason, c.ID).Exec(ctx)
	if err != nil {
		return fmt.Errorf("canceling computation %d: %w", c.ID, err)
	}
	c.State, c.Error = StateCanceled, &reason
	return nil
}

// failAttempt turns a finished attempt into the node's final failure, with cause: user code
// that the store called for it panicked.
func (s *Store) failAttempt(ctx context.Context, tx *txn, st *execState, c *Computation, cause error) error {
	s.logger.Error("user code panicked; the node has failed", "execution_id", st.exec.ID, "node", c.Node, "error", cause)
	msg := storable(cause.Error())
	_, err := tx.NewRaw(s.q("UPDATE {s}.computations SET state = ?, error = ?, computed_with = ?::jsonb WHERE id = ?"),
		StateFailed, msg, c.ComputedWith, c.ID).Exec(ctx)
	if err != nil {
		return fmt.Errorf("failing computation %d: %w", c.ID, err)
	}
	c.State, c.Error = StateFailed, &msg
	return s.nodeFailed(ctx, tx, st, c, cause)
}

// gatePanicked fails the node of a finished attempt whose gate panicked on the current values.
// The failure is for those values, whichever the attempt read, so that advancing records it once.
func (s *Store) gatePanicked(ctx context.Context, tx *txn, st *execState, c *Computation, cause error) error {
	n, _ := st.g.Node(c.Node)
	c.ComputedWith = signature(Signature(n, st.dueView())).String()
	return s.failAttempt(ctx, tx, st, c, cause)
}

// Fail records a failed attempt, fenced by the claim. While attempts remain and the error is not
// permanent, the next attempt is created with the node's backoff; otherwise the node has failed.
func (s *Store) Fail(ctx context.Context, c *Computation, cause error) error {
	return s.RecordAlone(ctx, Outcome{C: c, Err: cause})
}

// RecordAlone records one outcome in a transaction of its own, and returns nil, ErrClaimLost, or
// the error of the transaction. If PostgreSQL refuses the outcome (see Refused: a value out of
// jsonb's range, say), the same write would be refused again, and trying it again would only hold
// the attempt: the attempt is recorded instead as failed for good, with the reason, and
// RecordAlone returns a *RecordedAsFailure. An error that Refused matches then means that even
// the failure could not be recorded.
func (s *Store) RecordAlone(ctx context.Context, o Outcome) error {
	lost, err := s.Record(ctx, []Outcome{o})
	if err == nil {
		return lost[0]
	}
	if !Refused(err) {
		return err
	}
	s.logger.Error("the database refused an outcome; the attempt has failed", "execution_id", o.C.ExecutionID,
		"node", o.C.Node, "computation_id", o.C.ID, "error", err)
	cause := graph.Permanent(errors.New("the outcome could not be stored: " + refusal(err)))
	lost, ferr := s.Record(ctx, []Outcome{{C: o.C, Err: cause, Span: o.Span}})
	switch {
	case ferr != nil:
		return fmt.Errorf("%w; recording the attempt as failed: %w", err, ferr)
	case lost[0] != nil:
		return lost[0]
	}
	return &RecordedAsFailure{Cause: cause}
}

// RecordedAsFailure is what RecordAlone returns for an outcome that PostgreSQL refused, and that
// it recorded instead as the attempt's failure, with Cause.
type RecordedAsFailure struct{ Cause error }

func (e *RecordedAsFailure) Error() string { return "recorded as a failure: " + e.Cause.Error() }

func (e *RecordedAsFailure) Unwrap() error { return e.Cause }

// afterFailure follows a failed or abandoned attempt. If the node's gate no longer holds, the
// attempt is CANCELED: nothing retries it and no failure is announced; the node runs again when
// its gate next holds. Otherwise, while attempts remain and the failure is not permanent, the next
// attempt is created with the node's backoff; else the node has failed for good.
func (s *Store) afterFailure(ctx context.Context, tx *txn, st *execState, c *Computation, cause error, permanent bool) error {
	n, ok := st.g.Node(c.Node)
	if !ok {
		return fmt.Errorf("%w: graph %q has no node %q", ErrUnknownNode, st.g.Name(), c.Node)
	}
	st.latest[c.Node] = c
	ok, err := holds(n, st.values)
	switch {
	case err != nil:
		return s.gatePanicked(ctx, tx, st, c, err)
	case !ok:
		return s.cancelAttempt(ctx, tx, c, "canceled: gate no longer holds; "+deref(c.Error))
	case permanent || c.Attempt >= c.MaxAttempts:
		return s.nodeFailed(ctx, tx, st, c, cause)
	}
	backoff, err := recovered("the Backoff of node "+quote(c.Node), func() time.Duration { return n.Settings().Backoff(c.Attempt) })
	if err != nil {
		return s.failAttempt(ctx, tx, st, c, fmt.Errorf("%s; then %w", deref(c.Error), err))
	}
	next, err := s.insertComputation(ctx, tx, st, n, c.Attempt+1, parseSignature(c.ComputedWith), backoff)
	if err != nil {
		return err
	}
	st.latest[c.Node] = next
	return nil
}

// nodeFailed records that c, the newest attempt of its node, ended the node's budget: waiters
// learn it, the failure event is claimed, and OnSave gets the error.
func (s *Store) nodeFailed(ctx context.Context, tx *txn, st *execState, c *Computation, cause error) error {
	st.latest[c.Node] = c
	st.changed = true
	if err := s.claimEvent(ctx, tx, st, EventFailed); err != nil {
		return err
	}
	n, _ := st.g.Node(c.Node)
	if n.Settings().OnSave != nil || st.g.OnSave() != nil {
		st.saved = append(st.saved, graph.SaveEvent{
			ExecutionID: st.exec.ID, Graph: st.g.Name(), Node: c.Node,
			Err: fmt.Errorf("node %q %s: %w", c.Node, Failure(c.State, c.Attempt, c.MaxAttempts, deref(c.Error)), cause),
		})
	}
	return nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// Release hands the given claims of replicaID back to AVAILABLE without consuming an attempt,
// for a graceful stop, if they are still RUNNING under the same token. Their claims are void, so
// late results are dropped. Only claims whose function has returned are released: one still
// running stays RUNNING until its heartbeat deadline passes, so that no two replicas ever run it
// at once.
func (s *Store) Release(ctx context.Context, replicaID string, refs []ClaimRef) (int, error) {
	ids := make([]int64, len(refs))
	tokens := make([]string, len(refs))
	for i, r := range refs {
		ids[i], tokens[i] = r.ID, r.Token
	}
	return s.release(ctx, replicaID, nil, `FROM unnest(?::bigint[], ?::uuid[]) AS r(id, token)
		WHERE c.id = r.id AND c.claim_token = r.token AND`, pgdialect.Array(ids), pgdialect.Array(tokens))
}

// ReleaseReplica hands every claim that replicaID holds back to AVAILABLE, as Release does, once
// none of its functions runs any more: at a stop, those left are claims that no attempt of the
// replica took up, because the stop ended the claim or the write that made them before its
// answer came back, although the database had committed them. Without it, they waited for the
// sweeper, which abandoned them, and their retry used up an attempt.
func (s *Store) ReleaseReplica(ctx context.Context, replicaID string) (int, error) {
	return s.release(ctx, replicaID, nil, "WHERE")
}

// release releases the RUNNING attempts of replicaID that from, a FROM and WHERE with args ending
// in a conjunction, chooses, once it holds the locks of the executions lock.
func (s *Store) release(ctx context.Context, replicaID string, lock []string, from string, args ...any) (int, error) {
	var released []int64
	err := s.inTx(ctx, func(ctx context.Context, tx bun.Tx) error {
		if len(lock) > 0 {
			_, err := tx.NewRaw(s.q(`SELECT 1 FROM {s}.executions WHERE id = ANY(?::text[]) ORDER BY id FOR UPDATE`),
				pgdialect.Array(lock)).Exec(ctx)
			if err != nil {
				return fmt.Errorf("locking executions %s: %w", strings.Join(lock, ", "), err)
			}
		}
		err := tx.NewRaw(s.q(`UPDATE {s}.computations c
			SET state = 'AVAILABLE', replica_id = NULL, claim_token = NULL, claimed_at = NULL,
				deadline = NULL, heartbeat_deadline = NULL, last_heartbeat_at = NULL,
				available_at = coalesce(?::timestamptz, now())
			`+from+` c.state = 'RUNNING' AND c.replica_id = ?
			RETURNING c.id`), slices.Concat([]any{s.clock.NowOrNil()}, args, []any{replicaID})...).Scan(ctx, &released)
		if err != nil && !isNoRows(err) {
			return fmt.Errorf("releasing computations of replica %s: %w", replicaID, err)
		}
		if len(released) == 0 {
			return nil
		}
		return s.notify(ctx, tx, PayloadWork)
	})
	return len(released), err
}

// mutate writes a mutate node's result into its targets. By default a target keeps its revision,
// so nothing downstream recomputes; with UpdateRevisionOnChange, a target whose value changed gets
// the completion's revision. The node's own value records what it wrote.
func (s *Store) mutate(ctx context.Context, tx *txn, st *execState, n graph.Node, result json.RawMessage) error {
	targets := n.Targets()
	for _, target := range targets {
		rev := st.revision
		if old, ok := st.values[target]; ok && !n.Settings().UpdateRevisionOnChange {
			rev = old.Revision
		}
		if _, err := s.upsertValue(ctx, tx, st, target, result, nil, rev); err != nil {
			return err
		}
	}
	own, err := json.Marshal(map[string]any{"mutated": targets, "value": result})
	if err != nil {
		return fmt.Errorf("recording mutate %q: %w", n.Name(), err)
	}
	_, err = s.upsertValue(ctx, tx, st, n.Name(), own, nil, st.revision)
	return err
}
