package persistence

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"

	"github.com/journey-go/journey/persistence/machine"
)

// Actions that a request asks for.
const (
	ActionRetry     = "retry"
	ActionArchive   = "archive"
	ActionUnarchive = "unarchive"
	ActionCancel    = "cancel"
	ActionPause     = "pause"
	ActionResume    = "resume"
)

// PayloadRequest is the NOTIFY payload that announces a new request to the replicas.
const PayloadRequest = "r"

// Request is a row of the requests table: an action asked for from outside the runtime, which a
// replica serving the execution's graph carries out.
type Request struct {
	ID          int64   `bun:"id" json:"id"`
	Lane        int16   `bun:"lane" json:"-"`
	ExecutionID string  `bun:"execution_id" json:"execution_id"`
	GraphKey    string  `bun:"graph_key" json:"graph"`
	Action      string  `bun:"action" json:"action"`
	Node        *string `bun:"node" json:"node,omitempty"`
	// Reason is a cancel's.
	Reason      *string    `bun:"reason" json:"reason,omitempty"`
	RequestedAt time.Time  `bun:"requested_at" json:"requested_at"`
	DoneAt      *time.Time `bun:"done_at" json:"done_at,omitempty"`
	// ReplicaID is the replica that carried it out.
	ReplicaID *string `bun:"replica_id" json:"replica_id,omitempty"`
	// Error says why it could not be carried out.
	Error *string `bun:"error" json:"error,omitempty"`
}

// ErrBadRequest means a request was refused: the action does not apply to the execution as it is.
var ErrBadRequest = errors.New("journey: request refused")

// Ask records a request for action on execution id and announces it, without the graph's Go
// code: arg is the node of a retry, the reason of a cancel, and "" otherwise. It checks what the
// database can tell, that the execution exists, that its graph version is recorded, and, for a
// retry, that the node exists and has failed for good. A replica that serves the graph carries it
// out (see CarryOut).
func (s *Store) Ask(ctx context.Context, id, action, arg string) (*Request, error) {
	what := "node"
	if action == ActionCancel {
		what = "reason"
	}
	if err := CheckText(what, arg); err != nil {
		return nil, err
	}
	exec, err := s.LoadExecution(ctx, id)
	if err != nil {
		return nil, err
	}
	var nodeArg, reasonArg *string
	switch action {
	case ActionArchive, ActionUnarchive, ActionPause, ActionResume:
	case ActionCancel:
		reasonArg = &arg
	case ActionRetry:
		if err := s.checkRetry(ctx, exec, arg); err != nil {
			return nil, err
		}
		nodeArg = &arg
	default:
		return nil, fmt.Errorf("%w: unknown action %q: use retry, archive, unarchive, cancel, pause or resume", ErrBadRequest, action)
	}
	req := new(Request)
	err = s.inTx(ctx, func(ctx context.Context, tx bun.Tx) error {
		err := tx.NewRaw(s.q(`INSERT INTO {s}.requests (lane, execution_id, graph_key, action, node, reason, requested_at)
			SELECT ?, ?, ?, ?, ?, ?, coalesce(?::timestamptz, now()) RETURNING `+cols("", requestColumns)),
			exec.Lane, id, GraphKey(exec.GraphName, exec.GraphVersion), action, nodeArg, reasonArg, s.clock.NowOrNil()).Scan(ctx, req)
		if err != nil {
			return fmt.Errorf("recording the request: %w", err)
		}
		return s.notify(ctx, tx, PayloadRequest)
	})
	if err != nil {
		return nil, err
	}
	return req, nil
}

// checkRetry reports why node of exec cannot be retried, from the recorded graph version and the
// node's newest attempt.
func (s *Store) checkRetry(ctx context.Context, exec *Execution, node string) error {
	gv, err := s.LoadGraphVersion(ctx, exec.GraphName, exec.GraphVersion)
	if err != nil {
		return err
	}
	if _, ok := gv.Node(node); !ok {
		return fmt.Errorf("%w: graph %q version %q has no node %q; its nodes are listed by `journey graphs`",
			ErrUnknownNode, exec.GraphName, exec.GraphVersion, node)
	}
	var latest []Computation
	err = s.db.NewRaw(s.q(`SELECT `+attemptColumns+` FROM {s}.nodes n
		WHERE n.lane = ? AND n.execution_id = ? AND n.node = ? AND n.attempt_id IS NOT NULL`), exec.Lane, exec.ID, node).Scan(ctx, &latest)
	if err != nil && !isNoRows(err) {
		return fmt.Errorf("reading the attempts of %q: %w", node, err)
	}
	switch {
	case len(latest) == 0:
		return fmt.Errorf("%w: node %q of %s has never run; only a node that failed for good can be retried",
			ErrNotFailed, node, exec.ID)
	case !latest[0].FailedForGood():
		return fmt.Errorf("%w: node %q of %s is %s (attempt %d); only a node that failed for good can be retried",
			ErrNotFailed, node, exec.ID, latest[0].State, latest[0].Attempt)
	}
	return nil
}

// LoadRequest reads a request.
func (s *Store) LoadRequest(ctx context.Context, id int64) (*Request, error) {
	req := new(Request)
	if err := s.db.NewRaw(s.q("SELECT "+cols("", requestColumns)+" FROM {s}.requests WHERE id = ?"), id).Scan(ctx, req); err != nil {
		return nil, fmt.Errorf("reading request %d: %w", id, err)
	}
	return req, nil
}

// CarryOut carries out up to limit open requests of the served graphs, oldest first, each in the
// transaction of its execution's write, which marks it done by replicaID. Replicas race for them
// with SKIP LOCKED, so each is carried out once. A request that no longer applies (a retry of a
// node that is no longer failed, or an unarchive of an execution whose key another holds, say)
// is marked done with the reason; one that fails otherwise
// is logged and tried again at the next call. It returns how many it marked done.
func (s *Store) CarryOut(ctx context.Context, replicaID string, limit int) (int, error) {
	if len(s.keys) == 0 {
		return 0, nil
	}
	var open []Request
	err := s.db.NewRaw(s.q(`SELECT `+cols("", requestColumns)+` FROM {s}.requests WHERE done_at IS NULL AND graph_key IN (?)
		ORDER BY id LIMIT ?`), bun.List(s.keys), limit).Scan(ctx, &open)
	if err != nil && !isNoRows(err) {
		return 0, fmt.Errorf("finding open requests: %w", err)
	}
	done := 0
	for _, req := range open {
		ok, err := s.carryOut(ctx, replicaID, req)
		switch {
		case ctx.Err() != nil:
			return done, ctx.Err()
		case err != nil:
			s.logger.Warn("carrying out a request failed; trying it again later", "request_id", req.ID,
				"execution_id", req.ExecutionID, "action", req.Action, "error", err)
		case ok:
			done++
		}
	}
	return done, nil
}

// carryOut carries out one request, unless another replica holds or has done it. It reports
// whether it marked it done.
func (s *Store) carryOut(ctx context.Context, replicaID string, req Request) (bool, error) {
	errTaken := errors.New("taken")
	lock := func(ctx context.Context, tx bun.IDB) error {
		var ids []int64
		err := tx.NewRaw(s.q(`SELECT id FROM {s}.requests WHERE lane = ? AND id = ? AND done_at IS NULL FOR UPDATE SKIP LOCKED`),
			req.Lane, req.ID).Scan(ctx, &ids)
		if err != nil && !isNoRows(err) {
			return fmt.Errorf("locking request %d: %w", req.ID, err)
		}
		if len(ids) == 0 {
			return errTaken
		}
		return s.boundLocks(ctx, tx)
	}
	markDone := func(ctx context.Context, db bun.IDB, reason *string) error {
		_, err := db.NewRaw(s.q(`UPDATE {s}.requests SET done_at = coalesce(?::timestamptz, now()), replica_id = ?, error = ?
			WHERE lane = ? AND id = ? AND done_at IS NULL`), s.clock.NowOrNil(), replicaID, reason, req.Lane, req.ID).Exec(ctx)
		if err != nil {
			return fmt.Errorf("marking request %d done: %w", req.ID, err)
		}
		return nil
	}
	var ev machine.Event
	switch req.Action {
	case ActionRetry:
		ev = machine.Retry{Node: deref(req.Node)}
	case ActionArchive, ActionUnarchive:
		ev = machine.Archive{Unarchive: req.Action == ActionUnarchive}
	case ActionCancel:
		ev = machine.Cancel{Reason: deref(req.Reason)}
	case ActionPause, ActionResume:
		ev = machine.Pause{Resume: req.Action == ActionResume}
	default:
		reason := fmt.Sprintf("%v: unknown action %q", ErrBadRequest, req.Action)
		return true, markDone(ctx, s.db, &reason)
	}
	// The request's write is the change's: its cascade to the children follows its commit.
	err := s.write(ctx, req.ExecutionID, lock, func(ctx context.Context, tx *txn, p *machine.Plan, env machine.Env) error {
		if err := p.Step(ev, env); err != nil {
			return err
		}
		return markDone(ctx, tx, nil)
	})
	if err != nil && req.Action == ActionUnarchive {
		if e, lerr := s.LoadExecution(ctx, req.ExecutionID); lerr == nil {
			err = cmpOrErr(keyHeld(err, e), err)
		}
	}
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, errTaken):
		return false, nil
	case errors.Is(err, ErrNotFailed), errors.Is(err, ErrUnknownNode), errors.Is(err, ErrBadRequest), errors.Is(err, ErrKeyHeld),
		errors.Is(err, ErrCanceled):
		reason := err.Error()
		return true, markDone(ctx, s.db, &reason)
	default:
		return false, err
	}
}

// cmpOrErr returns err if it is not nil, else def.
func cmpOrErr(err, def error) error {
	if err != nil {
		return err
	}
	return def
}

// retryPage is how many executions RetryWhere reads, and asks a retry of, in one statement.
const retryPage = 500

// RetryWhere asks for a retry of node in each execution that f selects (its State is taken to be
// ExecFailed) whose node has failed for good, page by page: one statement reads a page's failed
// nodes, another records their requests, and one NOTIFY announces them. It returns how many it
// asked for; with dryRun it asks for none and counts them. f must name the graph, which must have
// the node.
func (s *Store) RetryWhere(ctx context.Context, f ExecutionFilter, node string, dryRun bool) (int, error) {
	if err := CheckText("node", node); err != nil {
		return 0, err
	}
	if f.Graph == "" {
		return 0, fmt.Errorf("%w: a retry of many executions needs their graph", ErrBadRequest)
	}
	var versions []GraphVersion
	err := s.db.NewRaw(s.q(`SELECT `+cols("", versionColumns)+` FROM {s}.graph_versions WHERE graph_name = ? AND (? = '' OR graph_version = ?)`),
		f.Graph, f.Version, f.Version).Scan(ctx, &versions)
	if err != nil && !isNoRows(err) {
		return 0, fmt.Errorf("reading the graph versions: %w", err)
	}
	if !slices.ContainsFunc(versions, func(v GraphVersion) bool { _, ok := v.Node(node); return ok }) {
		return 0, fmt.Errorf("%w: no recorded version of graph %q has a node %q; its nodes are listed by `journey graphs`",
			ErrUnknownNode, f.Graph, node)
	}
	f.State, f.Limit, f.After = ExecFailed, retryPage, nil
	asked := 0
	for {
		page, err := s.ListPage(ctx, f)
		if err != nil {
			return asked, err
		}
		lanes, ids := make([]int16, len(page.Executions)), make([]string, len(page.Executions))
		for i, e := range page.Executions {
			lanes[i], ids[i] = LaneOf(e.ID), e.ID
		}
		var failed []struct {
			Lane        int16  `bun:"lane"`
			ExecutionID string `bun:"execution_id"`
			GraphKey    string `bun:"graph_key"`
		}
		err = s.db.NewRaw(s.q(`SELECT n.lane, n.execution_id, n.graph_key FROM `+executionKeys("?0", "?1")+` k
			JOIN {s}.nodes n ON n.lane = k.lane AND n.execution_id = k.id
			WHERE n.node = ?2 AND n.state IN ('FAILED', 'ABANDONED')`+s.pinned("n", "?0")),
			pgdialect.Array(lanes), pgdialect.Array(ids), node).Scan(ctx, &failed)
		if err != nil && !isNoRows(err) {
			return asked, fmt.Errorf("reading the failed nodes %q: %w", node, err)
		}
		if len(failed) > 0 && !dryRun {
			lanes, ids, keys := make([]int16, len(failed)), make([]string, len(failed)), make([]string, len(failed))
			for i, n := range failed {
				lanes[i], ids[i], keys[i] = n.Lane, n.ExecutionID, n.GraphKey
			}
			err = s.inTx(ctx, func(ctx context.Context, tx bun.Tx) error {
				_, err := tx.NewRaw(s.q(`INSERT INTO {s}.requests (lane, execution_id, graph_key, action, node, requested_at)
					SELECT r.lane, r.id, r.graph_key, ?, ?, coalesce(?::timestamptz, now())
					FROM unnest(?::smallint[], ?::text[], ?::text[]) AS r(lane, id, graph_key)`),
					ActionRetry, node, s.clock.NowOrNil(), pgdialect.Array(lanes), pgdialect.Array(ids), pgdialect.Array(keys)).Exec(ctx)
				if err != nil {
					return fmt.Errorf("recording the requests: %w", err)
				}
				return s.notify(ctx, tx, PayloadRequest)
			})
			if err != nil {
				return asked, err
			}
		}
		asked += len(failed)
		if page.Next == nil {
			return asked, nil
		}
		f.After = page.Next
	}
}
