package journeyui_test

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver

	"github.com/journey-go/journey"
	"github.com/journey-go/journey/graph"
	"github.com/journey-go/journey/internal/pgtest"
	"github.com/journey-go/journey/journeyui"
)

func ExampleHandler() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// A replica runs a graph and records an execution in the schema.
	url, schema, dropSchema := pgtest.ExampleSchema("ExampleHandler")
	defer dropSchema()
	g := graph.MustNew("greetings", "v1", []graph.Node{
		graph.Input("name"),
		graph.Compute("greeting", graph.Needs("name"),
			func(ctx context.Context, in graph.Values) (any, error) {
				return "Hello, " + in.String("name"), nil
			}),
	})
	rt, err := journey.New(ctx, journey.Config{
		DatabaseURL: url, Schema: schema, Graphs: []*graph.Graph{g}, Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer func() {
		if err := rt.Stop(context.Background()); err != nil {
			fmt.Println(err)
		}
	}()
	ex, err := rt.Start(ctx, g, journey.WithValues(map[string]any{"name": "Mario"}))
	if err != nil {
		fmt.Println(err)
		return
	}
	if _, err := rt.Get(ctx, ex.ID, "greeting", journey.WaitAny()); err != nil {
		fmt.Println(err)
		return
	}

	// The dashboard needs only the database and the schema, not the graph's Go code.
	db, err := sql.Open("pgx", url)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer db.Close()
	ui, err := journeyui.Handler(ctx, journeyui.Options{
		DB: db, Schema: schema, BasePath: "/journey", Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	// An application mounts it beside its own handlers.
	mux := http.NewServeMux()
	mux.Handle("/journey/", http.StripPrefix("/journey", ui))

	// Here a recorder stands for the browser.
	get := func(path string) (status int, title, page string) {
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequestWithContext(ctx, http.MethodGet, path, nil))
		page = rec.Body.String()
		m := regexp.MustCompile(`<title>(.*?)</title>`).FindStringSubmatch(page)
		if m == nil {
			return rec.Code, "", page
		}
		return rec.Code, m[1], page
	}
	status, title, _ := get("/journey/")
	fmt.Println(status, title)
	status, title, page := get("/journey/executions/" + ex.ID)
	fmt.Println(status, strings.ReplaceAll(title, ex.ID, "ID"))
	fmt.Println("shows the greeting:", strings.Contains(page, "Hello, Mario"))
	// Output:
	// 200 Overview · journey
	// 200 Execution ID · journey
	// shows the greeting: true
}
