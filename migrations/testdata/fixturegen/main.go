// Command fixturegen writes the fixture of TestMigrateForwardKeepsAnswers: executions made by a
// release's runtime, as the rows of its schema, and what that runtime answered for them. Run it
// from a checkout of the release whose schema the fixture is to hold, with testdata/fixturegen
// and testdata/fixture copied in:
//
//	go run ./migrations/testdata/fixturegen DIR
//
// It uses $DATABASE_URL, or starts a throwaway PostgreSQL, and writes DIR/fixture.json. This
// version needs a release of ee40a6e or later (Config.Test.Clock and StopGrace, keys, Insights,
// persistence.Store.Inspect); an older release takes the fixturegen of its time (git log).
//
// The executions are left in every state an execution can be in when a release is replaced:
// running (on a replica that is gone), gated, failed, abandoned and retried, recomputed,
// archived, keyed and ticking (see makeExecutions and makeMore). The answers are read once the
// runtimes that made them have stopped, by a runtime whose clock stands still at that moment,
// Now: the test reads them again on the same clock, so that what depends on the time (Insights,
// which replicas are live) answers the same.
package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	_ "github.com/jackc/pgx/v5/stdlib" // the database/sql driver of the store that reads the pages
	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect/pgdialect"

	"github.com/journey-go/journey"
	"github.com/journey-go/journey/devpg"
	"github.com/journey-go/journey/graph"
	"github.com/journey-go/journey/internal/clock"
	"github.com/journey-go/journey/migrations/testdata/fixture"
	"github.com/journey-go/journey/persistence"
)

// Fixture is what fixture.json holds.
type Fixture struct {
	Migrations []string // applied, in order
	// Now is when the answers were read: the time on the clock of the runtime that read them.
	Now      time.Time
	Rows     map[string]json.RawMessage // table → its rows, as json_agg gives them
	Answers  map[string]Answers         // execution id → what the runtime answered
	Lists    []ListAnswer
	Insights []InsightsAnswer
}

// Answers are what the runtime answered for an execution.
type Answers struct {
	// Role says what the execution is in the fixture, such as "running" (see makeMore).
	Role         string
	Values       map[string]graph.Value
	History      []journey.HistoryEntry
	Computations []journey.Computation
	Execution    *journey.Execution // as Load gives it, archived or not
	Summary      string
	Page         *fixture.Page // what the dashboard's execution page shows
}

// ListAnswer is what List answered to Query.
type ListAnswer struct {
	Query  journey.ListQuery
	Answer []*journey.Execution
}

// InsightsAnswer is what Insights answered for Graph with Options.
type InsightsAnswer struct {
	Graph   string
	Options journey.InsightsOptions
	Answer  *journey.Insights
}

// The replicas of the fixture: B leaves an attempt running and goes, and A abandons and retries
// it; A leaves attempts running in its turn; the reader reads the answers after them.
const (
	replicaA      = "fixture-a"
	replicaB      = "fixture-b"
	replicaReader = "fixture-reader"
)

// quick are the settings of the runtimes that make the executions: they sweep, and find work,
// at once.
func quick(cfg journey.Config) journey.Config {
	cfg.SweepInterval, cfg.PollInterval = 100*time.Millisecond, 100*time.Millisecond
	cfg.Test.StopGrace = 100 * time.Millisecond
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	return cfg
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: fixturegen DIR")
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := run(ctx, os.Args[1]); err != nil {
		fmt.Fprintln(os.Stderr, "fixturegen:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, dir string) error {
	url, stop, err := devpg.URLOrStart(ctx, nil)
	if err != nil {
		return err
	}
	defer stop()
	const schema = "fixture"
	sqldb, err := sql.Open("pgx", url)
	if err != nil {
		return err
	}
	defer sqldb.Close()
	// The dashboard's store: it asks replicas to carry out operators' requests, and reads the
	// execution pages.
	store, err := persistence.New(persistence.Config{DB: bun.NewDB(sqldb, pgdialect.New()), Schema: schema,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return err
	}
	h := &hooks{stalled: make(chan string, 8)}
	fixture.Misbehave = h.misbehave
	roles, err := makeExecutions(ctx, url, schema, store, h)
	if err != nil {
		return err
	}
	// The answers are read as the replicas went: on a clock that stands still at that moment,
	// their attempts are not abandoned, nor the gated ones promoted, nor the ticks due, and the
	// reader changes nothing.
	fx := Fixture{Rows: map[string]json.RawMessage{}, Answers: map[string]Answers{}}
	if err := sqldb.QueryRowContext(ctx, "SELECT now()").Scan(&fx.Now); err != nil {
		return err
	}
	fx.Now = fx.Now.UTC()
	rt, err := journey.New(ctx, journey.Config{DatabaseURL: url, Schema: schema, Graphs: fixture.Graphs,
		ReplicaID: replicaReader, Logger: slog.New(slog.DiscardHandler), Test: journey.TestConfig{Clock: clock.NewStub(fx.Now)}})
	if err != nil {
		return err
	}
	err = readAnswers(ctx, rt, store, roles, &fx)
	if err := errors.Join(err, rt.Stop(ctx)); err != nil {
		return err
	}
	if err := dump(ctx, url, schema, &fx); err != nil {
		return err
	}
	out, err := json.MarshalIndent(fx, "", "\t")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "fixture.json"), append(out, '\n'), 0o644)
}

// hooks make Work's attempts misbehave as the fixture needs (fixture.Misbehave): the attempts of
// job "hang", and the first of job "hang-once", never return, and tell stalled that they hang;
// work fails for job "fail".
type hooks struct {
	stalled chan string
	hungOne atomic.Bool
}

func (h *hooks) misbehave(node string, in graph.Values) error {
	job := in.String("job")
	switch {
	case job == "hang" || job == "hang-once" && node == "work" && h.hungOne.CompareAndSwap(false, true):
		h.stalled <- node
		select {} // never returns: the runtime stops, and the attempt stays RUNNING
	case job == "fail" && node == "work":
		return errors.New("the account is closed")
	}
	return nil
}

// awaitStalled waits until n attempts hang.
func (h *hooks) awaitStalled(ctx context.Context, n int) error {
	for range n {
		select {
		case <-h.stalled:
		case <-ctx.Done():
			return fmt.Errorf("waiting for an attempt to hang: %w", ctx.Err())
		}
	}
	return nil
}

// makeExecutions makes the executions of the fixture, on replicas that it stops, and returns
// their roles by id. Replica B runs the first attempt of "abandoned" and goes while it hangs;
// replica A abandons it for its replica's silence, retries it, makes the rest, and goes while the
// attempts of "running" hang, with those of "gated" waiting behind them.
func makeExecutions(ctx context.Context, url, schema string, store *persistence.Store, h *hooks) (map[string]string, error) {
	roles := map[string]string{}
	b, err := journey.New(ctx, quick(journey.Config{DatabaseURL: url, Schema: schema, Graphs: []*graph.Graph{fixture.Work},
		ReplicaID: replicaB, ReplicaHeartbeatInterval: 100 * time.Millisecond, ReplicaStaleAfter: 300 * time.Millisecond}))
	if err != nil {
		return nil, err
	}
	abandoned, err := b.Start(ctx, fixture.Work, journey.WithValues(map[string]any{"account": "solo", "job": "hang-once"}))
	if err != nil {
		return nil, errors.Join(err, b.Stop(ctx))
	}
	roles[abandoned.ID] = "abandoned"
	err = h.awaitStalled(ctx, 1)
	if err == nil {
		_, err = b.Get(ctx, abandoned.ID, "batch", journey.WaitAny())
	}
	if err := errors.Join(err, stopLeaving(ctx, b)); err != nil {
		return nil, err
	}

	a, err := journey.New(ctx, quick(journey.Config{DatabaseURL: url, Schema: schema, Graphs: fixture.Graphs, ReplicaID: replicaA}))
	if err != nil {
		return nil, err
	}
	if err := makeMore(ctx, a, store, h, abandoned.ID, roles); err != nil {
		return nil, errors.Join(err, a.Stop(ctx))
	}
	return roles, stopLeaving(ctx, a)
}

// stopLeaving stops rt while some of its attempts hang: it waits for none, and leaves them
// RUNNING, and its replica's row, as a replica that died would.
func stopLeaving(ctx context.Context, rt *journey.Runtime) error {
	ctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	return rt.Stop(ctx)
}

// makeMore makes the executions of replica A, and records their roles.
func makeMore(ctx context.Context, rt *journey.Runtime, store *persistence.Store, h *hooks, abandoned string, roles map[string]string) error {
	// abandoned: A abandons its first attempt, which B left running, and retries it.
	if _, err := rt.Get(ctx, abandoned, "work", journey.WaitAny()); err != nil {
		return err
	}

	// replaced, failed-z and label-only: the executions of release-c30bda2's fixture.
	ids, err := makeOld(ctx, rt)
	if err != nil {
		return err
	}
	for i, role := range []string{"replaced", "failed-z", "label-only"} {
		roles[ids[i]] = role
	}

	start := func(role string, g *graph.Graph, opts ...journey.StartOption) (string, error) {
		ex, err := rt.Start(ctx, g, opts...)
		if err != nil {
			return "", fmt.Errorf("starting %s: %w", role, err)
		}
		roles[ex.ID] = role
		return ex.ID, nil
	}

	// failed: work uses up its attempts.
	failed, err := start("failed", fixture.Work, journey.WithValues(map[string]any{"account": "broke", "job": "fail"}))
	if err != nil {
		return err
	}
	if _, err := rt.Get(ctx, failed, "work", journey.WaitAny()); !errors.Is(err, journey.ErrComputationFailed) {
		return fmt.Errorf("work of failed: want it failed, got %w", err)
	}

	// recomputed: n is set three times; parity comes out the same the third time, and keeps its
	// revision. tidy writes over the note, and log keeps the last changes.
	recomputed, err := start("recomputed", fixture.Flow, journey.WithValues(map[string]any{"n": 1}))
	if err != nil {
		return err
	}
	for _, set := range []struct {
		node  string
		value any
	}{{"n", 2}, {"n", 4}, {"note", "reset"}} {
		if err := settle(ctx, rt, recomputed); err != nil {
			return err
		}
		if _, err := rt.Set(ctx, recomputed, set.node, set.value); err != nil {
			return err
		}
	}

	// keyed, archived and unarchived; unarchived comes back by a request of the dashboard's.
	if _, err := start("keyed", fixture.Flow, journey.WithKey("order-1042"), journey.WithValues(map[string]any{"n": 3})); err != nil {
		return err
	}
	archived, err := start("archived", fixture.Flow, journey.WithValues(map[string]any{"n": 6}))
	if err != nil {
		return err
	}
	unarchived, err := start("unarchived", fixture.Flow, journey.WithValues(map[string]any{"n": 8}))
	if err != nil {
		return err
	}
	for _, id := range []string{recomputed, archived, unarchived} {
		if err := settle(ctx, rt, id); err != nil {
			return err
		}
	}
	for _, id := range []string{archived, unarchived} {
		if err := rt.Archive(ctx, id); err != nil {
			return err
		}
	}
	if err := unarchive(ctx, store, unarchived); err != nil {
		return err
	}
	if _, err := start("singleton", fixture.Solo, journey.WithValues(map[string]any{"owner": "ops"})); err != nil {
		return err
	}

	// ticking: its beat has come once, and waits for the next; its alarm has gone off.
	ticking, err := start("ticking", fixture.Flow, journey.WithValues(map[string]any{"timer": true}))
	if err != nil {
		return err
	}
	for _, node := range []string{"beats", "rang"} {
		if _, err := rt.Get(ctx, ticking, node, journey.WaitAny()); err != nil {
			return err
		}
	}
	if err := poll(ctx, rt, ticking, func(cs []journey.Computation) bool {
		return !busy(cs) && count(cs, "beat", journey.StateSuccess) == 2
	}); err != nil {
		return err
	}

	// running: its attempts hang. gated: its attempts wait behind them, for the account's key and
	// batch's one slot.
	running, err := start("running", fixture.Work, journey.WithValues(map[string]any{"account": "acme", "job": "hang"}))
	if err != nil {
		return err
	}
	if err := h.awaitStalled(ctx, 2); err != nil {
		return err
	}
	gated, err := start("gated", fixture.Work, journey.WithValues(map[string]any{"account": "acme", "job": "queued"}))
	if err != nil {
		return err
	}
	return quiet(ctx, rt, roles, map[string]journey.ComputationState{running: journey.StateRunning, gated: journey.StatePending})
}

// quiet checks that nothing is left to do in the executions of roles but what stays: the attempts
// of the executions in waits (two each, in that state). A runtime that loads the fixture on its
// clock then does nothing, and answers as the release did.
func quiet(ctx context.Context, rt *journey.Runtime, roles map[string]string, waits map[string]journey.ComputationState) error {
	for id, role := range roles {
		cs, err := rt.Computations(ctx, id)
		if err != nil {
			return err
		}
		var left []journey.ComputationState
		for _, c := range cs {
			if active(c.State) {
				left = append(left, c.State)
			}
		}
		if want, ok := waits[id]; ok && !slices.Equal(left, []journey.ComputationState{want, want}) ||
			!ok && len(left) > 0 {
			return fmt.Errorf("execution %s (%s) has attempts %v left to run", id, role, left)
		}
	}
	return nil
}

// unarchive brings id back through the dashboard: a request that a replica carries out.
func unarchive(ctx context.Context, store *persistence.Store, id string) error {
	req, err := store.Ask(ctx, id, persistence.ActionUnarchive, "")
	if err != nil {
		return err
	}
	if req, err = store.AwaitRequest(ctx, req.ID, 10*time.Second); err != nil {
		return err
	}
	if req.DoneAt == nil || req.Error != nil {
		return fmt.Errorf("unarchiving %s: the request was not carried out: %+v", id, req)
	}
	return nil
}

func active(s journey.ComputationState) bool {
	return s == journey.StatePending || s == journey.StateAvailable || s == journey.StateRunning
}

// busy reports whether an attempt waits or runs.
func busy(cs []journey.Computation) bool {
	return slices.ContainsFunc(cs, func(c journey.Computation) bool { return active(c.State) })
}

// count counts the attempts of node in state.
func count(cs []journey.Computation, node string, state journey.ComputationState) int {
	n := 0
	for _, c := range cs {
		if c.Node == node && c.State == state {
			n++
		}
	}
	return n
}

// poll reads the attempts of id until done holds of them.
func poll(ctx context.Context, rt *journey.Runtime, id string, done func([]journey.Computation) bool) error {
	for {
		cs, err := rt.Computations(ctx, id)
		if err != nil || done(cs) {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for the attempts of %s: %w", id, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// settle waits until no attempt of id waits or runs: a completion writes the attempts it makes
// ready in its own transaction, so nothing more comes.
func settle(ctx context.Context, rt *journey.Runtime, id string) error {
	return poll(ctx, rt, id, func(cs []journey.Computation) bool { return !busy(cs) })
}

// readAnswers reads what the runtime answers for the executions of roles, and for them all.
func readAnswers(ctx context.Context, rt *journey.Runtime, store *persistence.Store, roles map[string]string, fx *Fixture) error {
	for id, role := range roles {
		a := Answers{Role: role}
		var err error
		if a.Values, err = rt.Values(ctx, id); err != nil {
			return err
		}
		if a.History, err = rt.History(ctx, id); err != nil {
			return err
		}
		if a.Computations, err = rt.Computations(ctx, id); err != nil {
			return err
		}
		if a.Execution, err = rt.Load(ctx, id, journey.IncludeArchived()); err != nil {
			return err
		}
		if a.Summary, err = rt.Summarize(ctx, id); err != nil {
			return err
		}
		if a.Page, err = fixture.ReadPage(ctx, store, id); err != nil {
			return err
		}
		fx.Answers[id] = a
	}
	for _, q := range []journey.ListQuery{
		{},
		{IncludeArchived: true},
		{Graph: fixture.Flow.Name(), Filters: []journey.Filter{journey.Gte("n", 3)}, OrderBy: "n", Desc: true, IncludeArchived: true},
		{Key: "order-1042"},
	} {
		got, err := rt.List(ctx, q)
		if err != nil {
			return err
		}
		fx.Lists = append(fx.Lists, ListAnswer{Query: q, Answer: got})
	}
	// A window of an hour holds the fixture, in twelve buckets; and with IdleAfter as short as
	// can be, every execution that has not failed ends at its last value (EndsHere). The clock
	// stands still: the same options give the same answer at every reading.
	opts := journey.InsightsOptions{Since: time.Hour, Bucket: 5 * time.Minute, IdleAfter: time.Millisecond, Scope: journey.ScopeAll}
	readings := []InsightsAnswer{}
	for _, g := range fixture.Graphs {
		readings = append(readings, InsightsAnswer{Graph: g.Name(), Options: opts})
	}
	archived := opts
	archived.Scope = journey.ScopeArchived
	readings = append(readings, InsightsAnswer{Graph: fixture.Flow.Name(), Options: archived})
	for _, r := range readings {
		var err error
		if r.Answer, err = insights(ctx, rt, r.Graph, r.Options); err != nil {
			return err
		}
		fx.Insights = append(fx.Insights, r)
	}
	return nil
}

// insights reads Insights until the reading is up to date (Pending 0): a reading rolls what
// changed for a while, and leaves the rest for the next.
func insights(ctx context.Context, rt *journey.Runtime, name string, opts journey.InsightsOptions) (*journey.Insights, error) {
	for {
		ins, err := rt.Insights(ctx, name, opts)
		if err != nil || ins.Pending == 0 {
			return ins, err
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("reading the insights of %s: %w", name, ctx.Err())
		}
	}
}

// dump reads the migrations applied and the rows of every table of the schema into fx.
func dump(ctx context.Context, url, schema string, fx *Fixture) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	q := pgx.Identifier{schema}.Sanitize()
	if err := conn.QueryRow(ctx, "SELECT array_agg(name ORDER BY id) FROM "+q+".bun_migrations").Scan(&fx.Migrations); err != nil {
		return err
	}
	rows, err := conn.Query(ctx, `SELECT table_name::text FROM information_schema.tables
		WHERE table_schema = $1 AND table_type = 'BASE TABLE' AND table_name NOT LIKE 'bun\_%'`, schema)
	if err != nil {
		return err
	}
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err
	}
	for _, table := range tables {
		var raw json.RawMessage
		if err := conn.QueryRow(ctx, "SELECT coalesce(json_agg(t), '[]') FROM "+q+"."+pgx.Identifier{table}.Sanitize()+" t").Scan(&raw); err != nil {
			return err
		}
		fx.Rows[table] = raw
	}
	return nil
}

// makeOld makes the three executions of release-c30bda2's fixture: one whose input is replaced
// and then cleared, one whose z fails, and one that only has a label.
func makeOld(ctx context.Context, rt *journey.Runtime) ([]string, error) {
	var ids []string
	start := func() (string, error) {
		ex, err := rt.Start(ctx, fixture.Graph)
		if err != nil {
			return "", err
		}
		ids = append(ids, ex.ID)
		return ex.ID, nil
	}
	waitZ := func(id string, rev int64) error {
		_, err := rt.Get(ctx, id, "z", journey.WaitNewerThan(rev))
		if err != nil && !errors.Is(err, journey.ErrComputationFailed) {
			return err
		}
		return nil
	}

	a, err := start()
	if err != nil {
		return nil, err
	}
	for _, x := range []int{1, 2} {
		rev, err := rt.Set(ctx, a, "x", x)
		if err != nil {
			return nil, err
		}
		if err := waitZ(a, rev); err != nil {
			return nil, err
		}
	}
	if _, err := rt.Set(ctx, a, "label", "first"); err != nil {
		return nil, err
	}
	if _, err := rt.Unset(ctx, a, "x"); err != nil {
		return nil, err
	}

	b, err := start()
	if err != nil {
		return nil, err
	}
	if _, err := rt.Set(ctx, b, "x", 3); err != nil {
		return nil, err
	}
	if err := waitZ(b, 0); err != nil {
		return nil, err
	}
	if err := poll(ctx, rt, b, func(cs []journey.Computation) bool {
		return len(cs) == 3 && cs[2].State == journey.StateFailed
	}); err != nil {
		return nil, err
	}

	c, err := start()
	if err != nil {
		return nil, err
	}
	if _, err := rt.Set(ctx, c, "label", "third"); err != nil {
		return nil, err
	}
	return ids, nil
}
