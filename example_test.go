package journey_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/journey-go/journey"
	"github.com/journey-go/journey/graph"
	"github.com/journey-go/journey/internal/pgtest"
)

func ExampleRuntime() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	g := graph.MustNew("onboarding", "v1", []graph.Node{
		graph.Input("name"),
		graph.Input("email"),
		graph.Compute("greeting", graph.Needs("name", "email"),
			func(ctx context.Context, in graph.Values) (any, error) {
				return "Welcome, " + in.String("name") + " at " + in.String("email"), nil
			}),
	})

	// An application passes its own database URL, and usually keeps the default schema.
	url, schema, dropSchema := pgtest.ExampleSchema("ExampleRuntime")
	defer dropSchema()
	rt, err := journey.New(ctx, journey.Config{
		DatabaseURL: url,
		Schema:      schema,
		Graphs:      []*graph.Graph{g},
		Logger:      slog.New(slog.DiscardHandler),
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

	ex, err := rt.Start(ctx, g)
	if err != nil {
		fmt.Println(err)
		return
	}
	rev, err := rt.Set(ctx, ex.ID, "name", "Mario")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("name set at revision", rev)
	rev, err = rt.Set(ctx, ex.ID, "email", "mario@example.com")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("email set at revision", rev)

	// The greeting is computed by the runtime; Get waits for it.
	v, err := rt.Get(ctx, ex.ID, "greeting", journey.WaitAny())
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%s (revision %d)\n", v.String(), v.Revision)
	// Output:
	// name set at revision 1
	// email set at revision 2
	// Welcome, Mario at mario@example.com (revision 4)
}

func ExampleRuntime_StartMany() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	g := graph.MustNew("greetings", "v1", []graph.Node{
		graph.Input("name"),
		graph.Compute("greeting", graph.Needs("name"),
			func(ctx context.Context, in graph.Values) (any, error) {
				return "Hello, " + in.String("name"), nil
			}),
	})
	url, schema, dropSchema := pgtest.ExampleSchema("ExampleRuntime_StartMany")
	defer dropSchema()
	rt, err := journey.New(ctx, journey.Config{
		DatabaseURL: url,
		Schema:      schema,
		Graphs:      []*graph.Graph{g},
		Logger:      slog.New(slog.DiscardHandler),
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

	// One transaction starts the three executions, each with its name set at revision 1.
	execs, err := rt.StartMany(ctx, g, []map[string]any{{"name": "Mario"}, {"name": "Luigi"}, {"name": "Peach"}})
	if err != nil {
		fmt.Println(err)
		return
	}
	// Start does the same for one execution.
	ex, err := rt.Start(ctx, g, journey.WithValues(map[string]any{"name": "Toad"}))
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, ex := range append(execs, ex) {
		v, err := rt.Get(ctx, ex.ID, "greeting", journey.WaitAny())
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("%s (revision %d)\n", v.String(), v.Revision)
	}

	// Bad input in any item starts nothing, and the error names the item.
	_, err = rt.StartMany(ctx, g, []map[string]any{{"name": "Daisy"}, {"greeting": "Hi"}})
	fmt.Println(errors.Is(err, journey.ErrNotInput), err)
	// Output:
	// Hello, Mario (revision 3)
	// Hello, Luigi (revision 3)
	// Hello, Peach (revision 3)
	// Hello, Toad (revision 3)
	// true inputs[1]: journey: node is not an input: "greeting" is a compute node; only input nodes can be set
}

func ExampleWithKey() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	orders := graph.MustNew("orders", "v1", []graph.Node{
		graph.Input("order"),
		graph.Compute("shipped", graph.Needs("order"),
			func(ctx context.Context, in graph.Values) (any, error) {
				return "shipped " + in.String("order"), nil
			}),
	})
	url, schema, dropSchema := pgtest.ExampleSchema("ExampleWithKey")
	defer dropSchema()
	rt, err := journey.New(ctx, journey.Config{
		DatabaseURL: url,
		Schema:      schema,
		Graphs:      []*graph.Graph{orders},
		Logger:      slog.New(slog.DiscardHandler),
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

	// A webhook delivered twice: the second Start finds the first's execution, and starts nothing.
	var ids []string
	for _, order := range []string{"1042", "1042 (retried)"} {
		ex, err := rt.Start(ctx, orders, journey.WithKey("order-1042"),
			journey.WithValues(map[string]any{"order": order}))
		if err != nil {
			fmt.Println(err)
			return
		}
		ids = append(ids, ex.ID)
		fmt.Printf("key %s, existing %t\n", ex.Key, ex.Existing)
	}
	fmt.Println("one execution:", ids[0] == ids[1])
	shipped, err := journey.GetAs[string](ctx, rt, ids[0], "shipped", journey.WaitAny())
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(shipped) // the first delivery's values, not the retry's

	// Archiving frees the key: the next Start with it starts a new execution.
	if err := rt.Archive(ctx, ids[0]); err != nil {
		fmt.Println(err)
		return
	}
	ex, err := rt.Start(ctx, orders, journey.WithKey("order-1042"))
	if err != nil {
		fmt.Println(err)
		return
	}
	found, err := rt.FindByKey(ctx, "orders", "order-1042")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("a new execution:", !ex.Existing && ex.ID != ids[0] && found.ID == ex.ID)
	// Output:
	// key order-1042, existing false
	// key order-1042, existing true
	// one execution: true
	// shipped 1042
	// a new execution: true
}
