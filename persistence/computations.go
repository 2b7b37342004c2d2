package persistence

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"

	"github.com/journey-go/journey/graph"
	"github.com/journey-go/journey/persistence/machine"
)

// claimable is the claim's predicate, from the table of states (machine.Claimable), on a node row n
// of an execution e.
var claimable = machine.Claimable.SQL("n", "e", "")

// attemptColumns selects, from a node row n, its current attempt as the columns of Computation.
var attemptColumns = func() string {
	names := make([]string, len(computationColumns))
	for i, c := range computationColumns {
		switch c {
		case "id":
			names[i] = "n.attempt_id AS id"
		default:
			names[i] = "n." + c
		}
	}
	return strings.Join(names, ", ")
}()

// claimColumns are attemptColumns as the columns of a nodeRow, whose attempt pgx scans with no
// allocation for each of its nullable columns, where a Computation's pointers take one each.
var claimColumns = strings.Replace(attemptColumns, "n.attempt_id AS id", "n.attempt_id", 1)

// attemptsAsComputations selects, from an attempts row a, the columns of Computation.
var attemptsAsComputations = strings.ReplaceAll(strings.ReplaceAll(attemptColumns, "n.attempt_id AS id", "a.attempt_id AS id"), "n.", "a.")

// Claim takes up to limit AVAILABLE computations of the served graphs for replicaID, the
// longest due first (by run_at, then attempt id). Each claimed attempt gets a fresh claim token,
// its deadlines, and a revision of its execution; it comes back with its execution's values
// under the claim's lock (see ClaimedValues), so the function needs no other read. It never waits
// for a lock: an attempt that another replica is claiming, or whose execution is being written
// (its writer will NOTIFY when it commits), is left for a later claim.
//
// It takes two round trips, in one transaction. The first picks the attempts and locks them, and
// their executions, skipping what is locked. The second, which carries the COMMIT and whose
// snapshot is taken once the locks are held, claims them at the next revisions of their
// executions (the greatest revision of each execution's rows, which no writer can change while
// the claim holds its lock), stamps their deadlines from its own time, and reads their
// executions' values: what a writer committed just before the claim took its lock is in what the
// function reads, and in the revisions.
//
// The pick is prepared, and planned once per connection for every limit and every state of the
// table. Its shape keeps that one plan cheap whatever the statistics say, which in a queue go
// stale within seconds:
//   - Each graph key is looked up on its own: a scan of an index for several keys at once
//     (graph_key = ANY) comes out of PostgreSQL (before 17) unordered, and sorts every available
//     attempt to find the first.
//   - The order (run_at, attempt_id) is one that only nodes_claim_idx gives.
//   - The lookups' LIMIT is written into the text, as the power of two at or above limit (a few
//     statements in all), where a parameter would be planned as a tenth of the table. Each key
//     locks at most that many rows, until the claim commits, and the claim takes limit of them.
//   - Each attempt's execution is read by a lateral subquery with a LIMIT, which the planner
//     cannot turn into a join of its own choosing. As a join, once auto-analyze had seen a
//     backlog, its estimate of the rows matching on (lane, id) fell sixtyfold (lane follows from
//     id, and the two selectivities were multiplied), and the plan hashed every available attempt
//     with every execution and sorted them all for each claim: up to 1.1 s a claim with 200,000
//     waiting, the drain's "slow mode". The subquery locks the execution before the attempt,
//     the order in which every writer locks them.
//
// The claim's UPDATE finds its rows by their keys alone. A state in its WHERE would say nothing
// (the pick's lock holds the rows AVAILABLE) and would let the planner read them through
// nodes_claim_idx: with statistics taken while nothing was AVAILABLE (a million finished rows
// analyzed, say), its generic plan read every AVAILABLE row once per row claimed, 4.4 s for a
// claim of 250 beside 10,000,000 finished executions.
func (s *Store) Claim(ctx context.Context, replicaID string, limit int) ([]*Computation, error) {
	keys := s.claimKeys()
	if limit <= 0 || len(keys) == 0 {
		return nil, nil
	}
	window := 1
	for window < limit {
		window *= 2
	}
	var rows []*nodeRow
	var values []*claimedValue
	err := s.inTxn(ctx, s.workDB(), func(ctx context.Context, t *txn) error {
		t.claim = true
		type picked struct {
			Lane        int16     `db:"lane"`
			ExecutionID string    `db:"execution_id"`
			Node        string    `db:"node"`
			RunAt       time.Time `db:"run_at"`
			AttemptID   int64     `db:"attempt_id"`
		}
		var picks []*picked
		pick := func(pin func(alias string) string) string {
			return s.q(`SELECT l.lane, l.execution_id, l.node, l.run_at, l.attempt_id FROM unnest($1::text[]) AS k(graph_key)
			CROSS JOIN LATERAL (
				SELECT n.lane, n.execution_id, n.node, n.run_at, n.attempt_id
				FROM {s}.nodes n CROSS JOIN LATERAL (
					SELECT e.archived_at, e.canceled_at, e.paused_at FROM {s}.executions e
					WHERE e.lane = n.lane AND e.id = n.execution_id` + pin("e") + ` LIMIT 1) e
				WHERE ` + claimable + ` AND n.graph_key = k.graph_key` + pin("n") + `
				ORDER BY n.run_at, n.attempt_id LIMIT ` + strconv.Itoa(window) + `
				FOR UPDATE OF n, e SKIP LOCKED) l
			ORDER BY l.run_at, l.attempt_id LIMIT $2`)
		}
		steps := []step{{pick(func(string) string { return "" }), []any{keys, limit}, collect(&picks)}}
		if s.citus { // a pick a lane with work
			lanes, err := s.lanesWith(ctx, t, `SELECT lane FROM {s}.nodes WHERE state = 'AVAILABLE' AND graph_key IN (?)`, bun.List(keys))
			if err != nil || len(lanes) == 0 {
				return err
			}
			steps = steps[:0]
			for _, lane := range lanes {
				steps = append(steps, step{pick(func(alias string) string { return " AND " + alias + ".lane = $3" }), []any{keys, limit, lane}, collect(&picks)})
			}
		}
		err := t.send(ctx, steps...)
		if err != nil || len(picks) == 0 {
			return err
		}
		if len(steps) > 1 {
			slices.SortFunc(picks, func(a, b *picked) int {
				return cmp.Or(a.RunAt.Compare(b.RunAt), cmp.Compare(a.AttemptID, b.AttemptID))
			})
			picks = picks[:min(len(picks), limit)]
		}
		// The claimed attempts of an execution take its next revisions, in the order of their nodes.
		slices.SortFunc(picks, func(a, b *picked) int {
			return cmp.Or(cmp.Compare(a.Lane, b.Lane), strings.Compare(a.ExecutionID, b.ExecutionID), strings.Compare(a.Node, b.Node))
		})
		lanes, ids, nodes, tokens, ranks := make([]int16, len(picks)), make([]string, len(picks)), make([]string, len(picks)), make([]string, len(picks)), make([]int32, len(picks))
		for i, p := range picks {
			lanes[i], ids[i], nodes[i], tokens[i], ranks[i] = p.Lane, p.ExecutionID, p.Node, NewUUID(), 1
			if i > 0 && lanes[i] == lanes[i-1] && ids[i] == ids[i-1] {
				ranks[i] = ranks[i-1] + 1
			}
		}
		// The claim and the read go with the COMMIT.
		for i, j := 0, 0; i < len(picks); i = j {
			j = s.runEnd(lanes, i)
			t.tail = append(t.tail,
				step{s.q(`WITH t AS (SELECT coalesce($6::timestamptz, statement_timestamp()) AS now)
				UPDATE {s}.nodes n
				SET state = 'RUNNING', replica_id = $5, claim_token = c.token::uuid, claimed_at = t.now,
					deadline = t.now + n.abandon_after_ms * interval '1 millisecond',
					heartbeat_deadline = t.now + n.heartbeat_timeout_ms * interval '1 millisecond',
					last_heartbeat_at = t.now, changed_at = t.now,
					rev = c.rank + greatest(
						(SELECT e.revision FROM {s}.executions e WHERE e.lane = c.lane AND e.id = c.execution_id` + s.pinned("e", "$1") + `),
						(SELECT max(m.rev) FROM {s}.nodes m WHERE m.lane = c.lane AND m.execution_id = c.execution_id` + s.pinned("m", "$1") + `))
				FROM unnest($1::smallint[], $2::text[], $3::text[], $4::text[], $7::integer[]) AS c(lane, execution_id, node, token, rank), t
				WHERE n.lane = c.lane AND n.execution_id = c.execution_id AND n.node = c.node` + s.pinned("n", "$1") + `
				RETURNING ` + claimColumns),
					[]any{lanes[i:j], ids[i:j], nodes[i:j], tokens[i:j], replicaID, s.clock.NowOrNil(), ranks[i:j]}, collect(&rows)},
				// One row a value: arrays of them, aggregated by execution, were decoded by reflection,
				// an allocation or more an element (8% of a drain's allocations).
				// A node that failed for good comes too, for Failed gates (graph.Value.Failed).
				step{s.q(`SELECT n.execution_id, n.node, n.value, n.metadata, n.value_rev, n.set_at,
					coalesce(n.state IN ('FAILED', 'ABANDONED'), false) AS failed, CASE WHEN n.state IN ('FAILED', 'ABANDONED') THEN n.error END AS error FROM ` +
					executionKeys("$1", "$2") + ` k JOIN {s}.nodes n ON n.lane = k.lane AND n.execution_id = k.id
				WHERE (n.value_rev IS NOT NULL OR n.state IN ('FAILED', 'ABANDONED'))` + s.pinned("n", "$1")), []any{lanes[i:j], ids[i:j]}, collect(&values)})
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("claiming computations: %w", err)
	}
	claimed := make([]*Computation, len(rows))
	for i, r := range rows {
		claimed[i] = r.attempt()
	}
	byID := make(map[string]graph.Values, len(claimed))
	for _, v := range values {
		vals := byID[v.ExecutionID]
		if vals == nil {
			vals = graph.Values{}
			byID[v.ExecutionID] = vals
		}
		vals[v.Node] = v.value()
	}
	shareClaimed(claimed, func(c *Computation) graph.Values { return byID[c.ExecutionID] })
	slices.SortFunc(claimed, func(a, b *Computation) int { return cmp.Compare(a.ID, b.ID) })
	return claimed, nil
}

// claimedValue is a value of a claimed computation's execution, as Claim reads it, or the
// failure of a node that failed for good.
type claimedValue struct {
	ExecutionID string             `db:"execution_id"`
	Node        string             `db:"node"`
	Value       json.RawMessage    `db:"value"`
	Metadata    json.RawMessage    `db:"metadata"`
	ValueRev    pgtype.Int8        `db:"value_rev"`
	SetAt       pgtype.Timestamptz `db:"set_at"`
	Failed      bool               `db:"failed"`
	Error       pgtype.Text        `db:"error"`
}

func (v *claimedValue) value() graph.Value {
	meta := v.Metadata
	if string(meta) == "null" {
		meta = nil
	}
	return graph.Value{Raw: v.Value, Revision: v.ValueRev.Int64, SetAt: v.SetAt.Time, Metadata: meta, Failed: v.Failed, Error: v.Error.String}
}

// shareClaimed gives each of cs the values of its execution, from byID: a computation alone in
// its execution owns them.
func shareClaimed(cs []*Computation, byID func(*Computation) graph.Values) {
	n := make(map[string]int, len(cs))
	for _, c := range cs {
		n[c.ExecutionID]++
	}
	for _, c := range cs {
		c.SetClaimedValues(byID(c), n[c.ExecutionID] == 1)
	}
}

// refColumns returns the columns of refs.
func refColumns(refs []ClaimRef) (lanes []int16, ids, nodes, tokens []string, returned []bool) {
	lanes, ids, nodes, tokens = make([]int16, len(refs)), make([]string, len(refs)), make([]string, len(refs)), make([]string, len(refs))
	returned = make([]bool, len(refs))
	for i, r := range refs {
		lanes[i], ids[i], nodes[i], tokens[i], returned[i] = r.Lane, r.ExecutionID, r.Node, r.Token, r.Returned
	}
	return lanes, ids, nodes, tokens, returned
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
	// BeatCanceled: the heartbeat deadline was extended, and the claim's execution is canceled:
	// its function is to stop, and its outcome ends the attempt CANCELED.
	BeatCanceled
)

// Heartbeat extends the heartbeat deadlines of the given claims of replicaID, in one statement.
// It never waits for a row lock, so a batch is never held up by one computation whose completion
// holds its row, and two batches can never deadlock. It returns the outcome of each claim by id.
// A claim whose function has returned (ClaimRef.Returned) keeps its deadline as well: its outcome
// waits to be recorded (behind an application's transaction that holds its execution, say), and
// no sweep may abandon work that is done. It changes no indexed column: its updates are HOT. It finds each row by its key: its state and
// replica are tested with IS NOT DISTINCT FROM, which no index answers, so that no plan reads
// every running attempt through nodes_running_replica_idx instead (on statistics of a few
// running rows, that is the cheaper plan, and it stays cached as they grow).
func (s *Store) Heartbeat(ctx context.Context, replicaID string, refs []ClaimRef) (map[int64]Beat, error) {
	if s.citus { // a statement a lane
		refs = slices.SortedStableFunc(slices.Values(refs), func(a, b ClaimRef) int { return cmp.Compare(a.Lane, b.Lane) })
	}
	lanes, ids, nodes, tokens, returned := refColumns(refs)
	type beat struct {
		ID       int64  `db:"id"`
		State    string `db:"state"`
		Alive    bool   `db:"alive"`
		Canceled bool   `db:"canceled"`
	}
	var beats []*beat
	err := withPgx(ctx, s.heartbeatDB(), func(pg *pgx.Conn) error {
		for i, j := 0, 0; i < len(lanes); i = j {
			j = s.runEnd(lanes, i)
			rows, err := pg.Query(ctx, s.q(`WITH t AS (SELECT coalesce($6::timestamptz, now()) AS now),
			r AS (SELECT lane, execution_id, node, token, returned
				FROM unnest($1::smallint[], $2::text[], $3::text[], $4::uuid[], $7::boolean[]) AS r(lane, execution_id, node, token, returned)),
			held AS (SELECT n.lane, n.execution_id, n.node, r.returned FROM {s}.nodes n JOIN r
					ON n.lane = r.lane AND n.execution_id = r.execution_id AND n.node = r.node AND n.claim_token = r.token
				WHERE n.state IS NOT DISTINCT FROM 'RUNNING' AND n.replica_id IS NOT DISTINCT FROM $5`+s.pinned("n", "$1")+`
				ORDER BY n.lane, n.execution_id, n.node FOR UPDATE OF n SKIP LOCKED),
			beat AS (UPDATE {s}.nodes n
				SET heartbeat_deadline = t.now + n.heartbeat_timeout_ms * interval '1 millisecond', last_heartbeat_at = t.now,
					deadline = CASE WHEN held.returned THEN greatest(n.deadline, t.now + n.heartbeat_timeout_ms * interval '1 millisecond')
						ELSE n.deadline END
				FROM t, held WHERE n.lane = held.lane AND n.execution_id = held.execution_id AND n.node = held.node`+s.pinned("n", "$1")+`
				RETURNING n.attempt_id)
			SELECT n.attempt_id AS id, n.state, n.attempt_id IN (SELECT attempt_id FROM beat) AS alive,
				EXISTS (SELECT 1 FROM {s}.executions e WHERE e.lane = n.lane AND e.id = n.execution_id AND e.canceled_at IS NOT NULL`+
				s.pinned("e", "$1")+`) AS canceled
			FROM {s}.nodes n JOIN r
				ON n.lane = r.lane AND n.execution_id = r.execution_id AND n.node = r.node AND n.claim_token = r.token
			WHERE n.replica_id IS NOT DISTINCT FROM $5`+s.pinned("n", "$1")), lanes[i:j], ids[i:j], nodes[i:j], tokens[i:j],
				replicaID, s.clock.NowOrNil(), returned[i:j])
			if err != nil {
				return err
			}
			got, err := scanAll[beat](rows)
			if err != nil {
				return err
			}
			beats = append(beats, got...)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("extending heartbeats: %w", err)
	}
	out := make(map[int64]Beat, len(refs))
	for _, b := range beats {
		switch {
		case b.Alive && b.Canceled:
			out[b.ID] = BeatCanceled
		case b.Alive:
			out[b.ID] = BeatAlive
		case b.State == StateRunning:
			out[b.ID] = BeatBusy // locked: by its own completion most likely
		case b.State == StateSuccess || b.State == StateFailed:
			out[b.ID] = BeatFinished // committed since: finished, not lost
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

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// Release hands the given claims of replicaID back, for a graceful stop, if they are still
// RUNNING under the same token, without consuming an attempt (machine.Release): each claim moves to
// the attempts' history, keeping its place in its rate window, and a new attempt of its node waits
// as a new one would: AVAILABLE, or PENDING for its key, limit or window, or PAUSED in a paused
// execution. Late results of the claims are dropped. Only claims whose function has returned are
// released: one still running stays RUNNING until its heartbeat deadline passes, so that no two
// replicas ever run it at once. It returns how many it released.
func (s *Store) Release(ctx context.Context, replicaID string, refs []ClaimRef) (int, error) {
	byExec := map[string][]machine.Event{}
	for _, r := range refs {
		byExec[r.ExecutionID] = append(byExec[r.ExecutionID], machine.Release{Node: r.Node, Replica: replicaID, Token: r.Token})
	}
	return s.releaseEach(ctx, byExec)
}

// releaseEach releases, execution by execution in a transaction of its own, the claims of
// byExec, and returns how many it released.
func (s *Store) releaseEach(ctx context.Context, byExec map[string][]machine.Event) (int, error) {
	n := 0
	for _, id := range slices.Sorted(maps.Keys(byExec)) {
		released := 0
		err := s.write(ctx, id, nil, func(_ context.Context, _ *txn, p *machine.Plan, env machine.Env) error {
			for _, ev := range byExec[id] {
				switch err := p.Step(ev, env); {
				case errors.Is(err, machine.ErrNothingToDo):
				case err != nil:
					return err
				default:
					released++
				}
			}
			if released == 0 {
				return machine.ErrNothingToDo
			}
			return nil
		})
		switch {
		case errors.Is(err, machine.ErrNothingToDo), errors.Is(err, ErrNotFound):
		case err != nil:
			return n, fmt.Errorf("releasing computations of %s: %w", id, err)
		default:
			n += released
		}
	}
	return n, nil
}

// releaseTokens releases the claims of replicaID in executions ids whose tokens are tokens, the
// token of a claim beside its execution, whatever their node.
func (s *Store) releaseTokens(ctx context.Context, replicaID string, ids, tokens []string) (int, error) {
	lanes := make([]int16, len(ids))
	for i, id := range ids {
		lanes[i] = LaneOf(id)
	}
	var held []struct {
		ExecutionID string `bun:"execution_id"`
		Node        string `bun:"node"`
		Token       string `bun:"claim_token"`
	}
	err := s.db.NewRaw(s.q(`SELECT n.execution_id, n.node, n.claim_token FROM `+executionKeys("?", "?")+` k
		JOIN {s}.nodes n ON n.lane = k.lane AND n.execution_id = k.id
		WHERE n.claim_token = ANY(?::uuid[]) AND n.state = 'RUNNING' AND n.replica_id = ?`+s.pinned("n", "?")),
		slices.Concat([]any{pgdialect.Array(lanes), pgdialect.Array(ids), pgdialect.Array(tokens), replicaID}, s.pinnedArgs(lanes))...).Scan(ctx, &held)
	if err != nil && !isNoRows(err) {
		return 0, fmt.Errorf("finding the claims of replica %s: %w", replicaID, err)
	}
	byExec := map[string][]machine.Event{}
	for _, h := range held {
		byExec[h.ExecutionID] = append(byExec[h.ExecutionID], machine.Release{Node: h.Node, Replica: replicaID, Token: h.Token})
	}
	return s.releaseEach(ctx, byExec)
}

// ReleaseReplica hands every claim that replicaID holds back, as Release does, once none of its
// functions runs any more: at a stop, those left are claims that no attempt of the replica took
// up, because the stop ended the claim or the write that made them before its answer came back,
// although the database had committed them. Without it, they waited for the sweeper, which
// abandoned them, and their retry used up an attempt.
func (s *Store) ReleaseReplica(ctx context.Context, replicaID string) (int, error) {
	var held []struct {
		ExecutionID string `bun:"execution_id"`
		Node        string `bun:"node"`
		Token       string `bun:"claim_token"`
	}
	err := s.db.NewRaw(s.q(`SELECT execution_id, node, claim_token FROM {s}.nodes WHERE state = 'RUNNING' AND replica_id = ?`),
		replicaID).Scan(ctx, &held)
	if err != nil && !isNoRows(err) {
		return 0, fmt.Errorf("finding the claims of replica %s: %w", replicaID, err)
	}
	byExec := map[string][]machine.Event{}
	for _, h := range held {
		byExec[h.ExecutionID] = append(byExec[h.ExecutionID], machine.Release{Node: h.Node, Replica: replicaID, Token: h.Token})
	}
	return s.releaseEach(ctx, byExec)
}
