package graph_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/journey-go/journey/graph"
)

// greet is the compute function of the onboarding examples.
func greet(ctx context.Context, in graph.Values) (any, error) {
	return "Welcome, " + in.String("name") + " at " + in.String("email"), nil
}

func ExampleNew() {
	g, err := graph.New("onboarding", "v1", []graph.Node{
		graph.Input("name"),
		graph.Input("email"),
		graph.Compute("greeting", graph.Needs("name", "email"), greet,
			graph.MaxAttempts(3), graph.AbandonAfter(time.Minute),
			graph.Heartbeat(10*time.Second, 30*time.Second)),
		graph.Historian("history", graph.Needs("name", "email")),
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(g.Order())
	fmt.Print(g.Mermaid())
	// Output:
	// [name email greeting history]
	// flowchart TD
	//     name[/"name"/]
	//     email[/"email"/]
	//     greeting["greeting"]
	//     history[("history")]
	//     email --> greeting
	//     name --> greeting
	//     email --> history
	//     name --> history
}

func ExampleNew_invalid() {
	_, err := graph.New("onboarding", "v1", []graph.Node{
		graph.Input("name"),
		graph.Input("email", graph.MaxAttempts(2)),
		graph.Compute("greeting", graph.Needs("name", "emial"), greet,
			graph.Heartbeat(20*time.Second, 30*time.Second)),
	})
	fmt.Println(errors.Is(err, graph.ErrInvalidGraph))
	fmt.Println(err)
	// Output:
	// true
	// graph "onboarding": node "email": option MaxAttempts does not apply to input nodes, which accept only OnSave
	// graph "onboarding": node "greeting": gate names unknown node "emial"
	// graph "onboarding": node "greeting": option Heartbeat interval 20s is more than half the timeout 30s; one late heartbeat would abandon the computation
}

func ExampleNeeds() {
	gate := graph.Needs("name", "email")
	vals := graph.Values{"name": {Raw: json.RawMessage(`"Mario"`)}}

	fmt.Println(gate, gate.Holds(vals))
	fmt.Println(gate.Unmet(vals))

	vals["email"] = graph.Value{Raw: json.RawMessage(`"mario@example.com"`)}
	fmt.Println(gate, gate.Holds(vals))
	// Output:
	// needs(name, email) false
	// needs "email"
	// needs(name, email) true
}

func ExampleWhen() {
	adult := graph.When("age", func(v graph.Value) bool { return v.IsSet() && v.Int() >= 18 })
	gate := graph.And(graph.Needs("email"), graph.Or(graph.IsTrue("consent"), adult))

	vals := graph.Values{
		"email": {Raw: json.RawMessage(`"mario@example.com"`)},
		"age":   {Raw: json.RawMessage(`16`)},
	}
	fmt.Println(gate.Holds(vals), gate.Unmet(vals))

	vals["consent"] = graph.Value{Raw: json.RawMessage(`true`)}
	fmt.Println(gate.Holds(vals))
	// Output:
	// false one of: (needs "consent") or ("age" does not satisfy predicate)
	// true
}

func ExampleOr() {
	// The outcome of an approval runs once the manager has decided or the deadline has passed.
	// The runtime presents a tick to gates only once it is due.
	gate := graph.Or(graph.Provided("decision"), graph.Provided("deadline"))
	fmt.Println(gate, gate.Holds(nil))
	fmt.Println(gate.Unmet(nil))

	vals := graph.Values{"deadline": {Raw: json.RawMessage(`1767225600000`)}}
	fmt.Println(gate.Holds(vals))
	// Output:
	// or(provided(decision), provided(deadline)) false
	// one of: (needs "decision") or (needs "deadline")
	// true
}

func ExampleNot() {
	// A node gated like this computes at start, and is cleared once "unsubscribed" is set.
	gate := graph.Not(graph.Provided("unsubscribed"))
	fmt.Println(gate.Holds(nil))

	vals := graph.Values{"unsubscribed": {Raw: json.RawMessage(`true`)}}
	fmt.Println(gate.Holds(vals), gate.Unmet(vals))
	// Output:
	// true
	// false not (provided "unsubscribed")
}

func ExampleMutate() {
	// Journey's "useless machine": whenever the switch is turned on, the paddle turns it off.
	g := graph.MustNew("machine", "v1", []graph.Node{
		graph.Input("switch"),
		graph.Mutate("paddle",
			graph.When("switch", func(v graph.Value) bool { return v.String() == "on" }),
			func(ctx context.Context, in graph.Values) (any, error) { return "off", nil },
			[]string{"switch"}),
	})
	fmt.Print(g.Mermaid())
	// Output:
	// flowchart TD
	//     switch[/"switch"/]
	//     paddle[["paddle"]]
	//     switch --> paddle
	//     paddle -.->|mutates| switch
}

func ExampleValues_Decode() {
	in := graph.Values{"address": {Raw: json.RawMessage(`{"city":"Rome","zip":"00100"}`)}}

	var addr struct {
		City string `json:"city"`
		Zip  string `json:"zip"`
	}
	if err := in.Decode("address", &addr); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(addr.City, addr.Zip)

	err := in.Decode("phone", &addr)
	fmt.Println(err, errors.Is(err, graph.ErrNotSet))
	// Output:
	// Rome 00100
	// node "phone": value not set true
}

func ExamplePermanent() {
	errDeclined := errors.New("card declined")
	charge := func(ctx context.Context, in graph.Values) (any, error) {
		// Retrying will not help: fail the node now.
		return nil, graph.Permanent(fmt.Errorf("charging %s: %w", in.String("card"), errDeclined))
	}

	_, err := charge(context.Background(), graph.Values{"card": {Raw: json.RawMessage(`"4242"`)}})
	fmt.Println(err)
	fmt.Println(graph.IsPermanent(err), errors.Is(err, errDeclined))
	// Output:
	// charging 4242: card declined
	// true true
}
