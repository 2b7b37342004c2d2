package journeyui_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/journey-go/journey"
	"github.com/journey-go/journey/graph"
	"github.com/journey-go/journey/internal/clock"
	"github.com/journey-go/journey/internal/pgtest"
	"github.com/journey-go/journey/journeyui"
	"github.com/journey-go/journey/migrations"
	"github.com/journey-go/journey/persistence"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// bundle is a schema that a real runtime filled: one execution that succeeded, and one whose
// "charge" node failed for good (until fixed is set).
type bundle struct {
	schema   string
	db       *persistence.Store
	okID     string
	failedID string
	fixed    *atomic.Bool
	charges  *atomic.Int64
	opts     journeyui.Options
}

const replicaID = "replica-ui-test"

func setup(t *testing.T) *bundle {
	t.Helper()
	b := &bundle{schema: pgtest.Schema(t), fixed: new(atomic.Bool), charges: new(atomic.Int64)}
	g := graph.MustNew("shop", "v1", []graph.Node{
		graph.Input("order"),
		graph.Compute("charge", graph.Needs("order"), func(ctx context.Context, in graph.Values) (any, error) {
			b.charges.Add(1)
			if in.String("order") == "bad" && !b.fixed.Load() {
				return nil, graph.Permanent(errors.New("card declined: insufficient funds"))
			}
			return "charged " + in.String("order"), nil
		}),
		graph.Compute("receipt", graph.Needs("charge"), func(ctx context.Context, in graph.Values) (any, error) {
			return "receipt for " + in.String("charge"), nil
		}),
	})
	// The sweeper's interval is an hour: a request is carried out because its NOTIFY wakes the
	// replica, not by a sweep.
	rt, err := journey.New(t.Context(), journey.Config{
		DatabaseURL: pgtest.URL(t), Schema: b.schema, Graphs: []*graph.Graph{g}, ReplicaID: replicaID,
		PollInterval: 100 * time.Millisecond, SweepInterval: time.Hour, Logger: slog.New(slog.DiscardHandler),
	})
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		require.NoError(t, rt.Stop(ctx))
	})
	ctx := t.Context()
	ok, err := rt.Start(ctx, g, journey.WithKey("order-good"), journey.WithValues(map[string]any{"order": "good"}))
	require.NoError(t, err)
	failed, err := rt.Start(ctx, g, journey.WithValues(map[string]any{"order": "bad"}))
	require.NoError(t, err)
	b.okID, b.failedID = ok.ID, failed.ID
	_, err = rt.Get(ctx, ok.ID, "receipt", journey.WaitAny())
	require.NoError(t, err)
	_, err = rt.Get(ctx, failed.ID, "charge", journey.WaitAny())
	require.ErrorIs(t, err, journey.ErrComputationFailed)

	db := pgtest.DB(t)
	b.opts = journeyui.Options{DB: db, Schema: b.schema, ActionWait: 30 * time.Second, Logger: slog.New(slog.DiscardHandler)}
	b.db = store(t, b.schema)
	return b
}

// store is a Store without graphs on schema, as the dashboard has.
func store(t *testing.T, schema string) *persistence.Store {
	t.Helper()
	s, err := persistence.New(persistence.Config{DB: pgtest.BunDB(t, pgtest.URL(t)), Schema: schema})
	require.NoError(t, err)
	require.NoError(t, s.ReadLayout(t.Context()))
	return s
}

// serve serves the dashboard with opts on loopback, for the test.
func serve(t *testing.T, opts journeyui.Options) *httptest.Server {
	t.Helper()
	h, err := journeyui.Handler(t.Context(), opts)
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

// browser starts a headless Chromium and returns a context for chromedp.Run. Without Chromium
// the test fails, unless JOURNEY_SKIP_BROWSER=1.
func browser(t *testing.T) context.Context {
	t.Helper()
	path := "/usr/bin/chromium"
	if _, err := os.Stat(path); err != nil {
		if path, err = exec.LookPath("chromium"); err != nil {
			if os.Getenv("JOURNEY_SKIP_BROWSER") == "1" {
				t.Skip("no chromium, and JOURNEY_SKIP_BROWSER=1")
			}
			t.Fatal("chromium is not installed: install it (apt-get install chromium), or set JOURNEY_SKIP_BROWSER=1 to skip the browser tests")
		}
	}
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(path), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck, chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1280, 900),
		chromedp.Flag("disable-quic", true), chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true))
	ctx, cancel := chromedp.NewContext(allocCtx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	require.NoError(t, chromedp.Do(ctx), "starting chromium") // without a deadline: it would stop the browser
	return ctx
}

// do runs steps in the browser with a generous deadline: the machine may be busy.
func do(t *testing.T, ctx context.Context, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	require.NoError(t, chromedp.Do(ctx, steps...))
}

// get runs an action that reads the page, with the same deadline.
func get[T any](t *testing.T, ctx context.Context, action chromedp.Action[T]) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, action)
	require.NoError(t, err)
	return v
}

// nodesJS reads the state of each node of the picture.
const nodesJS = `Object.fromEntries([...document.querySelectorAll('#graph g.node')].map(g => [g.dataset.node, g.dataset.state]))`

func TestDashboardInBrowser(t *testing.T) {
	t.Parallel()
	b := setup(t)
	srv := serve(t, b.opts)
	ctx := browser(t)

	// Overview: the graph's row counts the failed execution.
	do(t, ctx, chromedp.Navigate(srv.URL+"/"))
	require.Equal(t, "1", get(t, ctx, chromedp.Text(chromedp.CSS(`#graphs tr[data-graph="shop@v1"] a.state-failed`))))

	// Executions: the failed one is listed, in the failed state; the filter keeps it alone.
	do(t, ctx, chromedp.Navigate(srv.URL+"/executions"))
	require.Equal(t, "failed", get(t, ctx, chromedp.Text(chromedp.CSS(`#executions tr[data-id="`+b.failedID+`"] .badge`))))
	do(t, ctx, chromedp.SetValue(chromedp.CSS(`select[name=state]`), "failed"),
		chromedp.Click(chromedp.CSS(`form.filters button`)),
		chromedp.WaitReady(chromedp.CSS(`select[name=state] option[value=failed][selected]`)))
	const listed = `[...document.querySelectorAll('#executions tr[data-id]')].map(r => r.dataset.id)`
	require.Equal(t, []string{b.failedID}, get(t, ctx, chromedp.Evaluate[[]string](listed)))

	// The search by key finds the execution that holds it, and shows its key.
	do(t, ctx, chromedp.Navigate(srv.URL+"/executions"), chromedp.SetValue(chromedp.CSS(`input[name=key]`), "order-good"),
		chromedp.Click(chromedp.CSS(`form.filters button`)),
		chromedp.WaitReady(chromedp.CSS(`input[name=key][value="order-good"]`)))
	require.Equal(t, []string{b.okID}, get(t, ctx, chromedp.Evaluate[[]string](listed)))
	require.Equal(t, "order-good", get(t, ctx, chromedp.Text(chromedp.CSS(`#executions tr[data-id="`+b.okID+`"] td.key`))))
	do(t, ctx, chromedp.Click(chromedp.CSS(`#executions a`)), chromedp.WaitVisible(chromedp.CSS(`#graph`)))
	require.Equal(t, "order-good", get(t, ctx, chromedp.Text(chromedp.CSS(`#execution-key`))))
	do(t, ctx, chromedp.Navigate(srv.URL+"/executions?key=nobody"))
	require.Empty(t, get(t, ctx, chromedp.Evaluate[[]string](listed)))
	do(t, ctx, chromedp.Navigate(srv.URL+"/executions?state=failed"))

	// Execution: its error text, and the picture with one element per node, coloured by state.
	do(t, ctx, chromedp.Click(chromedp.CSS(`#executions a`)), chromedp.WaitVisible(chromedp.CSS(`#graph`)))
	require.Contains(t, get(t, ctx, chromedp.Text(chromedp.CSS(`#attempts tr[data-node="charge"] .error-text`))),
		"card declined: insufficient funds")
	require.Equal(t, map[string]string{"order": "set", "charge": "failed", "receipt": "waiting"},
		get(t, ctx, chromedp.Evaluate[map[string]string](nodesJS)))
	if path := os.Getenv("JOURNEY_UI_SCREENSHOT"); path != "" {
		require.NoError(t, os.WriteFile(path, get(t, ctx, chromedp.FullScreenshot(100)), 0o644))
	}

	// Retry: a replica carries it out, and charge runs again (and succeeds, now that it is fixed).
	b.fixed.Store(true)
	before := b.charges.Load()
	do(t, ctx, chromedp.Click(chromedp.CSS(`button.retry[data-node="charge"]`)), chromedp.WaitVisible(chromedp.CSS(`#flash`)))
	require.Contains(t, get(t, ctx, chromedp.Text(chromedp.CSS(`#flash`))), "carried out by replica "+replicaID)
	require.Eventually(t, func() bool {
		d, err := b.db.Inspect(t.Context(), b.failedID)
		require.NoError(t, err)
		return len(d.Values) == 3
	}, 30*time.Second, 50*time.Millisecond, "charge and receipt are set after the retry")
	require.Greater(t, b.charges.Load(), before)
	do(t, ctx, chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS(`#graph`)))
	require.Equal(t, map[string]string{"order": "set", "charge": "set", "receipt": "set"},
		get(t, ctx, chromedp.Evaluate[map[string]string](nodesJS)))

	// Archive, then Unarchive.
	do(t, ctx, chromedp.Click(chromedp.CSS(`#archive`)), chromedp.WaitVisible(chromedp.CSS(`#unarchive`)))
	require.Equal(t, "archived", get(t, ctx, chromedp.Text(chromedp.CSS(`#execution-state`))))
	do(t, ctx, chromedp.Click(chromedp.CSS(`#unarchive`)), chromedp.WaitVisible(chromedp.CSS(`#archive`)))
	require.NotEqual(t, "archived", get(t, ctx, chromedp.Text(chromedp.CSS(`#execution-state`))))

	// Replicas and reclaims.
	do(t, ctx, chromedp.Navigate(srv.URL+"/replicas"))
	require.Equal(t, "live", get(t, ctx, chromedp.Text(chromedp.CSS(`#replicas tr[data-replica="`+replicaID+`"] .badge`))))
	do(t, ctx, chromedp.Navigate(srv.URL+"/reclaims"))
	require.Contains(t, get(t, ctx, chromedp.Text(chromedp.CSS(`#reclaims`))), "Nothing was reclaimed in the last hour.")

	// Read-only: no button on the execution's page, and its POSTs are refused.
	ro := b.opts
	ro.ReadOnly = true
	roSrv := serve(t, ro)
	do(t, ctx, chromedp.Navigate(roSrv.URL+"/executions/"+b.okID), chromedp.WaitVisible(chromedp.CSS(`#graph`)))
	require.Zero(t, get(t, ctx, chromedp.Evaluate[int](`document.querySelectorAll('button, form[method=post]').length`)))
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, roSrv.URL+"/executions/"+b.okID+"/archive", nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	_ = resp.Body.Close()
	require.Equal(t, http.StatusForbidden, resp.StatusCode)
}

// migrated returns dashboard options on a freshly migrated schema.
func migrated(t *testing.T) journeyui.Options {
	t.Helper()
	schema := pgtest.Schema(t)
	_, err := migrations.Migrate(t.Context(), pgtest.BunDB(t, pgtest.URL(t)), schema, nil)
	require.NoError(t, err)
	return journeyui.Options{DB: pgtest.DB(t), Schema: schema, Logger: slog.New(slog.DiscardHandler)}
}

func TestActionsNeedTheCSRFToken(t *testing.T) {
	t.Parallel()
	opts := migrated(t)
	srv := serve(t, opts)
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	client := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	post := func(form url.Values, header http.Header) int {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL+"/executions/nope/archive", strings.NewReader(form.Encode()))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		for k, v := range header {
			req.Header[k] = v
		}
		resp, err := client.Do(req)
		require.NoError(t, err)
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	// No cookie, no token.
	require.Equal(t, http.StatusForbidden, post(url.Values{}, nil))
	// The cookie of a page, but a wrong token.
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL+"/", nil)
	require.NoError(t, err)
	resp, err := client.Do(req)
	require.NoError(t, err)
	_ = resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, http.StatusForbidden, post(url.Values{"csrf": {strings.Repeat("0", 64)}}, nil))
	// The page's own token gets through to the action, which finds no such execution.
	token := csrfOf(t, client, srv.URL+"/")
	require.Equal(t, http.StatusNotFound, post(url.Values{"csrf": {token}}, nil))
	// From another site, even with the token.
	require.Equal(t, http.StatusForbidden, post(url.Values{"csrf": {token}}, http.Header{"Sec-Fetch-Site": {"cross-site"}}))
}

// csrfOf reads the CSRF token that the forms of a page carry, from its csrf-token meta element.
func csrfOf(t *testing.T, client *http.Client, pageURL string) string {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, pageURL, nil)
	require.NoError(t, err)
	resp, err := client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body := new(strings.Builder)
	_, err = io.Copy(body, resp.Body)
	require.NoError(t, err)
	i := strings.Index(body.String(), `name="csrf-token" content="`)
	require.GreaterOrEqual(t, i, 0, "the page carries its CSRF token")
	return body.String()[i+len(`name="csrf-token" content="`):][:64]
}

func TestListenRefusesNonLoopbackWithoutAuth(t *testing.T) {
	t.Parallel()
	opts := migrated(t)
	for _, addr := range []string{"0.0.0.0:0", ":0", "192.0.2.1:8233", "example.com:8233"} {
		_, err := journeyui.Listen(t.Context(), addr, opts)
		require.ErrorIs(t, err, journeyui.ErrUnprotected, addr)
		require.ErrorContains(t, err, "--token", addr)
	}
	serveOnce := func(addr string, opts journeyui.Options) string {
		srv, err := journeyui.Listen(t.Context(), addr, opts)
		require.NoError(t, err, addr)
		ctx, cancel := context.WithCancel(t.Context())
		cancel() // serve, then shut down at once
		require.NoError(t, srv.Serve(ctx))
		return srv.URL()
	}
	require.Regexp(t, `^http://127\.0\.0\.1:\d+/$`, serveOnce("localhost:0", opts))
	withToken := opts
	withToken.Token = "s3cret"
	require.Regexp(t, `^http://127\.0\.0\.1:\d+/\?token=s3cret$`, serveOnce("127.0.0.1:0", withToken))
}

func TestTokenAndBasicAuth(t *testing.T) {
	t.Parallel()
	opts := migrated(t)
	opts.Token = "s3cret"
	srv := serve(t, opts)
	// get returns the status and the Location header of a GET of path.
	get := func(client *http.Client, path string, header http.Header) (status int, location string) {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL+path, nil)
		require.NoError(t, err)
		if header != nil {
			req.Header = header
		}
		resp, err := client.Do(req)
		require.NoError(t, err)
		_ = resp.Body.Close()
		return resp.StatusCode, resp.Header.Get("Location")
	}
	status := func(client *http.Client, path string, header http.Header) int {
		status, _ := get(client, path, header)
		return status
	}
	plain := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	require.Equal(t, http.StatusUnauthorized, status(plain, "/executions", nil))
	require.Equal(t, http.StatusUnauthorized, status(plain, "/executions?token=wrong", nil))
	require.Equal(t, http.StatusOK, status(plain, "/executions", http.Header{"Authorization": {"Bearer s3cret"}}))
	// ?token= sets a cookie and leads to the same page without the token in its address.
	code, location := get(plain, "/executions?state=failed&token=s3cret", nil)
	require.Equal(t, http.StatusSeeOther, code)
	require.Equal(t, "/executions?state=failed", location)
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	browserLike := &http.Client{Jar: jar}
	require.Equal(t, http.StatusOK, status(browserLike, "/executions?token=s3cret", nil))
	require.Equal(t, http.StatusOK, status(browserLike, "/replicas", nil))

	opts.Token, opts.BasicAuth = "", &journeyui.BasicAuth{User: "ops", Password: "pw"}
	basic := serve(t, opts)
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, basic.URL+"/", nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	_ = resp.Body.Close()
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	require.Contains(t, resp.Header.Get("WWW-Authenticate"), "Basic")
	req.SetBasicAuth("ops", "pw")
	resp, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	_ = resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
}

func TestBadInputIsShownAndChangesNothing(t *testing.T) {
	t.Parallel()
	srv := serve(t, migrated(t))
	for path, want := range map[string]string{
		"/executions?state=stuck":        `unknown state &#34;stuck&#34;`,
		"/executions?where=nonode":       `bad filter &#34;nonode&#34;: want node=value`,
		"/executions?graph=nope":         `no replica has recorded graph &#34;nope&#34;`,
		"/executions?limit=0":            `bad limit &#34;0&#34;`,
		"/executions?after=yesterday":    `bad cursor &#34;yesterday&#34;`,
		"/executions?version=v1":         `a version (&#34;v1&#34;) needs a graph name too`,
		"/executions/NOPE":               `execution not found: &#34;NOPE&#34;`,
		"/executions/NOPE/retry?node=ch": `Method Not Allowed`,
		// Text that cannot reach PostgreSQL is refused before SQL, naming the field.
		"/executions?graph=a%00b":    `invalid text: graph &#34;a\x00b&#34;: it holds a NUL character (byte 1)`,
		"/executions?graph=%FF":      `invalid text: graph &#34;\xff&#34;: it is not valid UTF-8`,
		"/executions?key=k%00":       `invalid text: key &#34;k\x00&#34;: it holds a NUL character (byte 1)`,
		"/executions/a%00b":          `invalid text: execution id &#34;a\x00b&#34;`,
		"/executions?where=ch%3D%00": `invalid value: the value of the filter on node &#34;ch&#34;: it holds a NUL character`,
	} {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL+path, nil)
		require.NoError(t, err)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		body, err := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		require.NoError(t, err)
		require.Contains(t, []int{http.StatusBadRequest, http.StatusNotFound, http.StatusMethodNotAllowed}, resp.StatusCode, path)
		require.Contains(t, string(body), want, path)
	}
}

// The execution's page says how each failed node failed: a graph.Permanent error at attempt 2 of
// 4 is not a budget used up.
func TestExecutionPageSaysHowANodeFailed(t *testing.T) {
	t.Parallel()
	var charges atomic.Int64
	g := graph.MustNew("pay", "v1", []graph.Node{
		graph.Input("order"),
		graph.Compute("charge", graph.Needs("order"), func(ctx context.Context, in graph.Values) (any, error) {
			if charges.Add(1) == 1 {
				return nil, errors.New("gateway timeout")
			}
			return nil, graph.Permanent(errors.New("card declined"))
		}, graph.MaxAttempts(4), graph.Backoff(func(int) time.Duration { return 0 })),
		graph.Compute("always", graph.Needs("order"), func(ctx context.Context, in graph.Values) (any, error) {
			return nil, errors.New("boom")
		}, graph.MaxAttempts(2), graph.Backoff(func(int) time.Duration { return 0 })),
	})
	opts := migrated(t)
	rt, err := journey.New(t.Context(), journey.Config{DatabaseURL: pgtest.URL(t), Schema: opts.Schema, Graphs: []*graph.Graph{g},
		Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		require.NoError(t, rt.Stop(ctx))
	})
	ex, err := rt.Start(t.Context(), g, journey.WithValues(map[string]any{"order": "bad"}))
	require.NoError(t, err)
	for _, node := range []string{"charge", "always"} {
		_, err = rt.Get(t.Context(), ex.ID, node, journey.WaitAny())
		require.ErrorIs(t, err, journey.ErrComputationFailed)
	}

	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, serve(t, opts).URL+"/executions/"+ex.ID, nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, string(body), `<li data-node="charge"><code>charge</code> failed permanently at attempt 2 of 4: `+
		`<span class="error-text">card declined</span>`)
	require.Contains(t, string(body), `<li data-node="always"><code>always</code> used up its 2 attempts: `+
		`<span class="error-text">boom</span>`)
}

// The insights page shows the API's numbers: the funnel's, and every point of its charts.
func TestInsightsPageInBrowser(t *testing.T) {
	t.Parallel()
	b := setup(t)
	srv := serve(t, b.opts)
	ctx := browser(t)
	// A reading rolls what changed for a while and leaves the rest to the next: on a busy machine,
	// the first may not be up to date (Pending), and then neither would the page be.
	var want *persistence.Insights
	for want == nil || want.Pending > 0 {
		var err error
		want, err = b.db.Insights(t.Context(), persistence.InsightsQuery{Graph: "shop", Since: time.Hour}.WithDefaults())
		require.NoError(t, err)
	}
	require.EqualValues(t, 2, want.Executions)

	do(t, ctx, chromedp.Navigate(srv.URL+"/"), chromedp.Click(chromedp.CSS(`#graphs tr[data-graph="shop@v1"] a.insights`)),
		chromedp.WaitVisible(chromedp.CSS(`#funnel`)))
	do(t, ctx, chromedp.Navigate(srv.URL+"/insights/shop?since=1h"), chromedp.WaitVisible(chromedp.CSS(`#funnel`)))
	require.Equal(t, "2", get(t, ctx, chromedp.Text(chromedp.CSS(`#executions`))))
	type row struct{ Reached, Ends, FailedForGood, Attempts, Failures string }
	got := get(t, ctx, chromedp.Evaluate[map[string]row](`Object.fromEntries([...document.querySelectorAll('#funnel tr[data-node]')].map(r =>
		[r.dataset.node, {Reached: r.querySelector('.reached').textContent, Ends: r.querySelector('.ends').textContent,
		 FailedForGood: r.querySelector('.failed-for-good').textContent,
		 Attempts: r.querySelector('.attempts').textContent, Failures: r.querySelector('.failures').textContent}]))`))
	wantRows := map[string]row{}
	for _, n := range want.Nodes {
		wantRows[n.Node] = row{fmt.Sprint(n.Reached), fmt.Sprint(n.EndsHere), fmt.Sprint(n.FailedForGood), fmt.Sprint(n.Attempts),
			fmt.Sprint(n.Failures)}
	}
	require.Equal(t, wantRows, got)
	require.Equal(t, row{"1", "1", "1", "2", "1"}, got["charge"], "one charge failed for good, where its execution ends; the other succeeded")

	// Each chart has a point per bucket, whose value is the series'.
	points := get(t, ctx, chromedp.Evaluate[map[string][]string](`(() => { const out = {};
		for (const c of document.querySelectorAll('#chart-throughput circle, #chart-failures circle'))
			(out[c.dataset.series] ||= []).push(c.dataset.value);
		return out; })()`))
	var started, succeeded, failed, failedForGood []string
	for _, p := range want.Series {
		started, succeeded, failed = append(started, fmt.Sprint(p.Started)), append(succeeded, fmt.Sprint(p.Succeeded)),
			append(failed, fmt.Sprint(p.Failed))
		failedForGood = append(failedForGood, fmt.Sprint(p.FailedForGood))
	}
	require.Equal(t, started, points["started"])
	require.Equal(t, succeeded, points["succeeded"])
	require.Equal(t, failed, points["failed"])
	require.Equal(t, failedForGood, points["failed for good"])
	require.Equal(t, "1", failedForGood[len(failedForGood)-1])

	// A window that the series cannot hold is refused, naming the limit.
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL+"/insights/shop?since=2562047h", nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.Contains(t, string(body), "an insights window or bucket is 100 years (876000h0m0s) at most (got 2562047h0m0s")
	if path := os.Getenv("JOURNEY_UI_INSIGHTS_SCREENSHOT"); path != "" {
		require.NoError(t, os.WriteFile(path, get(t, ctx, chromedp.FullScreenshot(100)), 0o644))
	}
}

// The execution page's Cancel button, with its reason and the page's CSRF token, cancels the
// execution; the page then says why, and has no Cancel button; the failed list shows the node
// that failed and its error, and the canceled list the reason.
func TestCancelButton(t *testing.T) {
	t.Parallel()
	b := setup(t)
	srv, client := session(t, b.opts)
	get := func(path string) string {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL+path, nil)
		require.NoError(t, err)
		resp, err := client.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return string(body)
	}
	require.Contains(t, get("/executions?state=failed"), "<code>charge</code>: card declined: insufficient funds")
	page := "/executions/" + b.okID
	require.Contains(t, get(page), `<button id="cancel">`)

	body := postForm(t, client, srv.URL+page+"/cancel", url.Values{"csrf": {csrfOf(t, client, srv.URL+page)}, "reason": {"customer asked"}})
	require.Contains(t, body, `canceled: <span id="cancel-reason">customer asked</span>`)
	require.Contains(t, body, `id="execution-state">canceled</span>`)
	require.NotContains(t, body, `<button id="cancel">`)
	require.Contains(t, get("/executions?state=canceled"), "customer asked")
}

// On the list of a graph's failed executions, a form retries a node in every one that the filters
// select, and the list says how many.
func TestRetryManyFromTheList(t *testing.T) {
	t.Parallel()
	b := setup(t)
	srv, client := session(t, b.opts)
	list := "/executions?graph=shop&state=failed"
	form := url.Values{"csrf": {csrfOf(t, client, srv.URL+list)}, "graph": {"shop"}, "where": {"order=bad"}, "node": {"charge"}}
	b.fixed.Store(true)
	body := postForm(t, client, srv.URL+"/executions/retry", form)
	require.Contains(t, body, `Asked for a retry of node &#34;charge&#34; in 1 failed execution(s)`)
	require.Contains(t, body, `id="retry-many"`, "the form, on the failed list of a graph")
	require.Eventually(t, func() bool {
		d, err := b.db.Inspect(t.Context(), b.failedID)
		require.NoError(t, err)
		return d.Execution.State == persistence.ExecIdle
	}, 30*time.Second, 20*time.Millisecond, "the retry ran, and the charge succeeded")
}

// postForm posts form to target, follows the redirect, and returns the page it leads to.
func postForm(t *testing.T, client *http.Client, target string, form url.Values) string {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, target, strings.NewReader(form.Encode()))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)
	return string(body)
}

// session serves the dashboard with opts, and returns it with a client that keeps its cookies.
func session(t *testing.T, opts journeyui.Options) (*httptest.Server, *http.Client) {
	t.Helper()
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	return serve(t, opts), &http.Client{Jar: jar}
}

// The schedules page lists each schedule with its last and next fire times, in its location.
func TestSchedulesPage(t *testing.T) {
	t.Parallel()
	tokyo, err := time.LoadLocation("Asia/Tokyo")
	require.NoError(t, err)
	g := graph.MustNew("digest", "v1", []graph.Node{graph.Input("day")})
	opts := migrated(t)
	stub := clock.NewStub(time.Date(2025, 5, 1, 23, 59, 0, 0, time.UTC)) // 08:59 on 2 May in Tokyo
	rt, err := journey.New(t.Context(), journey.Config{DatabaseURL: pgtest.URL(t), Schema: opts.Schema, Graphs: []*graph.Graph{g},
		Logger: slog.New(slog.DiscardHandler), Test: journey.TestConfig{Clock: stub},
		Schedules: []journey.Schedule{{Name: "digest-9am", Graph: g, Cron: "0 9 * * *", Location: tokyo}}})
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		require.NoError(t, rt.Stop(ctx))
	})
	stub.Set(time.Date(2025, 5, 2, 0, 0, 3, 0, time.UTC)) // 09:00:03 in Tokyo: it fires

	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, serve(t, opts).URL+"/schedules", nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, string(body), `<tr data-schedule="digest-9am">`)
	require.Contains(t, string(body), `<td class="last-fire">2025-05-02 09:00 JST</td>`)
	require.Contains(t, string(body), `<td class="next-fire">2025-05-03 09:00 JST</td>`)
	require.Contains(t, string(body), `<td>none</td>`)
}
