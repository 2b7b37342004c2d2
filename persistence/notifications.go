package persistence

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/uptrace/bun"

	"github.com/journey-go/journey/persistence/machine"
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

// Route is a lifecycle event and a target that a replica can deliver it to: TargetHandler or a
// webhook URL.
type Route struct {
	Event  string
	Target string
}

// String is the route as replica_heartbeats.targets lists it: the event, a space, the target.
func (r Route) String() string { return r.Event + " " + r.Target }

// Notice is one delivery to make, with what its event says.
type Notice struct {
	DeliveryID     int64     `bun:"id"`
	Lane           int16     `bun:"lane"`
	IdempotencyKey string    `bun:"idempotency_key"`
	Target         string    `bun:"target"`
	Attempts       int       `bun:"attempts"`
	CreatedAt      time.Time `bun:"created_at"`
	ExecutionID    string    `bun:"execution_id"`
	Event          string    `bun:"event"`
	Phase          int       `bun:"phase"`
	ClaimedAt      time.Time `bun:"claimed_at"`
	GraphName      string    `bun:"graph_name"`
	GraphVersion   string    `bun:"graph_version"`
	// FailedNodes are the nodes that had failed for good when the failure was claimed.
	FailedNodes []FailedNode `bun:"failed_nodes"`
	// CancelReason is the reason of a canceled execution.
	CancelReason *string `bun:"cancel_reason"`
}

// DeliverySlack is how much longer than its send a delivery's transaction may last.
const DeliverySlack = 5 * time.Second

// DeliveryPolicy says how deliveries are made and retried.
type DeliveryPolicy struct {
	// SendTimeout bounds one send. The delivery's transaction, idle meanwhile, is allowed
	// SendTimeout plus DeliverySlack, whatever the session's idle_in_transaction_session_timeout.
	SendTimeout time.Duration
	// Backoff is the wait before the attempt after the given number of failed ones.
	Backoff func(attempts int) time.Duration
	// Horizon is how long after its event a delivery is retried. The last attempt is made at the
	// horizon; a delivery that fails then is dead.
	Horizon time.Duration
	// MaxAttempts, if positive, also makes a delivery dead after that many failures.
	MaxAttempts int
}

// DeliverOne takes the oldest due delivery that this replica can make (one of its routes) and
// sends it, holding its row locked meanwhile, so that a replica that dies mid-delivery leaves it
// to the others. It records the outcome: delivered, or an error and the time of the next attempt,
// or dead once the policy's horizon (or attempts) are used up. It returns the delivery's state
// afterwards (DeliveryDelivered, DeliveryPending to retry, or DeliveryDead), or "" if it found
// no delivery due.
//
// It walks the due deliveries in order and looks up each one's claim and execution by key,
// stopping at the first of its routes: the subqueries (LATERAL, LIMIT 1) keep the planner from
// joining every pending delivery with every claim and sorting them, which cost a backlog of 28,000
// 60 ms a delivery and left it undrained.
func (s *Store) DeliverOne(ctx context.Context, policy DeliveryPolicy, send func(ctx context.Context, n *Notice) error) (string, error) {
	if len(s.routes) == 0 {
		return "", nil
	}
	state := ""
	err := s.inTx(ctx, func(ctx context.Context, tx bun.Tx) error {
		idle := (policy.SendTimeout + DeliverySlack).Milliseconds()
		if _, err := tx.ExecContext(ctx, fmt.Sprintf("SET LOCAL idle_in_transaction_session_timeout = %d", idle)); err != nil {
			return fmt.Errorf("allowing the delivery's transaction to wait for its send: %w", err)
		}
		now, err := s.now(ctx, tx)
		if err != nil {
			return err
		}
		lanes, err := s.lanesWith(ctx, tx, `SELECT lane FROM {s}.notification_deliveries WHERE state = 'PENDING' AND next_attempt_at <= ?`, now)
		if err != nil {
			return err
		}
		if len(lanes) > 1 { // in turn, from where the last delivery began
			first := int(s.deliverFrom.Add(1) % int64(len(lanes)))
			lanes = slices.Concat(lanes[first:], lanes[:first])
		}
		var notices []*Notice
		for _, lane := range lanes {
			err = tx.NewRaw(s.q(`SELECT d.id, d.lane, d.idempotency_key, d.target, d.attempts, d.created_at,
				c.execution_id, c.event, c.phase, c.claimed_at, c.failed_nodes, e.graph_name, e.graph_version, e.cancel_reason
			FROM {s}.notification_deliveries d
			CROSS JOIN LATERAL (SELECT c.execution_id, c.event, c.phase, c.claimed_at, c.failed_nodes FROM {s}.notification_claims c
				WHERE c.lane = d.lane AND c.idempotency_key = d.idempotency_key`+lanePin("c", lane)+` LIMIT 1) c
			CROSS JOIN LATERAL (SELECT e.graph_name, e.graph_version, e.cancel_reason FROM {s}.executions e
				WHERE e.lane = d.lane AND e.id = c.execution_id`+lanePin("e", lane)+` LIMIT 1) e
			WHERE d.state = 'PENDING' AND d.next_attempt_at <= ? AND c.event || ' ' || d.target IN (?)`+lanePin("d", lane)+`
			ORDER BY d.next_attempt_at, d.id
			LIMIT 1
			FOR UPDATE OF d SKIP LOCKED`), now, bun.List(s.routes)).Scan(ctx, &notices)
			if err != nil && !isNoRows(err) {
				return fmt.Errorf("taking a delivery: %w", err)
			}
			if len(notices) > 0 {
				break
			}
		}
		if len(notices) == 0 {
			return nil
		}
		n := notices[0]
		sendErr := send(ctx, n)
		attempts := n.Attempts + 1
		horizon := n.CreatedAt.Add(policy.Horizon)
		next := now.Add(policy.Backoff(attempts))
		if next.After(horizon) {
			next = horizon // a last attempt at the horizon
		}
		switch {
		case sendErr == nil:
			state = DeliveryDelivered
			_, err = tx.NewRaw(s.q(`UPDATE {s}.notification_deliveries
				SET state = 'DELIVERED', attempts = ?, delivered_at = coalesce(?::timestamptz, now()) WHERE lane = ? AND id = ?`),
				attempts, s.clock.NowOrNil(), n.Lane, n.DeliveryID).Exec(ctx)
		case !now.Before(horizon) || (policy.MaxAttempts > 0 && attempts >= policy.MaxAttempts):
			state = DeliveryDead
			_, err = tx.NewRaw(s.q(`UPDATE {s}.notification_deliveries
				SET state = 'DEAD', attempts = ?, last_error = ? WHERE lane = ? AND id = ?`), attempts, machine.Storable(sendErr.Error()),
				n.Lane, n.DeliveryID).Exec(ctx)
			s.logger.Error("notification dead: its retry horizon or its attempts are used up", "service", "delivery",
				"idempotency_key", n.IdempotencyKey, "target", n.Target, "attempts", attempts,
				"age", now.Sub(n.CreatedAt), "error", sendErr)
		default:
			state = DeliveryPending
			_, err = tx.NewRaw(s.q(`UPDATE {s}.notification_deliveries
				SET attempts = ?, last_error = ?, next_attempt_at = ? WHERE lane = ? AND id = ?`),
				attempts, machine.Storable(sendErr.Error()), next, n.Lane, n.DeliveryID).Exec(ctx)
			s.logger.Warn("notification delivery failed; retrying", "service", "delivery",
				"idempotency_key", n.IdempotencyKey, "target", n.Target, "attempts", attempts,
				"next_attempt_at", next, "error", sendErr)
		}
		if err != nil {
			return fmt.Errorf("recording delivery %d: %w", n.DeliveryID, err)
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	return state, nil
}

// Claim is a row of notification_claims, with its deliveries.
type Claim struct {
	Event          string     `bun:"event" json:"event"`
	Phase          int        `bun:"phase" json:"phase"`
	IdempotencyKey string     `bun:"idempotency_key" json:"idempotency_key"`
	ClaimedAt      time.Time  `bun:"claimed_at" json:"claimed_at"`
	Deliveries     []Delivery `bun:"-" json:"deliveries"`
}

// Delivery is a row of notification_deliveries.
type Delivery struct {
	IdempotencyKey string     `bun:"idempotency_key" json:"-"`
	Target         string     `bun:"target" json:"target"`
	State          string     `bun:"state" json:"state"`
	Attempts       int        `bun:"attempts" json:"attempts"`
	NextAttemptAt  time.Time  `bun:"next_attempt_at" json:"next_attempt_at"`
	LastError      *string    `bun:"last_error" json:"last_error,omitempty"`
	DeliveredAt    *time.Time `bun:"delivered_at" json:"delivered_at,omitempty"`
}

// Notifications lists the claims of an execution, oldest first, with their deliveries.
func (s *Store) Notifications(ctx context.Context, id string) ([]Claim, error) {
	if _, err := s.LoadExecution(ctx, id); err != nil {
		return nil, err
	}
	var claims []Claim
	err := s.db.NewRaw(s.q(`SELECT event, phase, idempotency_key, claimed_at FROM {s}.notification_claims
		WHERE lane = ? AND execution_id = ? ORDER BY claimed_at, event, phase`), LaneOf(id), id).Scan(ctx, &claims)
	if err != nil && !isNoRows(err) {
		return nil, fmt.Errorf("listing the notifications of %s: %w", id, err)
	}
	var deliveries []Delivery
	err = s.db.NewRaw(s.q(`SELECT d.idempotency_key, d.target, d.state, d.attempts, d.next_attempt_at, d.last_error, d.delivered_at
		FROM {s}.notification_deliveries d JOIN {s}.notification_claims c ON c.lane = d.lane AND c.idempotency_key = d.idempotency_key
		WHERE c.lane = ? AND c.execution_id = ? ORDER BY d.id`), LaneOf(id), id).Scan(ctx, &deliveries)
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
