// Command webhook-receiver receives the runtime's lifecycle events as signed webhooks. It runs an
// HTTP receiver and a runtime whose Config.Webhooks point at it, and shows:
//
//   - journey.VerifyWebhook: each request is checked against the shared secret (an HMAC-SHA256
//     of its timestamp and body) and for its age; a forged one is rejected with 401;
//   - dropping repeats: delivery is at least once, so a delivery can come again (after a timeout,
//     say, or a crash before it was recorded as delivered). The receiver keeps the idempotency
//     keys it has acted on, and acknowledges a repeat without acting on it again. The program
//     replays a delivery to show it.
//
// Run it from the repository:
//
//	go run ./examples/webhook-receiver
//
// It uses $DATABASE_URL when it is set. Otherwise it starts a throwaway PostgreSQL cluster from
// the local server binaries (apt-get install postgresql) and removes it when it ends.
package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/journey-go/journey"
	"github.com/journey-go/journey/devpg"
	"github.com/journey-go/journey/graph"
)

// tolerance is how far a request's timestamp may be from the receiver's clock. An older request
// is refused even with a good signature, which bounds how long a captured request can be
// replayed; within it, the idempotency keys catch repeats.
const tolerance = 5 * time.Minute

// signup sends a welcome email. An address that bounces fails the execution at once; a sent
// email completes it. Each outcome is a lifecycle event, which the runtime posts to the webhook.
var signup = graph.MustNew("signup", "v1", []graph.Node{
	graph.Input("email"),
	graph.Compute("welcome_email", graph.Needs("email"),
		func(ctx context.Context, in graph.Values) (any, error) {
			email := in.String("email")
			if strings.HasSuffix(email, ".invalid") {
				return nil, graph.Permanent(fmt.Errorf("%s bounced", email))
			}
			return "sent to " + email, nil
		}),
}, graph.CompletesWhen(graph.Provided("welcome_email")))

// receiver is the webhook endpoint. It reports each request it handles on receipts.
type receiver struct {
	secret   string
	receipts chan<- receipt

	mu   sync.Mutex
	seen map[string]bool // in production: a table with a unique key, written with the action
}

// receipt is what the receiver made of one request.
type receipt struct {
	status int
	event  journey.ExecutionEvent
	err    error
	// body and header are the request's, for the demo to replay it.
	body   []byte
	header http.Header
}

func (rc *receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rec := receipt{header: r.Header.Clone()}
	rec.body, rec.err = journey.VerifyWebhook(r, rc.secret, tolerance)
	if rec.err == nil {
		rec.err = json.Unmarshal(rec.body, &rec.event)
	}
	switch {
	case rec.err != nil:
		rec.status = http.StatusUnauthorized // not from the runtime: do not act on it
	case rc.actOnce(rec.event):
		rec.status = http.StatusNoContent
	default:
		rec.status = http.StatusOK // a repeat: acknowledged, so that it is not sent again
	}
	select {
	case rc.receipts <- rec:
	case <-r.Context().Done():
	}
	if rec.err != nil {
		http.Error(w, rec.err.Error(), rec.status)
		return
	}
	w.WriteHeader(rec.status)
}

// actOnce acts on an event unless its idempotency key was seen before, and reports whether it
// did. The key is taken from the body, which the signature covers, not from the
// Journey-Idempotency-Key header, which it does not.
func (rc *receiver) actOnce(e journey.ExecutionEvent) bool {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if rc.seen[e.IdempotencyKey] {
		return false
	}
	// Here a real receiver acts on the event: emails the customer, updates a CRM. Had that
	// failed, it would answer 5xx without recording the key, and the runtime would deliver the
	// event again later.
	rc.seen[e.IdempotencyKey] = true
	return true
}

func main() {
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	if err := runWithDatabase(logger); err != nil {
		fmt.Fprintf(os.Stderr, "webhook-receiver: %v\n", err)
		os.Exit(1)
	}
}

// runWithDatabase runs the example on $DATABASE_URL, or on a throwaway cluster.
func runWithDatabase(logger *slog.Logger) error {
	ctx, stopSignals := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stopSignals()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()

	url, stopDB, err := devpg.URLOrStart(ctx, logger)
	if err != nil {
		return fmt.Errorf("getting a database (set DATABASE_URL, or install the PostgreSQL server binaries): %w", err)
	}
	defer stopDB() // runs after run has stopped the runtime
	return run(ctx, os.Stdout, logger, url, journey.DefaultSchema)
}

// run starts the receiver and a runtime that posts to it, in schema of the database at
// databaseURL; then it signs up two users, replays a delivery and forges one, and prints what
// the receiver made of each request.
func run(ctx context.Context, out io.Writer, logger *slog.Logger, databaseURL, schema string) (err error) {
	secret := rand.Text() // shared by the runtime and the receiver; in production, from a secret store
	receipts := make(chan receipt, 8)
	ln, err := new(net.ListenConfig).Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("listening for webhooks: %w", err)
	}
	hookURL := "http://" + ln.Addr().String() + "/journey"
	mux := http.NewServeMux()
	mux.Handle("POST /journey", &receiver{secret: secret, receipts: receipts, seen: map[string]bool{}})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	defer func() { // after rt.Stop, deferred below: nothing is delivered any more
		sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer scancel()
		if serr := srv.Shutdown(sctx); serr != nil && err == nil {
			err = fmt.Errorf("shutting the receiver down: %w", serr)
		}
		if serr := <-served; !errors.Is(serr, http.ErrServerClosed) && err == nil {
			err = fmt.Errorf("serving webhooks: %w", serr)
		}
	}()

	rt, err := journey.New(ctx, journey.Config{
		DatabaseURL: databaseURL,
		Schema:      schema,
		Graphs:      []*graph.Graph{signup},
		Logger:      logger,
		Webhooks:    []journey.Webhook{{URL: hookURL, Secret: secret}}, // every event
	})
	if err != nil {
		return err
	}
	defer func() {
		sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer scancel()
		if serr := rt.Stop(sctx); serr != nil && err == nil {
			err = fmt.Errorf("stopping the runtime: %w", serr)
		}
	}()

	// Each signup's event reaches the receiver once it completes or fails.
	var last receipt
	for _, email := range []string{"ada@example.com", "bob@example.invalid"} {
		ex, err := rt.Start(ctx, signup, journey.WithValues(map[string]any{"email": email}))
		if err != nil {
			return fmt.Errorf("signing up %s: %w", email, err)
		}
		if last, err = nextReceipt(ctx, receipts, func(r receipt) bool { return r.event.ExecutionID == ex.ID }); err != nil {
			return fmt.Errorf("waiting for the event of %s: %w", email, err)
		}
		fmt.Fprintf(out, "signup of %s: received %s%s: %d, acted on\n", email, last.event.Type, failures(last.event), last.status)
	}

	// The same request again, as a redelivery would bring it: the signature holds, and the
	// idempotency key was seen.
	if err := post(ctx, hookURL, last.header, last.body); err != nil {
		return err
	}
	rec, err := nextReceipt(ctx, receipts, func(r receipt) bool { return r.event.IdempotencyKey == last.event.IdempotencyKey })
	if err != nil {
		return fmt.Errorf("waiting for the replay: %w", err)
	}
	fmt.Fprintf(out, "the same delivery again: %d, dropped as a repeat\n", rec.status)

	// A forgery: the last event turned into a completion, with the signature of the original.
	forged := bytes.Replace(last.body, []byte(journey.EventExecutionFailed), []byte(journey.EventExecutionCompleted), 1)
	if err := post(ctx, hookURL, last.header, forged); err != nil {
		return err
	}
	if rec, err = nextReceipt(ctx, receipts, func(r receipt) bool { return r.err != nil }); err != nil {
		return fmt.Errorf("waiting for the forgery: %w", err)
	}
	fmt.Fprintf(out, "a forged delivery: %d, rejected: %v\n", rec.status, rec.err)
	return nil
}

// nextReceipt waits for a receipt that matches, and skips the others: events of executions left
// over from an earlier run in the same schema, say.
func nextReceipt(ctx context.Context, receipts <-chan receipt, match func(receipt) bool) (receipt, error) {
	for {
		select {
		case r := <-receipts:
			if match(r) {
				return r, nil
			}
		case <-ctx.Done():
			return receipt{}, ctx.Err()
		}
	}
}

// failures describes the failed nodes of an execution.failed event.
func failures(e journey.ExecutionEvent) string {
	var s string
	for _, f := range e.FailedNodes {
		s += fmt.Sprintf(" (%s: %s)", f.Node, f.Error)
	}
	return s
}

// post sends body to url with the given headers, as the runtime does.
func post(ctx context.Context, url string, header http.Header, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header = header.Clone()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("posting to the receiver: %w", err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.Body.Close()
}
