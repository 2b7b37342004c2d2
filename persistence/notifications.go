package persistence

import (
	"context"
	"fmt"
	"time"

	"github.com/uptrace/bun"
)

// Lifecycle events.
const (
	EventFailed    = "execution.failed"
	EventCompleted = "execution.completed"
)

// Delivery states.
const (
	DeliveryPending   = "PENDING"
	DeliveryDelivered = "DELIVERED"
	DeliveryDead      = "DEAD"
)

// TargetHandler is the delivery target of the Go handler configured for an event.
const TargetHandler = "handler"

// PayloadNotice is the NOTIFY payload that wakes the delivery actors.
const PayloadNotice = "n"

// claimEvent claims an event of the execution, once per phase whichever replicas race, and
// writes its deliveries to the outbox, in the transaction of the change that caused it.
func (s *Store) claimEvent(ctx context.Context, tx bun.IDB, st *execState, event string) error {
	phase := 0
	if event == EventFailed {
		phase = st.exec.FailurePhase
	}
	key := fmt.Sprintf("%s:%s:%d", st.exec.ID, event, phase)
	res, err := tx.NewRaw(s.q(`INSERT INTO {s}.notification_claims (execution_id, event, phase, idempotency_key, claimed_at)
		VALUES (?, ?, ?, ?, ?) ON CONFLICT DO NOTHING`), st.exec.ID, event, phase, key, st.now).Exec(ctx)
	if err != nil {
		return fmt.Errorf("claiming %s of %s: %w", event, st.exec.ID, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return nil // claimed already, by this phase's first failure or by another replica
	}
	for _, target := range s.targets[event] {
		_, err := tx.NewRaw(s.q(`INSERT INTO {s}.notification_deliveries (idempotency_key, target, next_attempt_at, created_at)
			VALUES (?, ?, ?, ?)`), key, target, st.now, st.now).Exec(ctx)
		if err != nil {
			return fmt.Errorf("queueing %s of %s for %s: %w", event, st.exec.ID, target, err)
		}
	}
	if len(s.targets[event]) > 0 {
		return s.notify(ctx, tx, PayloadNotice)
	}
	return nil
}

// claimCompletion claims the completed event once the graph's CompletesWhen gate holds and
// nothing is pending or running.
func (s *Store) claimCompletion(ctx context.Context, tx bun.IDB, st *execState) error {
	gate := st.g.CompletesWhen()
	if gate == nil || !gate.Holds(st.dueView()) {
		return nil
	}
	for _, c := range st.latest {
		if c.active() {
			return nil
		}
	}
	return s.claimEvent(ctx, tx, st, EventCompleted)
}

// Notice is one delivery to make, with what its event says.
type Notice struct {
	DeliveryID     int64     `bun:"id"`
	IdempotencyKey string    `bun:"idempotency_key"`
	Target         string    `bun:"target"`
	Attempts       int       `bun:"attempts"`
	ExecutionID    string    `bun:"execution_id"`
	Event          string    `bun:"event"`
	Phase          int       `bun:"phase"`
	ClaimedAt      time.Time `bun:"claimed_at"`
	GraphName      string    `bun:"graph_name"`
	GraphVersion   string    `bun:"graph_version"`
	// FailedNodes are the nodes that have used up their attempts, read when the notice is sent.
	FailedNodes []*Computation `bun:"-"`
}

// DeliveryPolicy says how deliveries are retried.
type DeliveryPolicy struct {
	// Targets are the targets this replica can deliver to.
	Targets []string
	// Backoff is the wait before the attempt after the given number of failed ones.
	Backoff func(attempts int) time.Duration
	// MaxAttempts: after that many failures a delivery is dead.
	MaxAttempts int
}

// DeliverOne takes the oldest due delivery of the policy's targets and sends it, holding its row
// locked meanwhile, so that a replica that dies mid-delivery leaves it to the others. It records
// the outcome: delivered, or an error and the time of the next attempt, or dead once the attempts
// are used up. It reports whether it found a delivery.
func (s *Store) DeliverOne(ctx context.Context, policy DeliveryPolicy, send func(ctx context.Context, n *Notice) error) (bool, error) {
	if len(policy.Targets) == 0 {
		return false, nil
	}
	found := false
	err := s.inTx(ctx, func(ctx context.Context, tx bun.Tx) error {
		now, err := s.now(ctx, tx)
		if err != nil {
			return err
		}
		var notices []*Notice
		err = tx.NewRaw(s.q(`SELECT d.id, d.idempotency_key, d.target, d.attempts,
				c.execution_id, c.event, c.phase, c.claimed_at, e.graph_name, e.graph_version
			FROM {s}.notification_deliveries d
			JOIN {s}.notification_claims c USING (idempotency_key)
			JOIN {s}.executions e ON e.id = c.execution_id
			WHERE d.state = 'PENDING' AND d.next_attempt_at <= ? AND d.target IN (?)
			ORDER BY d.next_attempt_at, d.id
			LIMIT 1
			FOR UPDATE OF d SKIP LOCKED`), now, bun.List(policy.Targets)).Scan(ctx, &notices)
		if err != nil && !isNoRows(err) {
			return fmt.Errorf("taking a delivery: %w", err)
		}
		if len(notices) == 0 {
			return nil
		}
		found = true
		n := notices[0]
		if n.Event == EventFailed {
			err := tx.NewRaw(s.q(`SELECT * FROM (SELECT DISTINCT ON (node) * FROM {s}.computations
				WHERE execution_id = ? ORDER BY node, id DESC) latest
				WHERE state IN ('FAILED', 'ABANDONED') ORDER BY node`), n.ExecutionID).Scan(ctx, &n.FailedNodes)
			if err != nil && !isNoRows(err) {
				return fmt.Errorf("reading the failed nodes of %s: %w", n.ExecutionID, err)
			}
		}
		sendErr := send(ctx, n)
		attempts := n.Attempts + 1
		switch {
		case sendErr == nil:
			_, err = tx.NewRaw(s.q(`UPDATE {s}.notification_deliveries
				SET state = 'DELIVERED', attempts = ?, delivered_at = coalesce(?::timestamptz, now()) WHERE id = ?`),
				attempts, s.clock.NowOrNil(), n.DeliveryID).Exec(ctx)
		case attempts >= policy.MaxAttempts:
			_, err = tx.NewRaw(s.q(`UPDATE {s}.notification_deliveries
				SET state = 'DEAD', attempts = ?, last_error = ? WHERE id = ?`), attempts, sendErr.Error(), n.DeliveryID).Exec(ctx)
			s.logger.Error("notification dead: its delivery attempts are used up", "service", "delivery",
				"idempotency_key", n.IdempotencyKey, "target", n.Target, "attempts", attempts, "error", sendErr)
		default:
			_, err = tx.NewRaw(s.q(`UPDATE {s}.notification_deliveries
				SET attempts = ?, last_error = ?, next_attempt_at = ? WHERE id = ?`),
				attempts, sendErr.Error(), now.Add(policy.Backoff(attempts)), n.DeliveryID).Exec(ctx)
			s.logger.Warn("notification delivery failed; retrying", "service", "delivery",
				"idempotency_key", n.IdempotencyKey, "target", n.Target, "attempts", attempts, "error", sendErr)
		}
		if err != nil {
			return fmt.Errorf("recording delivery %d: %w", n.DeliveryID, err)
		}
		return nil
	})
	return found, err
}

// Claim is a row of notification_claims, with its deliveries.
type Claim struct {
	Event          string     `bun:"event"`
	Phase          int        `bun:"phase"`
	IdempotencyKey string     `bun:"idempotency_key"`
	ClaimedAt      time.Time  `bun:"claimed_at"`
	Deliveries     []Delivery `bun:"-"`
}

// Delivery is a row of notification_deliveries.
type Delivery struct {
	IdempotencyKey string     `bun:"idempotency_key"`
	Target         string     `bun:"target"`
	State          string     `bun:"state"`
	Attempts       int        `bun:"attempts"`
	NextAttemptAt  time.Time  `bun:"next_attempt_at"`
	LastError      *string    `bun:"last_error"`
	DeliveredAt    *time.Time `bun:"delivered_at"`
}

// Notifications lists the claims of an execution, oldest first, with their deliveries.
func (s *Store) Notifications(ctx context.Context, id string) ([]Claim, error) {
	if _, err := s.LoadExecution(ctx, id); err != nil {
		return nil, err
	}
	var claims []Claim
	err := s.db.NewRaw(s.q(`SELECT event, phase, idempotency_key, claimed_at FROM {s}.notification_claims
		WHERE execution_id = ? ORDER BY claimed_at, event, phase`), id).Scan(ctx, &claims)
	if err != nil && !isNoRows(err) {
		return nil, fmt.Errorf("listing the notifications of %s: %w", id, err)
	}
	var deliveries []Delivery
	err = s.db.NewRaw(s.q(`SELECT d.idempotency_key, d.target, d.state, d.attempts, d.next_attempt_at, d.last_error, d.delivered_at
		FROM {s}.notification_deliveries d JOIN {s}.notification_claims c USING (idempotency_key)
		WHERE c.execution_id = ? ORDER BY d.id`), id).Scan(ctx, &deliveries)
	if err != nil && !isNoRows(err) {
		return nil, fmt.Errorf("listing the deliveries of %s: %w", id, err)
	}
	for i := range claims {
		for _, d := range deliveries {
			if d.IdempotencyKey == claims[i].IdempotencyKey {
				claims[i].Deliveries = append(claims[i].Deliveries, d)
			}
		}
	}
	return claims, nil
}
