package journey_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/journey-go/journey"
	"github.com/journey-go/journey/graph"
	"github.com/journey-go/journey/internal/clock"
)

// received collects the events handlers were given.
type received struct {
	mu     sync.Mutex
	events []journey.ExecutionEvent
	more   chan struct{}
}

func newReceived() *received { return &received{more: make(chan struct{}, 1)} }

func (r *received) handler(ctx context.Context, e journey.ExecutionEvent) error {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
	select {
	case r.more <- struct{}{}:
	default:
	}
	return nil
}

func (r *received) all() []journey.ExecutionEvent {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]journey.ExecutionEvent(nil), r.events...)
}

// waitCount waits until at least n events arrived.
func (r *received) waitCount(t *testing.T, n int) {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for len(r.all()) < n {
		select {
		case <-r.more:
		case <-timeout:
			t.Fatalf("%d of %d events arrived", len(r.all()), n)
		}
	}
}

// waitDelivered waits until every delivery of the execution is settled.
func waitDelivered(t *testing.T, rt *journey.Runtime, id string, claims int) []journey.Notification {
	t.Helper()
	var ns []journey.Notification
	waitFor(t, "the notifications to be delivered", func() bool {
		var err error
		ns, err = rt.Notifications(context.Background(), id)
		require.NoError(t, err)
		if len(ns) != claims {
			return false
		}
		for _, n := range ns {
			for _, d := range n.Deliveries {
				if d.State != "DELIVERED" {
					return false
				}
			}
		}
		return true
	})
	return ns
}

func failingGraph() *graph.Graph {
	fail := func(ctx context.Context, in graph.Values) (any, error) {
		return nil, graph.Permanent(errors.New("broken"))
	}
	return graph.MustNew("failing", "v1", []graph.Node{
		graph.Input("x"),
		graph.Compute("a", graph.Needs("x"), fail),
		graph.Compute("b", graph.Needs("x"), fail),
	})
}

// brokenUntilFixed is a graph whose node y fails for good until fixed is set.
func brokenUntilFixed(name string, fixed *atomic.Bool) *graph.Graph {
	return graph.MustNew(name, "v1", []graph.Node{
		graph.Input("x"),
		graph.Compute("y", graph.Needs("x"), func(ctx context.Context, in graph.Values) (any, error) {
			if fixed.Load() {
				return "ok", nil
			}
			return nil, graph.Permanent(errors.New("broken"))
		}),
	})
}

func TestFailedEventIsClaimedOnceAcrossReplicas(t *testing.T) {
	t.Parallel()
	g := failingGraph()
	got := newReceived()
	cfg := testConfig(t, g)
	cfg.OnExecutionFailed = got.handler
	var rts []*journey.Runtime
	for i := range 3 {
		cfg.ReplicaID = fmt.Sprintf("r%d", i)
		rts = append(rts, newRuntime(t, cfg))
	}
	ctx := testCtx(t)
	const n = 50
	ids := make([]string, n)
	for i := range ids {
		ex, err := rts[i%3].Start(ctx, g)
		require.NoError(t, err)
		ids[i] = ex.ID
	}
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := rts[i%3].Set(ctx, id, "x", 1) // both nodes fail at about the same time
			require.NoError(t, err)
		}()
	}
	wg.Wait()
	got.waitCount(t, n)
	for _, id := range ids {
		ns := waitDelivered(t, rts[0], id, 1)
		require.Len(t, ns[0].Deliveries, 1)
		_, err := rts[1].Get(ctx, id, "a", journey.WaitAny())
		require.ErrorIs(t, err, journey.ErrComputationFailed)
		_, err = rts[1].Get(ctx, id, "b", journey.WaitAny())
		require.ErrorIs(t, err, journey.ErrComputationFailed)
	}
	perExecution := map[string]int{}
	for _, e := range got.all() {
		perExecution[e.ExecutionID]++
		require.Equal(t, journey.EventExecutionFailed, e.Type)
		require.Equal(t, "failing", e.Graph)
		require.NotEmpty(t, e.FailedNodes)
		require.Equal(t, "broken", e.FailedNodes[0].Error)
		require.Equal(t, e.ExecutionID+":execution.failed:0", e.IdempotencyKey)
	}
	require.Len(t, perExecution, n)
	for id, count := range perExecution {
		require.Equal(t, 1, count, "exactly one failed event for %s", id)
	}
}

func TestRetryRearmsTheFailedEvent(t *testing.T) {
	t.Parallel()
	var fixed atomic.Bool
	g := brokenUntilFixed("rearm", &fixed)
	got := newReceived()
	cfg := testConfig(t, g)
	cfg.OnExecutionFailed = got.handler
	rt := newRuntime(t, cfg)
	ctx := testCtx(t)
	ex, err := rt.Start(ctx, g)
	require.NoError(t, err)
	_, err = rt.Set(ctx, ex.ID, "x", 1)
	require.NoError(t, err)
	got.waitCount(t, 1)

	require.NoError(t, rt.Retry(ctx, ex.ID, "y"))
	got.waitCount(t, 2) // a second failure after Retry: a second event
	events := got.all()
	require.NotEqual(t, events[0].IdempotencyKey, events[1].IdempotencyKey)

	fixed.Store(true)
	require.NoError(t, rt.Retry(ctx, ex.ID, "y"))
	_, err = rt.Get(ctx, ex.ID, "y", journey.WaitAny())
	require.NoError(t, err)
	waitIdle(t, rt, ex.ID)
	ns := waitDelivered(t, rt, ex.ID, 2)
	require.Len(t, ns, 2, "Retry followed by success claims nothing")
	require.Len(t, got.all(), 2)
}

func TestCompletedEventFiresOnce(t *testing.T) {
	t.Parallel()
	nodes := func() []graph.Node {
		return []graph.Node{
			graph.Input("name"),
			graph.Compute("greeting", graph.Needs("name"), func(ctx context.Context, in graph.Values) (any, error) {
				return "hi " + in.String("name"), nil
			}),
		}
	}
	with := graph.MustNew("completes", "v1", nodes(), graph.CompletesWhen(graph.Provided("greeting")))
	without := graph.MustNew("never_completes", "v1", nodes())
	got := newReceived()
	cfg := testConfig(t, with, without)
	cfg.OnExecutionCompleted = got.handler
	rt := newRuntime(t, cfg)
	ctx := testCtx(t)

	ex, err := rt.Start(ctx, with)
	require.NoError(t, err)
	plain, err := rt.Start(ctx, without)
	require.NoError(t, err)
	for _, id := range []string{ex.ID, plain.ID} {
		_, err = rt.Set(ctx, id, "name", "Mario")
		require.NoError(t, err)
		_, err = rt.Get(ctx, id, "greeting", journey.WaitAny())
		require.NoError(t, err)
	}
	got.waitCount(t, 1)
	// More writes after completion claim nothing more.
	_, err = rt.Set(ctx, ex.ID, "name", "Luigi")
	require.NoError(t, err)
	_, err = rt.Get(ctx, ex.ID, "greeting", journey.WaitNewerThan(0))
	require.NoError(t, err)
	waitIdle(t, rt, ex.ID)
	waitDelivered(t, rt, ex.ID, 1)
	require.Len(t, got.all(), 1)
	require.Equal(t, journey.EventExecutionCompleted, got.all()[0].Type)
	require.Equal(t, ex.ID, got.all()[0].ExecutionID)
	ns, err := rt.Notifications(ctx, plain.ID)
	require.NoError(t, err)
	require.Empty(t, ns, "a graph without CompletesWhen never completes")
}

func TestWebhookRetriesAndSigns(t *testing.T) {
	t.Parallel()
	const secret = "s3cret"
	type hit struct {
		key  string
		body []byte
		err  error
	}
	hits := make(chan hit, 10)
	var calls atomic.Int64
	var tampered error
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(raw))
		body, err := journey.VerifyWebhook(r, secret, time.Minute)
		forged := r.Clone(r.Context())
		forged.Body = io.NopCloser(bytes.NewReader(append(bytes.Clone(raw), ' ')))
		_, tampered = journey.VerifyWebhook(forged, secret, time.Minute)
		hits <- hit{key: r.Header.Get(journey.HeaderIdempotencyKey), body: body, err: err}
		if calls.Add(1) <= 2 {
			http.Error(w, "not yet", http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)

	g := failingGraph()
	cfg := testConfig(t, g)
	cfg.Webhooks = []journey.Webhook{{URL: srv.URL, Secret: secret, Events: []journey.EventType{journey.EventExecutionFailed}}}
	cfg.Test.NotificationBackoff = func(int) time.Duration { return 10 * time.Millisecond }
	rt := newRuntime(t, cfg)
	ctx := testCtx(t)
	ex, err := rt.Start(ctx, g)
	require.NoError(t, err)
	_, err = rt.Set(ctx, ex.ID, "x", 1)
	require.NoError(t, err)

	var keys []string
	for range 3 {
		select {
		case h := <-hits:
			require.NoError(t, h.err, "the signature verifies")
			var e journey.ExecutionEvent
			require.NoError(t, json.Unmarshal(h.body, &e))
			require.Equal(t, ex.ID, e.ExecutionID)
			keys = append(keys, h.key)
		case <-ctx.Done():
			t.Fatal("the webhook was not called three times")
		}
	}
	require.Equal(t, []string{keys[0], keys[0], keys[0]}, keys, "one idempotency key")
	require.ErrorContains(t, tampered, "signature does not match", "a tampered body fails verification")
	ns := waitDelivered(t, rt, ex.ID, 1)
	d := ns[0].Deliveries[0]
	require.Equal(t, srv.URL, d.Target)
	require.Equal(t, 3, d.Attempts)
	require.NotNil(t, d.DeliveredAt)
	require.Equal(t, int64(3), calls.Load())

	_, err = journey.VerifyWebhook(httptest.NewRequestWithContext(t.Context(), http.MethodPost, "/", bytes.NewReader(nil)), secret, time.Minute)
	require.ErrorContains(t, err, journey.HeaderTimestamp)
}

func TestBadWebhookConfig(t *testing.T) {
	t.Parallel()
	g := onboardingGraph(t)
	for _, tc := range []struct {
		hook journey.Webhook
		want string
	}{
		{journey.Webhook{URL: "ftp://example.com/hook", Secret: "x"}, "Webhooks[0].URL"},
		{journey.Webhook{URL: "not a url at all", Secret: "x"}, "Webhooks[0].URL"},
		{journey.Webhook{URL: "https://example.com/hook"}, "Webhooks[0].Secret"},
		{journey.Webhook{URL: "https://example.com/hook", Secret: "x", Events: []journey.EventType{"execution.exploded"}}, "Webhooks[0].Events"},
	} {
		cfg := testConfig(t, g)
		cfg.Webhooks = []journey.Webhook{tc.hook}
		_, err := journey.New(context.Background(), cfg)
		require.ErrorContains(t, err, tc.want)
	}
}

func TestClaimByAReplicaWithoutTheWebhookReachesIt(t *testing.T) {
	t.Parallel()
	hits := make(chan journey.ExecutionEvent, 10)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var e journey.ExecutionEvent
		if err := json.NewDecoder(r.Body).Decode(&e); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		hits <- e
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)

	// Mid rolling deploy: the old replica serves the graph and makes the claim; the new one has
	// the webhook and serves another graph, so that it cannot be the claimer.
	g := failingGraph()
	old := testConfig(t, g)
	old.ReplicaID = "old"
	claimer := newRuntime(t, old)
	added := old
	added.ReplicaID = "new"
	added.Graphs = []*graph.Graph{onboardingGraph(t)}
	added.Webhooks = []journey.Webhook{{URL: srv.URL, Secret: "s3cret"}}
	newRuntime(t, added)

	ctx := testCtx(t)
	ex, err := claimer.Start(ctx, g)
	require.NoError(t, err)
	_, err = claimer.Set(ctx, ex.ID, "x", 1)
	require.NoError(t, err)
	var ns []journey.Notification
	waitFor(t, "the failure to be claimed", func() bool {
		ns, err = claimer.Notifications(ctx, ex.ID)
		require.NoError(t, err)
		return len(ns) == 1
	})
	require.Len(t, ns[0].Deliveries, 1, "the claim queues the webhook that another replica serves")
	require.Equal(t, srv.URL, ns[0].Deliveries[0].Target)
	select {
	case e := <-hits:
		require.Equal(t, ex.ID, e.ExecutionID)
		require.Equal(t, journey.EventExecutionFailed, e.Type)
	case <-ctx.Done():
		t.Fatal("the webhook was never called")
	}
	ns = waitDelivered(t, claimer, ex.ID, 1)
	require.Equal(t, 1, ns[0].Deliveries[0].Attempts)
}

func TestAReplicaTakesOnlyTheDeliveriesItCanMake(t *testing.T) {
	t.Parallel()
	completes := graph.MustNew("completes", "v1", []graph.Node{
		graph.Input("name"),
		graph.Compute("greeting", graph.Needs("name"), func(ctx context.Context, in graph.Values) (any, error) {
			return "hi " + in.String("name"), nil
		}),
	}, graph.CompletesWhen(graph.Provided("greeting")))
	failing := failingGraph()

	// A has only OnExecutionCompleted, B only OnExecutionFailed: both handlers are target "handler".
	completed := newReceived()
	cfgA := testConfig(t, completes)
	cfgA.ReplicaID = "a"
	cfgA.OnExecutionCompleted = completed.handler
	a := newRuntime(t, cfgA)
	entered := make(chan string, 10)
	release := make(chan struct{})
	cfgB := cfgA
	cfgB.ReplicaID = "b"
	cfgB.Graphs = []*graph.Graph{failing}
	cfgB.OnExecutionCompleted = nil
	cfgB.OnExecutionFailed = func(ctx context.Context, e journey.ExecutionEvent) error {
		entered <- e.ExecutionID
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	cfgB.NotificationTimeout = 25 * time.Second
	b := newRuntime(t, cfgB)
	ctx := testCtx(t)

	fail := func() string {
		ex, err := b.Start(ctx, failing)
		require.NoError(t, err)
		_, err = b.Set(ctx, ex.ID, "x", 1)
		require.NoError(t, err)
		return ex.ID
	}
	// B's delivery actor is busy with the first event while the second is claimed.
	first := fail()
	select {
	case id := <-entered:
		require.Equal(t, first, id)
	case <-ctx.Done():
		t.Fatal("B's handler was never called")
	}
	second := fail()
	waitFor(t, "the second failure to be claimed", func() bool {
		ns, err := b.Notifications(ctx, second)
		require.NoError(t, err)
		return len(ns) == 1
	})
	// A completion, claimed after the second failure: A's delivery actor takes the oldest due
	// delivery first, so once it has delivered this one it has passed the second failure by.
	ex, err := a.Start(ctx, completes)
	require.NoError(t, err)
	_, err = a.Set(ctx, ex.ID, "name", "Mario")
	require.NoError(t, err)
	completed.waitCount(t, 1)

	close(release)
	for _, id := range []string{first, second} {
		ns := waitDelivered(t, b, id, 1)
		require.Len(t, ns[0].Deliveries, 1)
		d := ns[0].Deliveries[0]
		require.Equal(t, 1, d.Attempts, "no attempt of %s was burnt by a replica without the handler", id)
		require.Empty(t, d.LastError)
	}
	require.Len(t, completed.all(), 1)
	require.Equal(t, ex.ID, completed.all()[0].ExecutionID)
}

func TestDeliveryRetriesUntilTheHorizon(t *testing.T) {
	t.Parallel()
	const horizon = journey.DefaultNotificationRetryHorizon
	var calls atomic.Int64
	stub := clock.NewStub(time.Now())
	g := failingGraph()
	cfg := testConfig(t, g)
	cfg.Test.Clock = stub
	cfg.OnExecutionFailed = func(ctx context.Context, e journey.ExecutionEvent) error {
		calls.Add(1)
		return errors.New("receiver down")
	}
	rt := newRuntime(t, cfg)
	ctx := testCtx(t)
	ex, err := rt.Start(ctx, g)
	require.NoError(t, err)
	_, err = rt.Set(ctx, ex.ID, "x", 1)
	require.NoError(t, err)

	var claimedAt time.Time
	delivery := func() journey.NotificationDelivery {
		ns, err := rt.Notifications(ctx, ex.ID)
		require.NoError(t, err)
		require.Len(t, ns, 1)
		require.Len(t, ns[0].Deliveries, 1)
		claimedAt = ns[0].ClaimedAt
		return ns[0].Deliveries[0]
	}
	waitFor(t, "the first attempt", func() bool {
		ns, err := rt.Notifications(ctx, ex.ID)
		require.NoError(t, err)
		return len(ns) == 1 && ns[0].Deliveries[0].Attempts == 1
	})
	d := delivery()
	// attemptAt moves the clock to at and waits for the attempt it makes due.
	attemptAt := func(at time.Time) {
		t.Helper()
		stub.Set(at)
		waitFor(t, "the next attempt", func() bool { return delivery().Attempts == d.Attempts+1 })
		d = delivery()
		if d.State == "PENDING" {
			require.LessOrEqual(t, d.NextAttemptAt.Sub(at), time.Hour, "the backoff is capped at an hour")
			require.False(t, d.NextAttemptAt.After(claimedAt.Add(horizon)), "no attempt is planned past the horizon")
		}
	}
	// Attempt after attempt, as time goes, past the 10 attempts and 8.5 minutes that used to kill it.
	for stub.Now().Sub(claimedAt) < 9*time.Minute {
		attemptAt(d.NextAttemptAt)
		require.Equal(t, "PENDING", d.State, "still retried %v after the event", stub.Now().Sub(claimedAt))
	}
	attemptAt(claimedAt.Add(23 * time.Hour))
	require.Equal(t, "PENDING", d.State, "still retried 23 hours after the event")
	attemptAt(claimedAt.Add(horizon - time.Minute))
	require.Equal(t, "PENDING", d.State, "still retried just before the horizon")
	require.WithinDuration(t, claimedAt.Add(horizon), d.NextAttemptAt, 0, "a last attempt at the horizon")
	attemptAt(d.NextAttemptAt)
	require.Equal(t, "DEAD", d.State, "dead once the horizon has passed")
	require.Contains(t, d.LastError, "receiver down")
	require.Equal(t, int64(d.Attempts), calls.Load(), "every attempt called the handler")
}

func TestFailedNodesAreThoseOfTheClaim(t *testing.T) {
	t.Parallel()
	var fixed atomic.Bool
	g := brokenUntilFixed("fixed_later", &fixed)
	stub := clock.NewStub(time.Now())
	events := make(chan journey.ExecutionEvent, 10)
	var calls atomic.Int64
	cfg := testConfig(t, g)
	cfg.Test.Clock = stub
	cfg.OnExecutionFailed = func(ctx context.Context, e journey.ExecutionEvent) error {
		events <- e
		if calls.Add(1) == 1 {
			return errors.New("receiver down")
		}
		return nil
	}
	rt := newRuntime(t, cfg)
	ctx := testCtx(t)
	ex, err := rt.Start(ctx, g)
	require.NoError(t, err)
	_, err = rt.Set(ctx, ex.ID, "x", 1)
	require.NoError(t, err)
	want := []journey.FailedNode{{Node: "y", Attempts: 1, Error: "broken"}}
	next := func() journey.ExecutionEvent {
		select {
		case e := <-events:
			return e
		case <-ctx.Done():
			t.Fatal("the handler was not called")
			return journey.ExecutionEvent{}
		}
	}
	require.Equal(t, want, next().FailedNodes)

	// Retried and fixed before the delivery's next attempt, which the frozen clock holds back.
	fixed.Store(true)
	require.NoError(t, rt.Retry(ctx, ex.ID, "y"))
	_, err = rt.Get(ctx, ex.ID, "y", journey.WaitAny())
	require.NoError(t, err)
	stub.Advance(time.Minute)
	require.Equal(t, want, next().FailedNodes, "the event reports the failure it announces")
	waitDelivered(t, rt, ex.ID, 1)
}

func TestSlowDeliveryOutlivesTheIdleTransactionTimeout(t *testing.T) {
	t.Parallel()
	g := failingGraph()
	cfg := testConfig(t, g)
	u, err := url.Parse(cfg.DatabaseURL)
	require.NoError(t, err)
	q := u.Query()
	q.Set("idle_in_transaction_session_timeout", "1000") // as an operator may set it on every connection
	u.RawQuery = q.Encode()
	cfg.DatabaseURL = u.String()
	var calls atomic.Int64
	cfg.OnExecutionFailed = func(ctx context.Context, e journey.ExecutionEvent) error {
		calls.Add(1)
		select { // a slow receiver: its delivery's transaction stays idle longer than the timeout
		case <-time.After(2 * time.Second):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	rt := newRuntime(t, cfg)
	ctx := testCtx(t)
	ex, err := rt.Start(ctx, g)
	require.NoError(t, err)
	_, err = rt.Set(ctx, ex.ID, "x", 1)
	require.NoError(t, err)
	ns := waitDelivered(t, rt, ex.ID, 1)
	require.Len(t, ns[0].Deliveries, 1)
	require.Equal(t, 1, ns[0].Deliveries[0].Attempts)
	require.Equal(t, int64(1), calls.Load())
}
