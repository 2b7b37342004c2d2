package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/journey-go/journey"
	"github.com/journey-go/journey/graph"
	"github.com/journey-go/journey/internal/clock"
	"github.com/journey-go/journey/internal/pgtest"
	"github.com/journey-go/journey/persistence"
)

// opsBundle is a schema that a real runtime filled: one execution that succeeded, and one whose
// "charge" node failed for good.
type opsBundle struct {
	url, schema string
	rt          *journey.Runtime
	cfg         journey.Config
	okID        string
	failedID    string
	fixed       *atomic.Bool  // once set, charge succeeds
	charges     *atomic.Int64 // the calls of charge
}

const opsReplica = "replica-ops-test"

func shopGraph(fixed *atomic.Bool, charges *atomic.Int64) *graph.Graph {
	return graph.MustNew("shop", "v1", []graph.Node{
		graph.Input("order"),
		graph.Compute("charge", graph.Needs("order"), func(ctx context.Context, in graph.Values) (any, error) {
			charges.Add(1)
			if in.String("order") == "bad" && !fixed.Load() {
				return nil, graph.Permanent(errors.New("card declined"))
			}
			return "charged " + in.String("order"), nil
		}),
		graph.Compute("receipt", graph.Needs("charge"), func(ctx context.Context, in graph.Values) (any, error) {
			return "receipt for " + in.String("charge"), nil
		}),
	})
}

// setupOps fills a fresh schema, after prepare, if given, has prepared it. The sweeper's
// interval is an hour: a request is carried out because its NOTIFY wakes a replica, not by a
// sweep.
func setupOps(t *testing.T, prepare ...func(url, schema string)) *opsBundle {
	t.Helper()
	b := &opsBundle{url: pgtest.URL(t), schema: pgtest.Schema(t), fixed: new(atomic.Bool), charges: new(atomic.Int64)}
	for _, p := range prepare {
		p(b.url, b.schema)
	}
	b.cfg = journey.Config{
		DatabaseURL: b.url, Schema: b.schema, Graphs: []*graph.Graph{shopGraph(b.fixed, b.charges)},
		ReplicaID: opsReplica, PollInterval: 100 * time.Millisecond, SweepInterval: time.Hour,
		Logger: slog.New(slog.DiscardHandler),
	}
	b.rt = startRuntime(t, b.cfg)
	ctx := t.Context()
	g := b.cfg.Graphs[0]
	ok, err := b.rt.Start(ctx, g, journey.WithValues(map[string]any{"order": "good"}))
	require.NoError(t, err)
	failed, err := b.rt.Start(ctx, g, journey.WithValues(map[string]any{"order": "bad"}))
	require.NoError(t, err)
	b.okID, b.failedID = ok.ID, failed.ID
	_, err = b.rt.Get(ctx, ok.ID, "receipt", journey.WaitAny())
	require.NoError(t, err)
	_, err = b.rt.Get(ctx, failed.ID, "charge", journey.WaitAny())
	require.ErrorIs(t, err, journey.ErrComputationFailed)
	return b
}

func startRuntime(t *testing.T, cfg journey.Config) *journey.Runtime {
	t.Helper()
	rt, err := journey.New(t.Context(), cfg)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, rt.Stop(ctx))
	})
	return rt
}

// ops runs a command line on the bundle's database, with -schema added, and returns its exit
// code, standard output and standard error.
func (b *opsBundle) ops(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	env := &environment{
		stdout: &stdout, stderr: &stderr, logger: slog.New(slog.DiscardHandler),
		getenv: func(key string) string {
			if key == "DATABASE_URL" {
				return b.url
			}
			return ""
		},
	}
	code := run(t.Context(), env, append(args, "-schema", b.schema))
	return code, stdout.String(), stderr.String()
}

// okJSON runs a command that must succeed and decodes its JSON output into v.
func (b *opsBundle) okJSON(t *testing.T, v any, args ...string) {
	t.Helper()
	code, stdout, stderr := b.ops(t, append(args, "--json")...)
	require.Equal(t, 0, code, "stderr: %s", stderr)
	require.NoError(t, json.Unmarshal([]byte(stdout), v), stdout)
}

// detail is `executions show ID --json`.
func (b *opsBundle) detail(t *testing.T, id string) persistence.ExecutionDetail {
	t.Helper()
	var d persistence.ExecutionDetail
	b.okJSON(t, &d, "executions", "show", id)
	return d
}

func TestGraphsCommand(t *testing.T) {
	t.Parallel()
	b := setupOps(t)

	code, stdout, stderr := b.ops(t, "graphs")
	require.Equal(t, 0, code, stderr)
	require.Regexp(t, `GRAPH\s+VERSION\s+NODES\s+REPLICAS\s+EXECUTIONS\s+FAILED\s+RUNNING\s+WAITING\s+ARCHIVED`, stdout)
	require.Regexp(t, `shop\s+v1\s+3\s+`+opsReplica+`\s+2\s+1\s+0\s+0\s+0\s`, stdout)

	var graphs []persistence.GraphSummary
	b.okJSON(t, &graphs, "graphs")
	require.Len(t, graphs, 1)
	g := graphs[0]
	require.Equal(t, []string{opsReplica}, g.Replicas)
	require.EqualValues(t, 2, g.Executions)
	require.Equal(t, map[string]int64{"archived": 0, "failed": 1, "running": 0, "waiting": 0}, g.States)
	require.Equal(t, []persistence.GraphNode{
		{Name: "order", Kind: "input"},
		{Name: "charge", Kind: "compute", Gate: "needs(order)", Upstream: []string{"order"}},
		{Name: "receipt", Kind: "compute", Gate: "needs(charge)", Upstream: []string{"charge"}},
	}, g.Nodes)
	require.Equal(t, b.cfg.Graphs[0].Mermaid(), g.Mermaid)

	// A second replica that serves a new version adds a row; the old one stays.
	v2 := graph.MustNew("shop", "v2", []graph.Node{graph.Input("order")})
	cfg := b.cfg
	cfg.Graphs, cfg.ReplicaID = []*graph.Graph{v2}, "replica-v2"
	startRuntime(t, cfg)
	b.okJSON(t, &graphs, "graphs")
	require.Len(t, graphs, 2)
	require.Equal(t, "v2", graphs[1].Version)
	require.Equal(t, []string{"replica-v2"}, graphs[1].Replicas)
	require.Zero(t, graphs[1].Executions)
}

func TestExecutionsList(t *testing.T) {
	t.Parallel()
	b := setupOps(t)

	code, stdout, stderr := b.ops(t, "executions", "list")
	require.Equal(t, 0, code, stderr)
	require.Regexp(t, `(?m)^`+b.failedID+`\s+shop\s+v1\s+failed\s+\d+\s.*\scharge: card declined$`, stdout, "the node that failed, and why")
	require.Regexp(t, `(?m)^`+b.okID+`\s+shop\s+v1\s+idle\s+\d+\s.*\s-$`, stdout)
	require.NotContains(t, stdout, "more:")

	var p page
	b.okJSON(t, &p, "executions", "list", "--state", "failed")
	require.Equal(t, []string{b.failedID}, ids(p))
	require.Equal(t, "charge", p.Executions[0].FailedNode)
	require.Equal(t, "card declined", p.Executions[0].FailedError)
	b.okJSON(t, &p, "executions", "list", "--where", "order=bad", "--graph", "shop", "--version", "v1")
	require.Equal(t, []string{b.failedID}, ids(p))
	b.okJSON(t, &p, "executions", "list", "--where", `order="good"`)
	require.Equal(t, []string{b.okID}, ids(p))
	b.okJSON(t, &p, "executions", "list", "--state", "running")
	require.Empty(t, p.Executions)

	// Keyset pages, newest first: the failed execution was started last.
	b.okJSON(t, &p, "executions", "list", "--limit", "1")
	require.Equal(t, []string{b.failedID}, ids(p))
	require.NotEmpty(t, p.Next)
	code, stdout, _ = b.ops(t, "executions", "list", "--limit", "1")
	require.Equal(t, 0, code)
	require.Contains(t, stdout, "more: add --after "+p.Next)
	after := p.Next
	p = page{}
	b.okJSON(t, &p, "executions", "list", "--limit", "1", "--after", after)
	require.Equal(t, []string{b.okID}, ids(p))
	require.Empty(t, p.Next)

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--graph", "nope"}, `no replica has recorded graph "nope"`},
		{[]string{"--graph", "shop", "--version", "v9"}, `graph "shop" version "v9"`},
		{[]string{"--where", "nope=1"}, `no recorded graph version has a node "nope"`},
		{[]string{"--state", "bogus"}, `unknown state "bogus": use one of archived, canceled, paused, failed`},
		{[]string{"--after", "yesterday"}, `bad cursor "yesterday"`},
	} {
		code, stdout, stderr := b.ops(t, append([]string{"executions", "list"}, tc.args...)...)
		require.Equal(t, 1, code, "%v", tc.args)
		require.Contains(t, stderr, tc.want)
		require.Empty(t, stdout)
	}
	var stdout2, stderr2 bytes.Buffer
	code = run(t.Context(), &environment{stdout: &stdout2, stderr: &stderr2, logger: slog.New(slog.DiscardHandler),
		getenv: func(string) string { return b.url }}, []string{"executions", "list", "-schema", "no_such_schema"})
	require.Equal(t, 1, code)
	require.Contains(t, stderr2.String(), `schema "no_such_schema" holds no journey tables`)
	require.Contains(t, stderr2.String(), "journey migrate -schema no_such_schema")
}

// page is the JSON of `executions list`.
type page struct {
	Executions []persistence.ExecutionRow `json:"executions"`
	Next       string                     `json:"next"`
}

// ids are the ids of the executions of p.
func ids(p page) []string {
	var out []string
	for _, e := range p.Executions {
		out = append(out, e.ID)
	}
	return out
}

// executions list -key finds the execution that holds a key, and with --archived those that held
// it; show prints it; an unarchive that the key refuses is reported, and changes nothing.
func TestExecutionsByKey(t *testing.T) {
	t.Parallel()
	b := setupOps(t)
	ctx := t.Context()
	g := b.cfg.Graphs[0]
	first, err := b.rt.Start(ctx, g, journey.WithKey("order-1042"), journey.WithValues(map[string]any{"order": "good"}))
	require.NoError(t, err)
	_, err = b.rt.Get(ctx, first.ID, "receipt", journey.WaitAny())
	require.NoError(t, err)

	code, stdout, stderr := b.ops(t, "executions", "list", "-key", "order-1042")
	require.Equal(t, 0, code, stderr)
	require.Regexp(t, `ID\s+GRAPH\s+VERSION\s+STATE\s+REVISION\s+CREATED\s+UPDATED\s+KEY\s+WHY\n`+first.ID+`\s+shop\s+v1\s+idle\s.*\sorder-1042\s+-\n$`, stdout)
	code, stdout, _ = b.ops(t, "executions", "list")
	require.Equal(t, 0, code)
	require.Regexp(t, `(?m)^`+b.okID+`\s.*\s-\s+-$`, stdout, "an execution without a key")
	var p page
	b.okJSON(t, &p, "executions", "list", "-key", "order-1042")
	require.Equal(t, []string{first.ID}, ids(p))
	require.Equal(t, "order-1042", p.Executions[0].Key)
	require.Equal(t, "order-1042", b.detail(t, first.ID).Execution.Key)
	require.Empty(t, b.detail(t, b.okID).Execution.Key)
	code, stdout, _ = b.ops(t, "executions", "show", first.ID)
	require.Equal(t, 0, code)
	require.Contains(t, stdout, "key \"order-1042\"\n")

	require.NoError(t, b.rt.Archive(ctx, first.ID))
	second, err := b.rt.Start(ctx, g, journey.WithKey("order-1042"))
	require.NoError(t, err)
	b.okJSON(t, &p, "executions", "list", "-key", "order-1042")
	require.Equal(t, []string{second.ID}, ids(p))
	b.okJSON(t, &p, "executions", "list", "-key", "order-1042", "--archived")
	require.Equal(t, []string{second.ID, first.ID}, ids(p), "newest first")
	code, stdout, stderr = b.ops(t, "executions", "show", "--key", "order-1042")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "Execution "+second.ID+" ", "the unarchived execution that holds the key")
	code, stdout, stderr = b.ops(t, "executions", "show", "--key=order-1042", "--graph", "shop", "-json")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, `"id": "`+second.ID+`"`)
	code, _, stderr = b.ops(t, "executions", "show", "--key", "order-9")
	require.Equal(t, 1, code)
	require.Contains(t, stderr, `no unarchived execution holds key "order-9"`)

	code, stdout, stderr = b.ops(t, "unarchive", first.ID)
	require.Equal(t, 1, code, stderr)
	require.Contains(t, stdout, "Replica "+opsReplica+" refused it: journey: key held by another execution: unarchiving "+first.ID)
	require.Equal(t, "archived", b.detail(t, first.ID).Execution.State)

	code, stdout, stderr = b.ops(t, "executions", "list", "-key", "a\x00b")
	require.Equal(t, 1, code)
	require.Empty(t, stdout)
	require.Contains(t, stderr, `invalid text: key "a\x00b": it holds a NUL character`)
}

func TestExecutionsShow(t *testing.T) {
	t.Parallel()
	b := setupOps(t)

	code, stdout, stderr := b.ops(t, "executions", "show", b.failedID)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, `Execution `+b.failedID+` of graph "shop" version "v1": failed`)
	require.Regexp(t, `(?m)^\s+order\s+"bad"\s+1\s`, stdout)
	require.Contains(t, stdout, "charge: failed permanently at attempt 1 of 3: card declined; `journey retry "+b.failedID+" charge`")
	require.Contains(t, stdout, `receipt: gate needs(charge): "charge" not set`)
	require.Regexp(t, `(?m)^\s+\d+\s+charge\s+1/3\s+FAILED\s+`+opsReplica+`\s.*card declined$`, stdout)
	require.Contains(t, stdout, "execution.failed (phase 0) claimed")
	require.Regexp(t, `(?m)^History:\n\s+REVISION\s+NODE\s+VALUE\s+AT\n\s+1\s+order\s+"bad"`, stdout)

	// Flags after the id, as people type them.
	d := b.detail(t, b.okID)
	require.Equal(t, "idle", d.Execution.State)
	require.Len(t, d.Values, 3)
	require.Equal(t, "receipt", d.Values[2].Node)
	require.JSONEq(t, `"receipt for charged good"`, string(d.Values[2].Value))
	require.Empty(t, d.Waiting)
	require.Len(t, d.Attempts, 2)
	require.Equal(t, persistence.StateSuccess, d.Attempts[0].State)
	require.Equal(t, opsReplica, *d.Attempts[0].ReplicaID)
	require.NotNil(t, d.Attempts[0].FinishedAt)

	d = b.detail(t, b.failedID)
	require.Len(t, d.Notifications, 1)
	require.Equal(t, persistence.EventFailed, d.Notifications[0].Event)
	require.Equal(t, []persistence.Waiting{
		{Node: "charge", Kind: "compute", Gate: "needs(order)",
			Reason: "failed permanently at attempt 1 of 3: card declined; `journey retry " + b.failedID + " charge` gives it a fresh budget"},
		{Node: "receipt", Kind: "compute", Gate: "needs(charge)", Reason: `gate needs(charge): "charge" not set`},
	}, d.Waiting)

	code, stdout, stderr = b.ops(t, "executions", "show", "NOPE")
	require.Equal(t, 1, code)
	require.Empty(t, stdout)
	require.Contains(t, stderr, `execution not found: "NOPE"; `+"`journey executions list` lists the executions")

	code, _, stderr = b.ops(t, "executions", "show")
	require.Equal(t, 2, code)
	require.Contains(t, stderr, "want 1 argument(s) (ID), got 0")
}

// `executions show` says how a node failed: a graph.Permanent error at attempt 2 of 4 is not a
// budget used up.
func TestExecutionsShowSaysHowANodeFailed(t *testing.T) {
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
	})
	b := &opsBundle{url: pgtest.URL(t), schema: pgtest.Schema(t)}
	rt := startRuntime(t, journey.Config{DatabaseURL: b.url, Schema: b.schema, Graphs: []*graph.Graph{g},
		Logger: slog.New(slog.DiscardHandler)})
	ex, err := rt.Start(t.Context(), g, journey.WithValues(map[string]any{"order": "bad"}))
	require.NoError(t, err)
	_, err = rt.Get(t.Context(), ex.ID, "charge", journey.WaitAny())
	require.ErrorIs(t, err, journey.ErrComputationFailed)

	code, stdout, stderr := b.ops(t, "executions", "show", ex.ID)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "\n  charge: failed permanently at attempt 2 of 4: card declined; `journey retry "+ex.ID+" charge`")
	require.Regexp(t, `(?m)^\s+\d+\s+charge\s+2/4\s+FAILED\s+.*card declined$`, stdout)
}

func TestReplicasCommand(t *testing.T) {
	t.Parallel()
	b := setupOps(t)

	code, stdout, stderr := b.ops(t, "replicas")
	require.Equal(t, 0, code, stderr)
	require.Regexp(t, `REPLICA\s+HELD BY\s+HEARTBEAT AGE\s+STALE\s+RUNNING\s+SERVES\s+STARTED`, stdout)
	require.Regexp(t, opsReplica+`\s+host \S+ pid \d+\s+\S+\s+no\s+0\s+shop@v1\s`, stdout)

	var replicas []persistence.ReplicaStatus
	b.okJSON(t, &replicas, "replicas")
	require.Len(t, replicas, 1)
	require.Equal(t, opsReplica, replicas[0].ID)
	require.False(t, replicas[0].Stale)
	require.Equal(t, []string{"shop@v1"}, replicas[0].Graphs)
	require.GreaterOrEqual(t, replicas[0].HeartbeatAgeMS, int64(0))
	require.Regexp(t, `^host \S+ pid \d+$`, *replicas[0].Holder, "the process that holds the replica's id")
}

func TestRetryRunsTheNodeAgain(t *testing.T) {
	t.Parallel()
	b := setupOps(t)
	require.EqualValues(t, 2, b.charges.Load())

	// Bad input is refused, and records nothing.
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"retry", "NOPE", "charge"}, `execution not found: "NOPE"`},
		{[]string{"retry", b.failedID, "nope"}, `graph "shop" version "v1" has no node "nope"`},
		{[]string{"retry", b.okID, "charge"}, `node "charge" of ` + b.okID + ` is SUCCESS (attempt 1)`},
		{[]string{"retry", b.failedID, "receipt"}, `node "receipt" of ` + b.failedID + ` has never run`},
		{[]string{"archive", "NOPE"}, `execution not found: "NOPE"`},
		// Arguments that cannot reach PostgreSQL are refused before SQL.
		{[]string{"retry", "a\xffb", "charge"}, `invalid text: execution id "a\xffb": it is not valid UTF-8 (byte 1 is 0xff)`},
		{[]string{"retry", b.failedID, "ch\xff"}, `invalid text: node "ch\xff": it is not valid UTF-8`},
		{[]string{"archive", "a\xffb"}, `invalid text: execution id "a\xffb"`},
		{[]string{"executions", "show", "a\xffb"}, `invalid text: execution id "a\xffb"`},
		{[]string{"executions", "list", "-graph", "\xff"}, `invalid text: graph "\xff"`},
	} {
		code, stdout, stderr := b.ops(t, tc.args...)
		require.Equal(t, 1, code, "%v", tc.args)
		require.Contains(t, stderr, tc.want)
		require.Empty(t, stdout)
	}
	code, _, stderr := b.ops(t, "retry", b.failedID)
	require.Equal(t, 2, code)
	require.Contains(t, stderr, "want 2 argument(s) (ID NODE), got 1")
	require.Empty(t, b.detail(t, b.failedID).Requests)
	require.Empty(t, b.detail(t, b.okID).Requests)

	b.fixed.Store(true)
	code, stdout, stderr := b.ops(t, "retry", b.failedID, "charge")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, `retry node "charge" of execution `+b.failedID)
	require.Contains(t, stdout, `A replica serving graph "shop" version "v1" carries it out.`)
	require.Contains(t, stdout, "Done by replica "+opsReplica+".")
	require.Empty(t, stderr)

	v, err := journey.GetAs[string](t.Context(), b.rt, b.failedID, "receipt", journey.WaitAny())
	require.NoError(t, err)
	require.Equal(t, "receipt for charged bad", v)
	require.EqualValues(t, 3, b.charges.Load(), "charge ran once more")

	d := b.detail(t, b.failedID)
	require.Equal(t, "idle", d.Execution.State)
	require.Len(t, d.Requests, 1)
	require.Equal(t, opsReplica, *d.Requests[0].ReplicaID)
	require.Nil(t, d.Requests[0].Error)

	// Retrying it again is refused by the command, before anything is recorded.
	code, _, stderr = b.ops(t, "retry", b.failedID, "charge")
	require.Equal(t, 1, code)
	require.Contains(t, stderr, `node "charge" of `+b.failedID+` is SUCCESS`)
	require.Len(t, b.detail(t, b.failedID).Requests, 1)
}

func TestArchiveAndUnarchive(t *testing.T) {
	t.Parallel()
	b := setupOps(t)

	var req persistence.Request
	b.okJSON(t, &req, "archive", b.okID)
	require.Equal(t, persistence.ActionArchive, req.Action)
	require.NotNil(t, req.DoneAt)
	require.Equal(t, opsReplica, *req.ReplicaID)

	code, stdout, _ := b.ops(t, "executions", "list")
	require.Equal(t, 0, code)
	require.NotContains(t, stdout, b.okID)
	code, stdout, _ = b.ops(t, "executions", "list", "--archived")
	require.Equal(t, 0, code)
	require.Regexp(t, `(?m)^`+b.okID+`\s+shop\s+v1\s+archived\s`, stdout)
	code, stdout, _ = b.ops(t, "executions", "list", "--state", "archived")
	require.Equal(t, 0, code)
	require.Contains(t, stdout, b.okID)
	require.NotContains(t, stdout, b.failedID)

	code, stdout, stderr := b.ops(t, "unarchive", b.okID)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "Done by replica "+opsReplica+".")
	require.Equal(t, "idle", b.detail(t, b.okID).Execution.State)
}

// journey cancel cancels an execution with its reason, which the list shows; a second cancel
// changes nothing.
func TestCancel(t *testing.T) {
	t.Parallel()
	b := setupOps(t)

	var req persistence.Request
	b.okJSON(t, &req, "cancel", b.failedID, "-reason", "fraud suspected")
	require.Equal(t, persistence.ActionCancel, req.Action)
	require.Equal(t, "fraud suspected", *req.Reason)
	require.NotNil(t, req.DoneAt)
	require.Nil(t, req.Error)
	d := b.detail(t, b.failedID)
	require.Equal(t, "canceled", d.Execution.State)
	require.Equal(t, "fraud suspected", *d.Execution.CancelReason)
	require.Empty(t, d.Execution.FailedNode, "canceled, not failed")

	code, stdout, stderr := b.ops(t, "executions", "list", "--state", "canceled")
	require.Equal(t, 0, code, stderr)
	require.Regexp(t, `(?m)^`+b.failedID+`\s+shop\s+v1\s+canceled\s.*\sfraud suspected$`, stdout)
	require.NotContains(t, stdout, b.okID)

	code, _, stderr = b.ops(t, "cancel", b.failedID)
	require.Equal(t, 0, code, stderr)
	require.Equal(t, "fraud suspected", *b.detail(t, b.failedID).Execution.CancelReason, "the first reason stays")
	code, stdout, stderr = b.ops(t, "retry", b.failedID, "charge")
	require.Equal(t, 1, code)
	require.Contains(t, stdout+stderr, "is canceled")
}

func TestActionWithoutLiveReplica(t *testing.T) {
	t.Parallel()
	b := setupOps(t)
	require.NoError(t, b.rt.Stop(t.Context()))

	code, stdout, stderr := b.ops(t, "archive", b.failedID)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, `A replica serving graph "shop" version "v1" carries it out.`)
	require.Contains(t, stderr, `warning: no live replica serves graph "shop" version "v1": the request waits until one starts.`)
	d := b.detail(t, b.failedID)
	require.Len(t, d.Requests, 1)
	require.Nil(t, d.Requests[0].DoneAt)
	require.Equal(t, "failed", d.Execution.State)

	// A replica that starts later carries it out at its first sweep.
	cfg := b.cfg
	cfg.SweepInterval = 50 * time.Millisecond
	startRuntime(t, cfg)
	require.Eventually(t, func() bool {
		return b.detail(t, b.failedID).Execution.State == "archived"
	}, 30*time.Second, 50*time.Millisecond)
}

// TestFlagsAnywhere checks that flags may follow the arguments.
func TestFlagsAnywhere(t *testing.T) {
	t.Parallel()
	fs := newFlagSet(&environment{stderr: new(bytes.Buffer)}, "x", "", "")
	j := fs.Bool("json", false, "")
	n := fs.Int("n", 0, "")
	pos, _, ok := parseArgs(&environment{stderr: new(bytes.Buffer)}, fs, strings.Fields("A --json B -n 3"), "ID", "NODE")
	require.True(t, ok)
	require.Equal(t, []string{"A", "B"}, pos)
	require.True(t, *j)
	require.Equal(t, 3, *n)
}

// journey retry --graph G --node N retries the node in every failed execution that the filters
// select; --dry-run counts them and retries none.
func TestRetryMany(t *testing.T) {
	t.Parallel()
	b := setupOps(t)
	ctx := t.Context()
	g := b.cfg.Graphs[0]
	ids := []string{b.failedID}
	for range 3 {
		ex, err := b.rt.Start(ctx, g, journey.WithValues(map[string]any{"order": "bad"}))
		require.NoError(t, err)
		_, err = b.rt.Get(ctx, ex.ID, "charge", journey.WaitAny())
		require.ErrorIs(t, err, journey.ErrComputationFailed)
		ids = append(ids, ex.ID)
	}

	code, stdout, stderr := b.ops(t, "retry", "--graph", "shop", "--node", "charge", "--dry-run")
	require.Equal(t, 0, code, stderr)
	require.Equal(t, "Would retry node \"charge\" in 4 failed execution(s) of graph \"shop\".\n", stdout)
	code, stdout, stderr = b.ops(t, "retry", "--graph", "shop", "--node", "charge", "--where", `order="good"`, "--dry-run")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "in 0 failed execution(s)")
	code, _, stderr = b.ops(t, "retry", "--graph", "shop", "--node", "receipt", "--dry-run")
	require.Equal(t, 0, code, stderr)
	code, _, stderr = b.ops(t, "retry", "--graph", "shop", "--node", "nope")
	require.Equal(t, 1, code)
	require.Contains(t, stderr, `no recorded version of graph "shop" has a node "nope"`)
	require.Empty(t, b.detail(t, b.failedID).Requests, "nothing asked yet")

	b.fixed.Store(true)
	code, stdout, stderr = b.ops(t, "retry", "--graph", "shop", "--node", "charge")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "Asked for a retry of node \"charge\" in 4 failed execution(s)")
	for _, id := range ids {
		v, err := b.rt.Get(ctx, id, "receipt", journey.WaitAny())
		require.NoError(t, err)
		require.JSONEq(t, `"receipt for charged bad"`, string(v.Raw))
	}
}

// journey pause and resume: the execution is listed paused in between.
func TestPauseAndResume(t *testing.T) {
	t.Parallel()
	b := setupOps(t)
	code, stdout, stderr := b.ops(t, "pause", b.okID)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "Done by replica "+opsReplica+".")
	require.Equal(t, "paused", b.detail(t, b.okID).Execution.State)
	code, stdout, stderr = b.ops(t, "executions", "list", "--state", "paused")
	require.Equal(t, 0, code, stderr)
	require.Regexp(t, `(?m)^`+b.okID+`\s+shop\s+v1\s+paused\s`, stdout)
	require.NotContains(t, stdout, b.failedID)
	code, _, stderr = b.ops(t, "resume", b.okID)
	require.Equal(t, 0, code, stderr)
	require.Equal(t, "idle", b.detail(t, b.okID).Execution.State)
}

// journey pause --graph pauses a graph version, which journey graphs shows, and resume resumes it.
func TestPauseGraph(t *testing.T) {
	t.Parallel()
	b := setupOps(t)
	code, stdout, stderr := b.ops(t, "pause", "--graph", "shop", "--version", "v1")
	require.Equal(t, 0, code, stderr)
	require.Equal(t, "Graph \"shop\" version \"v1\" is paused.\n", stdout)
	code, stdout, _ = b.ops(t, "pause", "--graph", "shop", "--version", "v1")
	require.Equal(t, 0, code)
	require.Contains(t, stdout, "was paused already")
	code, stdout, _ = b.ops(t, "graphs")
	require.Equal(t, 0, code)
	require.Regexp(t, `(?m)^shop\s+v1\s+\d+\s+PAUSED `, stdout)
	code, stdout, _ = b.ops(t, "executions", "show", b.failedID)
	require.Equal(t, 0, code)
	require.Contains(t, stdout, "failed at charge: card declined\nits graph version is paused since ")
	code, _, stderr = b.ops(t, "pause", "--graph", "nope", "--version", "v1")
	require.Equal(t, 1, code)
	require.Contains(t, stderr, `no replica has recorded graph "nope" version "v1"`)
	code, stdout, stderr = b.ops(t, "resume", "--graph", "shop", "--version", "v1")
	require.Equal(t, 0, code, stderr)
	require.Equal(t, "Graph \"shop\" version \"v1\" is running.\n", stdout)
	code, stdout, _ = b.ops(t, "graphs")
	require.Equal(t, 0, code)
	require.NotContains(t, stdout, "PAUSED")
}

func TestSchedulesCommand(t *testing.T) {
	t.Parallel()
	rome, err := time.LoadLocation("Europe/Rome")
	require.NoError(t, err)
	b := &opsBundle{url: pgtest.URL(t), schema: pgtest.Schema(t), fixed: new(atomic.Bool), charges: new(atomic.Int64)}
	g := shopGraph(b.fixed, b.charges)
	stub := clock.NewStub(time.Date(2025, 5, 1, 8, 30, 0, 0, time.UTC)) // 10:30 in Rome
	startRuntime(t, journey.Config{
		DatabaseURL: b.url, Schema: b.schema, Graphs: []*graph.Graph{g}, Logger: slog.New(slog.DiscardHandler),
		Schedules: []journey.Schedule{{Name: "morning", Graph: g, Cron: "0 9 * * *", Location: rome,
			Values: map[string]any{"order": "daily"}, CatchUp: journey.CatchUpOnce}},
		Test: journey.TestConfig{Clock: stub},
	})

	code, stdout, stderr := b.ops(t, "schedules")
	require.Equal(t, 0, code, stderr)
	require.Regexp(t, `SCHEDULE\s+GRAPH\s+CRON\s+LOCATION\s+CATCH UP\s+LAST FIRE\s+NEXT FIRE\s+UPDATED`, stdout)
	require.Regexp(t, `morning\s+shop@v1\s+0 9 \* \* \*\s+Europe/Rome\s+once\s+-\s+2025-05-02 09:00 CEST\s`, stdout)

	stub.Set(time.Date(2025, 5, 2, 7, 0, 5, 0, time.UTC)) // 09:00:05 in Rome
	code, stdout, stderr = b.ops(t, "schedules")
	require.Equal(t, 0, code, stderr)
	require.Regexp(t, `morning\s+shop@v1\s+0 9 \* \* \*\s+Europe/Rome\s+once\s+2025-05-02 09:00 CEST\s+2025-05-03 09:00 CEST\s`, stdout)

	var schedules []persistence.ScheduleRow
	b.okJSON(t, &schedules, "schedules")
	require.Len(t, schedules, 1)
	s := schedules[0]
	require.Equal(t, "morning", s.Name)
	require.Equal(t, "once", s.CatchUp)
	require.True(t, s.LastFire.Equal(time.Date(2025, 5, 2, 7, 0, 0, 0, time.UTC)), "last fire %v", s.LastFire)
	require.True(t, s.NextFire.Equal(time.Date(2025, 5, 3, 7, 0, 0, 0, time.UTC)), "next fire %v", s.NextFire)
	// The execution of the fire time holds its key, with the schedule's values.
	var d persistence.ExecutionDetail
	b.okJSON(t, &d, "executions", "show", "--key", "schedule:morning:2025-05-02T07:00:00Z")
	values := map[string]string{}
	for _, v := range d.Values {
		values[v.Node] = string(v.Value)
	}
	require.JSONEq(t, `"daily"`, values["order"], "values: %v", values)
}
