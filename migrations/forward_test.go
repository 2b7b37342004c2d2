package migrations_test

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/journey-go/journey"
	"github.com/journey-go/journey/graph"
	"github.com/journey-go/journey/internal/clock"
	"github.com/journey-go/journey/internal/pgtest"
	"github.com/journey-go/journey/migrations"
	"github.com/journey-go/journey/migrations/testdata/fixture"
	"github.com/journey-go/journey/persistence"
)

// fixtureFile is what testdata/fixturegen wrote: the rows of a schema that an earlier release's
// runtime wrote, and what that runtime answered. An answer that a fixture did not record (the
// older ones recorded fewer) is not compared.
type fixtureFile struct {
	Migrations []string
	// Now is when the answers were read, on the clock of the runtime that read them; zero if the
	// fixture did not record it.
	Now     time.Time
	Rows    map[string]json.RawMessage
	Answers map[string]struct {
		Role         string // what the execution is in the fixture; "" if the fixture did not say
		Values       json.RawMessage
		History      json.RawMessage
		Computations json.RawMessage
		Execution    json.RawMessage
		Summary      string
		Page         json.RawMessage
	}
	Lists []struct {
		Query  journey.ListQuery
		Answer json.RawMessage
	}
	Insights []struct {
		Graph   string
		Options journey.InsightsOptions
		Answer  json.RawMessage
	}
}

// A schema populated by an earlier release, migrated forward, answers for every execution as that
// release did: Values, History, Computations, Load, Summarize and the dashboard's execution page;
// and List and Insights too. Then its executions go on: the running ones are abandoned, their
// replica gone, and retried, the gated ones run, the ticking one ticks, the failed one is retried,
// the recomputed one recomputes, and the keyed and archived ones keep their keys and their place.
func TestMigrateForwardKeepsAnswers(t *testing.T) {
	t.Parallel()
	for _, release := range []string{"release-c30bda2", "release-ee40a6e"} {
		t.Run(release, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			raw, err := os.ReadFile(filepath.Join("testdata", release, "fixture.json"))
			require.NoError(t, err)
			var fx fixtureFile
			require.NoError(t, json.Unmarshal(raw, &fx))
			url, schema := pgtest.URL(t), pgtest.Schema(t)
			db := pgtest.BunDB(t, url)
			applied, err := migrations.MigrateThrough(ctx, db, schema, fx.Migrations[len(fx.Migrations)-1], testLogger(t))
			require.NoError(t, err)
			require.Len(t, applied, len(fx.Migrations))
			loadRows(t, db.DB, schema, fx.Rows)

			// The answers are read on the fixture's clock, standing still at the moment the
			// release answered: its replica is live and its ticks not due yet, so that its
			// executions wait as they did; and what depends on the time (Insights) answers
			// as it did. The runtime that reads them does nothing. A fixture that did not
			// record its time has nothing left to do, and is read on the wall clock.
			reader := start(t, url, schema, fx.Now)
			store, err := persistence.New(persistence.Config{DB: db, Schema: schema, Logger: testLogger(t)})
			require.NoError(t, err)
			requireAnswers(t, reader, store, &fx)
			require.NoError(t, reader.Stop(ctx))

			// Then a replica of today takes over, on the wall clock.
			rt := start(t, url, schema, time.Time{})
			ctx, cancel := context.WithTimeout(ctx, time.Minute)
			defer cancel()
			roles := map[string]string{} // role → execution id
			for id, a := range fx.Answers {
				if a.Role != "" {
					roles[a.Role] = id
				}
			}
			replaced := roles["replaced"]
			if replaced == "" { // release-c30bda2 named no roles: it is the execution whose x was cleared
				for id, a := range fx.Answers {
					var h []journey.HistoryEntry
					require.NoError(t, json.Unmarshal(a.History, &h))
					if len(h) > 0 && string(h[len(h)-1].Value) == "null" {
						replaced = id
					}
				}
			}
			require.NotEmpty(t, replaced)

			// Its x set again, the execution whose x was cleared computes on, and its history
			// goes on after what it was.
			rev, err := rt.Set(ctx, replaced, "x", 5)
			require.NoError(t, err)
			z, err := rt.Get(ctx, replaced, "z", journey.WaitNewerThan(rev))
			require.NoError(t, err)
			require.Equal(t, int64(12), z.Int())
			requireHistoryGoesOn(ctx, t, rt, replaced, fx.Answers[replaced].History, "x", "y", "z")

			if len(roles) > 0 {
				requireComputesOn(ctx, t, rt, &fx, roles)
			}
		})
	}
}

// start starts a runtime that serves the fixtures' graphs on schema. Its clock stands still at
// now, unless now is zero. It keeps every finished row: the fixture's are older than the
// retention, and their history is compared.
func start(t *testing.T, url, schema string, now time.Time) *journey.Runtime {
	t.Helper()
	cfg := journey.Config{DatabaseURL: url, Schema: schema, Graphs: fixture.Graphs, Logger: testLogger(t),
		Retention: -1, SweepInterval: 100 * time.Millisecond, PollInterval: 100 * time.Millisecond}
	if !now.IsZero() {
		cfg.Test.Clock = clock.NewStub(now)
	}
	rt, err := journey.New(t.Context(), cfg)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, rt.Stop(context.Background())) })
	return rt
}

// requireAnswers checks that rt, and the dashboard's store, answer what the fixture recorded.
func requireAnswers(t *testing.T, rt *journey.Runtime, store *persistence.Store, fx *fixtureFile) {
	t.Helper()
	ctx := t.Context()
	asJSON := func(v any, err error) string {
		t.Helper()
		require.NoError(t, err)
		b, err := json.Marshal(v)
		require.NoError(t, err)
		return string(b)
	}
	for id, want := range fx.Answers {
		require.JSONEq(t, string(want.Values), asJSON(rt.Values(ctx, id)), "values of %s", id)
		require.JSONEq(t, string(want.History), asJSON(rt.History(ctx, id)), "history of %s", id)
		require.JSONEq(t, string(want.Computations), asJSON(rt.Computations(ctx, id)), "computations of %s", id)
		if want.Execution != nil {
			require.JSONEq(t, string(want.Execution), asJSON(rt.Load(ctx, id, journey.IncludeArchived())), "execution %s", id)
		}
		if want.Summary != "" {
			summary, err := rt.Summarize(ctx, id)
			require.NoError(t, err)
			require.Equal(t, want.Summary, summary, "summary of %s", id)
		}
		if want.Page != nil {
			require.JSONEq(t, string(want.Page), asRecorded(t, want.Page, asJSON(fixture.ReadPage(ctx, store, id))), "execution page of %s", id)
		}
	}
	for _, l := range fx.Lists {
		require.JSONEq(t, string(l.Answer), asJSON(rt.List(ctx, l.Query)), "list %+v", l.Query)
	}
	for _, in := range fx.Insights {
		require.JSONEq(t, string(in.Answer), asJSON(upToDate(ctx, rt, in.Graph, in.Options)), "insights of %s, %+v", in.Graph, in.Options)
	}
}

// asRecorded drops from got, an execution page, the sections and the fields of its execution that
// want, the page an earlier release recorded, does not have: those that a later release added
// (failed_node and failed_error, the children of map nodes).
func asRecorded(t *testing.T, want json.RawMessage, got string) string {
	t.Helper()
	var w map[string]any
	require.NoError(t, json.Unmarshal(want, &w))
	var page map[string]any
	require.NoError(t, json.Unmarshal([]byte(got), &page))
	for field := range page { // sections a later release added to the page, such as its children
		if _, recorded := w[field]; !recorded {
			delete(page, field)
		}
	}
	recorded, _ := w["execution"].(map[string]any)
	if exec, ok := page["execution"].(map[string]any); ok {
		for field := range exec {
			if _, ok := recorded[field]; !ok {
				delete(exec, field)
			}
		}
	}
	b, err := json.Marshal(page)
	require.NoError(t, err)
	return string(b)
}

// upToDate reads the insights until the reading is up to date (Pending 0), as the fixture's
// were: a reading rolls what changed for a while, and leaves the rest to the next, so that how
// much it shows depends on the machine's speed.
func upToDate(ctx context.Context, rt *journey.Runtime, name string, opts journey.InsightsOptions) (*journey.Insights, error) {
	for {
		ins, err := rt.Insights(ctx, name, opts)
		if err != nil || ins.Pending == 0 || ctx.Err() != nil {
			return ins, err
		}
	}
}

// requireHistoryGoesOn checks that the history of id begins with what the fixture recorded,
// followed by changes of nodes, in that order.
func requireHistoryGoesOn(ctx context.Context, t *testing.T, rt *journey.Runtime, id string, recorded json.RawMessage, nodes ...string) {
	t.Helper()
	history, err := rt.History(ctx, id)
	require.NoError(t, err)
	var before []journey.HistoryEntry
	require.NoError(t, json.Unmarshal(recorded, &before))
	require.Len(t, history, len(before)+len(nodes))
	b, err := json.Marshal(history[:len(before)])
	require.NoError(t, err)
	require.JSONEq(t, string(recorded), string(b))
	for i, node := range nodes {
		require.Equal(t, node, history[len(before)+i].Node)
	}
}

// requireComputesOn checks that the fixture holds executions in the states that their roles
// name, and that each goes on from there.
func requireComputesOn(ctx context.Context, t *testing.T, rt *journey.Runtime, fx *fixtureFile, roles map[string]string) {
	t.Helper()
	// recorded returns what the fixture recorded of the execution of role.
	recorded := func(role string) (state string, comps []journey.Computation, vals graph.Values) {
		t.Helper()
		a := fx.Answers[roles[role]]
		var page struct {
			Execution persistence.ExecutionRow `json:"execution"`
		}
		require.NoError(t, json.Unmarshal(a.Page, &page), role)
		require.NoError(t, json.Unmarshal(a.Computations, &comps), role)
		require.NoError(t, json.Unmarshal(a.Values, &vals), role)
		return page.Execution.State, comps, vals
	}
	// attempts lists the attempts of node, each as its state and error.
	attempts := func(cs []journey.Computation, node string) []string {
		var out []string
		for _, c := range cs {
			if c.Node == node {
				out = append(out, string(c.State)+" "+c.Error)
			}
		}
		return out
	}
	// abandonedThenRan lists what attempts gives for a node whose first attempt, in cs, was
	// abandoned for the silence of its replica, and whose second succeeded.
	abandonedThenRan := func(cs []journey.Computation, node string) []string {
		i := slices.IndexFunc(cs, func(c journey.Computation) bool { return c.Node == node })
		require.GreaterOrEqual(t, i, 0, node)
		return []string{string(journey.StateAbandoned) + " " + persistence.ReasonReplica(cs[i].ReplicaID),
			string(journey.StateSuccess) + " "}
	}
	for role, want := range map[string]string{"running": persistence.ExecRunning, "gated": persistence.ExecWaiting,
		"failed": persistence.ExecFailed, "failed-z": persistence.ExecFailed, "archived": persistence.ExecArchived,
		"abandoned": persistence.ExecIdle, "recomputed": persistence.ExecIdle, "ticking": persistence.ExecIdle,
		"replaced": persistence.ExecIdle, "label-only": persistence.ExecIdle, "keyed": persistence.ExecIdle,
		"unarchived": persistence.ExecIdle, "singleton": persistence.ExecIdle} {
		state, _, _ := recorded(role)
		require.Equal(t, want, state, "the state of %s in the fixture", role)
	}

	// abandoned: its first attempt of work was abandoned, its replica gone, and the second ran.
	_, comps, _ := recorded("abandoned")
	require.Equal(t, abandonedThenRan(comps, "work"), attempts(comps, "work"))

	// running: its attempts ran on a replica that is gone. They are abandoned and retried.
	id := roles["running"]
	_, comps, _ = recorded("running")
	for _, node := range []string{"work", "batch"} {
		require.Equal(t, []string{string(journey.StateRunning) + " "}, attempts(comps, node), node)
		v, err := rt.Get(ctx, id, node, journey.WaitAny())
		require.NoError(t, err)
		require.Equal(t, node+" hang", v.String())
		cs, err := rt.Computations(ctx, id)
		require.NoError(t, err)
		require.Equal(t, abandonedThenRan(comps, node), attempts(cs, node), node)
	}

	// gated: its attempts waited behind the running ones, for the account's key and batch's slot.
	for _, node := range []string{"work", "batch"} {
		v, err := rt.Get(ctx, roles["gated"], node, journey.WaitAny())
		require.NoError(t, err)
		require.Equal(t, node+" queued", v.String())
	}

	// ticking: its beat comes due, and beats counts it.
	_, _, vals := recorded("ticking")
	beats, err := rt.Get(ctx, roles["ticking"], "beats", journey.WaitNewerThan(vals["beats"].Revision))
	require.NoError(t, err)
	require.Equal(t, vals["beats"].Int()+1, beats.Int())

	// failed: work used up its attempts; retried, it runs.
	id = roles["failed"]
	_, err = rt.Get(ctx, id, "work")
	require.ErrorIs(t, err, journey.ErrComputationFailed)
	require.NoError(t, rt.Retry(ctx, id, "work"))
	v, err := rt.Get(ctx, id, "work", journey.WaitAny())
	require.NoError(t, err)
	require.Equal(t, "work fail", v.String())

	// recomputed: n set again, parity and label compute on, and log records it.
	id = roles["recomputed"]
	rev, err := rt.Set(ctx, id, "n", 5)
	require.NoError(t, err)
	label, err := rt.Get(ctx, id, "label", journey.WaitNewerThan(rev))
	require.NoError(t, err)
	require.Equal(t, "odd", label.String())
	requireHistoryGoesOn(ctx, t, rt, id, fx.Answers[id].History, "n", "log", "parity", "label")

	// keyed, and the singleton: found by their keys, which a Start finds taken.
	for _, k := range []struct {
		role string
		g    *graph.Graph
		key  string
		opts []journey.StartOption
	}{
		{"keyed", fixture.Flow, "order-1042", []journey.StartOption{journey.WithKey("order-1042"),
			journey.WithValues(map[string]any{"n": 7})}},
		{"singleton", fixture.Solo, graph.SingletonKey, []journey.StartOption{journey.WithValues(map[string]any{"owner": "dev"})}},
	} {
		found, err := rt.FindByKey(ctx, k.g.Name(), k.key)
		require.NoError(t, err)
		require.Equal(t, roles[k.role], found.ID)
		ex, err := rt.Start(ctx, k.g, k.opts...)
		require.NoError(t, err)
		require.True(t, ex.Existing, k.role)
		require.Equal(t, roles[k.role], ex.ID)
	}

	// archived: out of List and Load until unarchived.
	id = roles["archived"]
	listed := func() []string {
		t.Helper()
		exs, err := rt.List(ctx, journey.ListQuery{Graph: fixture.Flow.Name()})
		require.NoError(t, err)
		var ids []string
		for _, ex := range exs {
			ids = append(ids, ex.ID)
		}
		return ids
	}
	require.NotContains(t, listed(), id)
	_, err = rt.Load(ctx, id)
	require.ErrorIs(t, err, journey.ErrNotFound)
	require.Contains(t, listed(), roles["unarchived"])
	require.NoError(t, rt.Unarchive(ctx, id))
	require.Contains(t, listed(), id)
	ex, err := rt.Load(ctx, id)
	require.NoError(t, err)
	require.Nil(t, ex.ArchivedAt)
}

// rank puts executions first, for the tables whose rows refer to them.
func rank(table string) int {
	if table == "executions" {
		return 0
	}
	return 1
}

// loadRows replaces the rows of each table with the fixture's, executions first, and moves the
// sequences past them. The rows that the migrations wrote themselves (schema_release) go: the
// fixture has them as the release left them.
func loadRows(t *testing.T, db *sql.DB, schema string, rows map[string]json.RawMessage) {
	t.Helper()
	tables := slices.SortedFunc(maps.Keys(rows), func(a, b string) int {
		return cmp.Or(cmp.Compare(rank(a), rank(b)), cmp.Compare(a, b))
	})
	for _, table := range tables {
		name := pgx.Identifier{schema, table}.Sanitize()
		_, err := db.ExecContext(t.Context(), "DELETE FROM "+name)
		require.NoError(t, err, table)
		// The fixture's columns, by name: a column added since gets its default.
		var written []map[string]json.RawMessage
		require.NoError(t, json.Unmarshal(rows[table], &written), table)
		if len(written) > 0 {
			var cols []string
			for _, col := range slices.Sorted(maps.Keys(written[0])) {
				cols = append(cols, pgx.Identifier{col}.Sanitize())
			}
			list := strings.Join(cols, ", ")
			_, err = db.ExecContext(t.Context(), "INSERT INTO "+name+" ("+list+") SELECT "+list+
				" FROM json_populate_recordset(NULL::"+name+", $1)", string(rows[table]))
			require.NoError(t, err, table)
		}
		var seq sql.NullString
		err = db.QueryRowContext(t.Context(), `SELECT pg_get_serial_sequence($1, column_name) FROM information_schema.columns
			WHERE table_schema = $2 AND table_name = $3 AND column_name = 'id'`, name, schema, table).Scan(&seq)
		if !errors.Is(err, sql.ErrNoRows) {
			require.NoError(t, err, table)
		}
		if seq.Valid {
			_, err = db.ExecContext(t.Context(), "SELECT setval($1, max(id)) FROM "+name+" HAVING count(*) > 0", seq.String)
			require.NoError(t, err, table)
		}
	}
}
