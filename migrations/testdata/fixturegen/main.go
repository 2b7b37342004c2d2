// Command fixturegen writes the fixture of TestMigrateForwardKeepsAnswers: executions made by a
// release's runtime, as the rows of its schema, and what Get, History and Computations answered
// for them then. Run it from a checkout of the release whose schema the fixture is to hold, with
// testdata/fixturegen and testdata/fixture copied in, against a scratch database:
//
//	go run ./migrations/testdata/fixturegen DIR
//
// It uses $DATABASE_URL, or starts a throwaway PostgreSQL, and writes DIR/fixture.json.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/journey-go/journey"
	"github.com/journey-go/journey/devpg"
	"github.com/journey-go/journey/graph"
	"github.com/journey-go/journey/migrations/testdata/fixture"
)

// Fixture is what fixture.json holds.
type Fixture struct {
	Migrations []string                   // applied, in order
	Rows       map[string]json.RawMessage // table → its rows, as json_agg gives them
	Answers    map[string]Answers         // execution id → what the runtime answered
}

// Answers are what the runtime answered for an execution.
type Answers struct {
	Values       map[string]graph.Value
	History      []journey.HistoryEntry
	Computations []journey.Computation
}

func main() {
	if err := run(context.Background(), os.Args[1]); err != nil {
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
	rt, err := journey.New(ctx, journey.Config{DatabaseURL: url, Schema: schema, Graphs: []*graph.Graph{fixture.Graph},
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return err
	}
	ids, err := makeExecutions(ctx, rt)
	if err != nil {
		return err
	}
	fx := Fixture{Rows: map[string]json.RawMessage{}, Answers: map[string]Answers{}}
	for _, id := range ids {
		var a Answers
		if a.Values, err = rt.Values(ctx, id); err != nil {
			return err
		}
		if a.History, err = rt.History(ctx, id); err != nil {
			return err
		}
		if a.Computations, err = rt.Computations(ctx, id); err != nil {
			return err
		}
		fx.Answers[id] = a
	}
	if err := rt.Stop(ctx); err != nil {
		return err
	}

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
	out, err := json.MarshalIndent(fx, "", "\t")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "fixture.json"), append(out, '\n'), 0o644)
}

// makeExecutions makes three executions: one whose input is replaced and then cleared, one
// whose z fails, and one that only has a label.
func makeExecutions(ctx context.Context, rt *journey.Runtime) ([]string, error) {
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
	for {
		cs, err := rt.Computations(ctx, b)
		if err != nil {
			return nil, err
		}
		if len(cs) == 3 && cs[2].State == journey.StateFailed {
			break
		}
		time.Sleep(10 * time.Millisecond)
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
