package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/journey-go/journey"
	"github.com/journey-go/journey/graph"
)

// benchMap is journey bench -graph map1000: one execution whose Map node starts -n children (1,000
// unless set), each of one compute node, and collects their results. It times the execution
// from its Start to the Map's value, and prints it as children a second, beside which a drain of
// as many one-node executions (journey bench -n N) is the yardstick.
func benchMap(ctx context.Context, env *environment, cfg benchConfig, url string) (err error) {
	items := cfg.n
	if items == 0 {
		items = 1000
	}
	db, err := connectMonitor(ctx, url)
	if err != nil {
		return err
	}
	defer db.close()
	if err := db.createSchema(ctx, &cfg.schema); err != nil {
		return err
	}
	defer func() { err = errors.Join(err, db.dropSchema(cfg.schema)) }()
	fmt.Fprintf(env.stdout, "bench: mode=map graph=map1000 items=%d workers=%d schema=%s database=%s\n",
		items, cfg.workers, cfg.schema, db.describe())

	child := graph.MustNew("bench_item", "v1", []graph.Node{
		graph.Input("x"),
		graph.Compute("y", graph.Needs("x"), func(ctx context.Context, in graph.Values) (any, error) {
			return in.Int("x") + 1, nil
		}),
	}, graph.CompletesWhen(graph.Needs("y")))
	parent := graph.MustNew("bench_map", "v1", []graph.Node{
		graph.Input("n"),
		graph.Map("each", graph.Needs("n"), child, func(in graph.Values) ([]map[string]any, error) {
			out := make([]map[string]any, in.Int("n"))
			for i := range out {
				out[i] = map[string]any{"x": i}
			}
			return out, nil
		}, graph.Result("y")),
	})
	rt, err := journey.New(ctx, journey.Config{DatabaseURL: url, Schema: cfg.schema, Graphs: []*graph.Graph{parent, child},
		MaxWorkers: cfg.workers, Logger: env.logger})
	if err != nil {
		return err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), benchStopTimeout)
		defer cancel()
		err = errors.Join(err, rt.Stop(sctx))
	}()
	began := time.Now()
	ex, err := rt.Start(ctx, parent, journey.WithValues(map[string]any{"n": items}))
	if err != nil {
		return err
	}
	if _, err := rt.Get(ctx, ex.ID, "each", journey.WaitAny()); err != nil {
		return fmt.Errorf("waiting for the map's value: %w", err)
	}
	elapsed := time.Since(began)
	fmt.Fprintf(env.stdout, "bench: mode=map graph=map1000 items=%d elapsed_s=%.3f children/s=%.1f\n",
		items, elapsed.Seconds(), float64(items)/elapsed.Seconds())
	return nil
}
