package journey

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/journey-go/journey/persistence"
)

// EventType names a lifecycle event.
type EventType string

// Lifecycle events.
const (
	// EventExecutionFailed: a node of the execution failed for good (see ErrComputationFailed;
	// abandonment included).
	// It fires once per failure phase; Retry starts a new phase.
	EventExecutionFailed EventType = persistence.EventFailed
	// EventExecutionCompleted: the graph's CompletesWhen gate holds and nothing is pending or
	// running. It fires once per execution.
	EventExecutionCompleted EventType = persistence.EventCompleted
	// EventExecutionCanceled: the execution was canceled (Runtime.Cancel). It fires once.
	EventExecutionCanceled EventType = persistence.EventCanceled
)

// events are the lifecycle events, in the order they are documented.
var events = []EventType{EventExecutionFailed, EventExecutionCompleted, EventExecutionCanceled}

// Webhook headers.
const (
	HeaderEvent          = "Journey-Event"
	HeaderIdempotencyKey = "Journey-Idempotency-Key"
	HeaderTimestamp      = "Journey-Timestamp"
	// HeaderSignature is "v1=" and the hex HMAC-SHA256, keyed by the secret, of the timestamp
	// header, a dot, and the body.
	HeaderSignature = "Journey-Signature"
)

// ExecutionEvent is a lifecycle notification, passed to the Go handlers and POSTed as JSON to
// webhooks.
type ExecutionEvent struct {
	Type        EventType `json:"type"`
	ExecutionID string    `json:"execution_id"`
	Graph       string    `json:"graph"`
	Version     string    `json:"version"`
	// FailedNodes are the nodes that had failed for good when the event was claimed, for
	// EventExecutionFailed. A Retry before the delivery does not change them.
	FailedNodes []FailedNode `json:"failed_nodes,omitempty"`
	// Reason is why the execution was canceled, for EventExecutionCanceled.
	Reason string `json:"reason,omitempty"`
	// IdempotencyKey is the same at every delivery of the event: receivers drop repeats by it.
	IdempotencyKey string `json:"idempotency_key"`
	// OccurredAt is when the event was claimed.
	OccurredAt time.Time `json:"occurred_at"`
	// Runtime is the runtime that delivers the event to a Go handler, for the handler to read
	// the execution (Values, Load) or act on it with no package variable. Nil in a webhook's.
	Runtime *Runtime `json:"-"`
}

// FailedNode is a node that failed for good, with the number of its last attempt and its error.
type FailedNode struct {
	Node     string `json:"node"`
	Attempts int    `json:"attempts"`
	Error    string `json:"error"`
}

// Webhook receives lifecycle events as signed HTTP POSTs.
type Webhook struct {
	// URL is the http or https address to POST to.
	URL string
	// Secret signs each request (HMAC-SHA256); receivers check it with VerifyWebhook.
	Secret string
	// Events are the events it receives. Default: all.
	Events []EventType
}

func (w Webhook) wants(e EventType) bool {
	if len(w.Events) == 0 {
		return true
	}
	for _, want := range w.Events {
		if want == e {
			return true
		}
	}
	return false
}

func validateWebhooks(hooks []Webhook) []error {
	var errs []error
	seen := map[string]bool{}
	for i, w := range hooks {
		field := fmt.Sprintf("config: Webhooks[%d]", i)
		u, err := url.Parse(w.URL)
		switch {
		case w.URL == "":
			errs = append(errs, fmt.Errorf("%s.URL is empty: give the http or https address to POST events to", field))
		case err != nil:
			errs = append(errs, fmt.Errorf("%s.URL %q is not a URL: %w", field, w.URL, err))
		case !utf8.ValidString(w.URL) || strings.ContainsFunc(w.URL, unicode.IsControl):
			// Each replica lists its webhooks in its heartbeat, and each delivery names its own.
			errs = append(errs, fmt.Errorf("%s.URL %q is not valid UTF-8 with no control characters: percent-encode it", field, w.URL))
		case u.Scheme != "http" && u.Scheme != "https":
			errs = append(errs, fmt.Errorf("%s.URL %q: the scheme must be http or https", field, w.URL))
		case u.Host == "":
			errs = append(errs, fmt.Errorf("%s.URL %q has no host", field, w.URL))
		case seen[w.URL]:
			errs = append(errs, fmt.Errorf("%s.URL %q is listed twice", field, w.URL))
		}
		seen[w.URL] = true
		if w.Secret == "" {
			errs = append(errs, fmt.Errorf("%s.Secret is empty: set a secret to sign the requests with", field))
		}
		for _, e := range w.Events {
			if !slices.Contains(events, e) {
				errs = append(errs, fmt.Errorf("%s.Events: unknown event %q (use %q, %q or %q)", field, e,
					EventExecutionFailed, EventExecutionCompleted, EventExecutionCanceled))
			}
		}
	}
	return errs
}

// routes are the deliveries this replica can make: each handler, and each webhook for the
// events it wants.
func (c Config) routes() []persistence.Route {
	var out []persistence.Route
	if c.OnExecutionFailed != nil {
		out = append(out, persistence.Route{Event: persistence.EventFailed, Target: persistence.TargetHandler})
	}
	if c.OnExecutionCompleted != nil {
		out = append(out, persistence.Route{Event: persistence.EventCompleted, Target: persistence.TargetHandler})
	}
	if c.OnExecutionCanceled != nil {
		out = append(out, persistence.Route{Event: persistence.EventCanceled, Target: persistence.TargetHandler})
	}
	for _, w := range c.Webhooks {
		for _, e := range events {
			if w.wants(e) {
				out = append(out, persistence.Route{Event: string(e), Target: w.URL})
			}
		}
	}
	return out
}

// deliveryBackoff is 1s, doubling, capped at an hour.
func deliveryBackoff(attempts int) time.Duration {
	return time.Duration(math.Min(float64(time.Second)*math.Pow(2, float64(attempts-1)), float64(time.Hour)))
}

func toEvent(n *persistence.Notice) ExecutionEvent {
	e := ExecutionEvent{
		Type: EventType(n.Event), ExecutionID: n.ExecutionID, Graph: n.GraphName, Version: n.GraphVersion,
		IdempotencyKey: n.IdempotencyKey, OccurredAt: n.ClaimedAt, Reason: deref(n.CancelReason),
	}
	for _, f := range n.FailedNodes {
		e.FailedNodes = append(e.FailedNodes, FailedNode(f))
	}
	return e
}

// send delivers one notice: to the Go handler, or to a webhook.
func (r *Runtime) send(ctx context.Context, n *persistence.Notice) error {
	e := toEvent(n)
	if n.Target == persistence.TargetHandler {
		e.Runtime = r
		handler := r.cfg.OnExecutionFailed
		switch e.Type {
		case EventExecutionCompleted:
			handler = r.cfg.OnExecutionCompleted
		case EventExecutionCanceled:
			handler = r.cfg.OnExecutionCanceled
		}
		if handler == nil {
			return fmt.Errorf("no handler for %s on replica %s", e.Type, r.cfg.ReplicaID)
		}
		return callHandler(ctx, handler, e)
	}
	for _, w := range r.cfg.Webhooks {
		if w.URL == n.Target {
			return r.post(ctx, w, e)
		}
	}
	return fmt.Errorf("webhook %s is not configured on replica %s", n.Target, r.cfg.ReplicaID)
}

// callHandler runs a handler, and stops waiting for it when ctx ends.
func callHandler(ctx context.Context, handler func(context.Context, ExecutionEvent) error, e ExecutionEvent) error {
	done := make(chan error, 1)
	go func() {
		defer func() {
			if p := recover(); p != nil {
				done <- fmt.Errorf("handler panicked: %v", p)
			}
		}()
		done <- handler(ctx, e)
	}()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("handler did not return in time: %w", ctx.Err())
	}
}

// post sends a signed webhook request.
func (r *Runtime) post(ctx context.Context, w Webhook, e ExecutionEvent) error {
	body, err := json.Marshal(e)
	if err != nil {
		return fmt.Errorf("encoding the event: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.URL, bytes.NewReader(body))
	if err != nil {
		return err
	}
	ts := strconv.FormatInt(time.Now().Unix(), 10)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "journey-go")
	req.Header.Set(HeaderEvent, string(e.Type))
	req.Header.Set(HeaderIdempotencyKey, e.IdempotencyKey)
	req.Header.Set(HeaderTimestamp, ts)
	req.Header.Set(HeaderSignature, "v1="+sign(w.Secret, ts, body))
	resp, err := r.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("webhook %s answered %s", w.URL, resp.Status)
	}
	return nil
}

func sign(secret, ts string, body []byte) string {
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(ts))
	mac.Write([]byte("."))
	mac.Write(body)
	return hex.EncodeToString(mac.Sum(nil))
}

// maxWebhookBody bounds the body VerifyWebhook reads.
const maxWebhookBody = 10 << 20

// VerifyWebhook checks a webhook request: its signature, made with secret, and its age, which
// must be within tolerance of the receiver's clock. It returns the body, an ExecutionEvent in
// JSON. Receivers should also drop repeats by the idempotency key: delivery is at least once.
func VerifyWebhook(r *http.Request, secret string, tolerance time.Duration) ([]byte, error) {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxWebhookBody))
	if err != nil {
		return nil, fmt.Errorf("journey: reading the webhook body: %w", err)
	}
	ts := r.Header.Get(HeaderTimestamp)
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return nil, fmt.Errorf("journey: webhook has no valid %s header", HeaderTimestamp)
	}
	if age := time.Since(time.Unix(sec, 0)); age > tolerance || age < -tolerance {
		return nil, fmt.Errorf("journey: webhook timestamp is %v off, beyond the tolerance of %v", age.Round(time.Second), tolerance)
	}
	got, ok := strings.CutPrefix(r.Header.Get(HeaderSignature), "v1=")
	if !ok {
		return nil, fmt.Errorf("journey: webhook has no v1 signature in %s", HeaderSignature)
	}
	gotMAC, err := hex.DecodeString(got)
	if err != nil || !hmac.Equal(gotMAC, mustHex(sign(secret, ts, body))) {
		return nil, errors.New("journey: webhook signature does not match: wrong secret, or the body was altered")
	}
	return body, nil
}

func mustHex(s string) []byte {
	b, _ := hex.DecodeString(s) // made by sign: always valid
	return b
}

// Notification is a lifecycle event claimed for an execution, with its deliveries.
type Notification struct {
	Type           EventType
	Phase          int
	IdempotencyKey string
	ClaimedAt      time.Time
	Deliveries     []NotificationDelivery
}

// NotificationDelivery is the delivery of a notification to one target: "handler" or a webhook URL.
type NotificationDelivery struct {
	Target string
	// State is PENDING, DELIVERED, or DEAD once Config.NotificationRetryHorizon (or
	// MaxDeliveryAttempts) is used up. A delivery to a target that no replica can make, such as
	// a webhook since removed from every replica's configuration, stays PENDING.
	State         string
	Attempts      int
	NextAttemptAt time.Time
	LastError     string
	DeliveredAt   *time.Time
}

// Notifications lists the lifecycle events claimed for an execution, with their deliveries.
func (r *Runtime) Notifications(ctx context.Context, id string) ([]Notification, error) {
	if err := r.check(); err != nil {
		return nil, err
	}
	claims, err := r.store.Notifications(ctx, id)
	if err != nil {
		return nil, err
	}
	out := make([]Notification, len(claims))
	for i, c := range claims {
		out[i] = Notification{Type: EventType(c.Event), Phase: c.Phase, IdempotencyKey: c.IdempotencyKey, ClaimedAt: c.ClaimedAt}
		for _, d := range c.Deliveries {
			out[i].Deliveries = append(out[i].Deliveries, NotificationDelivery{
				Target: d.Target, State: d.State, Attempts: d.Attempts, NextAttemptAt: d.NextAttemptAt,
				LastError: deref(d.LastError), DeliveredAt: d.DeliveredAt,
			})
		}
	}
	return out, nil
}
