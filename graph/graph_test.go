package graph

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestOrderDownstreamUpstream(t *testing.T) {
	t.Parallel()

	g, err := New("shop", "v2", []Node{
		Compute("receipt", Needs("total", "email"), noopCompute),
		Input("cart"),
		Compute("total", Needs("cart", "discount"), noopCompute),
		Compute("welcome", Needs(), noopCompute),
		Compute("discount", Or(Needs("cart"), Not(Provided("coupon"))), noopCompute),
		Input("coupon"),
		Input("email"),
		Historian("history", Needs("cart", "cart", "email")),
	})
	require.NoError(t, err)

	require.Equal(t, []string{
		"cart", "coupon", "email", // inputs first, in definition order
		"welcome", "discount", "total", "receipt", "history",
	}, g.Order())

	pos := map[string]int{}
	for i, name := range g.Order() {
		pos[name] = i
	}
	for _, n := range g.Nodes() {
		for _, up := range n.Upstream() {
			require.Less(t, pos[up], pos[n.Name()], "%s comes after its upstream %s", n.Name(), up)
		}
		require.Equal(t, n.Upstream(), slices.Collect(n.Upstreams()), n.Name())
	}
	var walked []string
	for n := range g.InOrder() {
		walked = append(walked, n.Name())
	}
	require.Equal(t, g.Order(), walked)

	require.Equal(t, []string{"discount", "total", "history"}, g.Downstream("cart"))
	require.Equal(t, []string{"receipt"}, g.Downstream("total"))
	require.Equal(t, []string{"receipt", "history"}, g.Downstream("email"))
	require.Equal(t, []string{"discount"}, g.Downstream("coupon"))
	require.Empty(t, g.Downstream("receipt"))
	require.Empty(t, g.Downstream("nope"))

	node := func(name string) Node {
		n, ok := g.Node(name)
		require.True(t, ok, name)
		return n
	}
	require.Nil(t, node("cart").Upstream())
	require.Empty(t, node("welcome").Upstream())
	require.Equal(t, []string{"cart", "coupon"}, node("discount").Upstream())
	require.Equal(t, []string{"cart", "email"}, node("history").Upstream())
	require.Equal(t, []string{"email", "total"}, node("receipt").Upstream())

	// Results are copies.
	order := g.Order()
	order[0] = "x"
	require.Equal(t, "cart", g.Order()[0])
	down := g.Downstream("cart")
	down[0] = "x"
	require.Equal(t, "discount", g.Downstream("cart")[0])
	up := node("receipt").Upstream()
	up[0] = "x"
	require.Equal(t, "email", node("receipt").Upstream()[0])
}

func TestGraphAccessors(t *testing.T) {
	t.Parallel()

	var saved []string
	onSave := func(_ context.Context, e SaveEvent) { saved = append(saved, e.Node) }
	done := Needs("b")
	nodes := []Node{Input("a"), Compute("b", Needs("a"), noopCompute)}
	g, err := New("onboarding", "v1", nodes, WithOnSave(onSave), CompletesWhen(done), Singleton())
	require.NoError(t, err)
	require.True(t, g.Singleton())

	require.Equal(t, "onboarding", g.Name())
	require.Equal(t, "v1", g.Version())
	require.Equal(t, "ONB", g.IDPrefix())
	require.Equal(t, done, g.CompletesWhen())
	g.OnSave()(context.Background(), SaveEvent{Node: "b"})
	require.Equal(t, []string{"b"}, saved)

	got := g.Nodes()
	require.Len(t, got, 2)
	require.Equal(t, "a", got[0].Name())
	require.Equal(t, "b", got[1].Name())
	got[0] = Input("z")
	require.Equal(t, "a", g.Nodes()[0].Name(), "Nodes returns a copy")
	nodes[0] = Input("z")
	require.Equal(t, "a", g.Nodes()[0].Name(), "New keeps its own copy")

	_, ok := g.Node("z")
	require.False(t, ok)

	plain := MustNew("plain", "v1", []Node{Input("a")})
	require.Nil(t, plain.OnSave())
	require.Nil(t, plain.CompletesWhen())
	require.False(t, plain.Singleton())
}

func TestIDPrefix(t *testing.T) {
	t.Parallel()

	tests := []struct {
		graph string
		opts  []Option
		want  string
	}{
		{graph: "onboarding", want: "ONB"},
		{graph: "my-cart_2", want: "MYC"},
		{graph: "a-1", want: "A1"},
		{graph: "élan vital", want: "LAN"},
		{graph: "--", want: "EXE"},
		{graph: "onboarding", opts: []Option{IDPrefix("Onb_2024")}, want: "Onb_2024"},
	}
	for _, tt := range tests {
		t.Run(tt.graph, func(t *testing.T) {
			t.Parallel()

			g, err := New(tt.graph, "v1", []Node{Input("a")}, tt.opts...)
			require.NoError(t, err)
			require.Equal(t, tt.want, g.IDPrefix())
		})
	}
}

func TestNodeAccessors(t *testing.T) {
	t.Parallel()

	fn := func(context.Context, Values) (any, error) { return "x", nil }
	tick := func(context.Context, Values) (time.Time, error) { return time.Unix(7, 0), nil }
	targets := []string{"a", "b"}

	tests := []struct {
		node    Node
		kind    Kind
		str     string
		gate    bool
		fn      bool
		tick    bool
		targets []string
	}{
		{node: Input("n"), kind: KindInput, str: "input"},
		{node: Compute("n", Needs(), fn), kind: KindCompute, str: "compute", gate: true, fn: true},
		{node: Mutate("n", Needs(), fn, targets), kind: KindMutate, str: "mutate", gate: true, fn: true, targets: targets},
		{node: TickOnce("n", Needs(), tick), kind: KindTickOnce, str: "tick_once", gate: true, tick: true},
		{node: TickRecurring("n", Needs(), tick), kind: KindTickRecurring, str: "tick_recurring", gate: true, tick: true},
		{node: Historian("n", Needs()), kind: KindHistorian, str: "historian", gate: true},
		{node: Archive("n", Needs()), kind: KindArchive, str: "archive", gate: true},
	}
	for _, tt := range tests {
		t.Run(tt.str, func(t *testing.T) {
			t.Parallel()

			n := tt.node
			require.Equal(t, "n", n.Name())
			require.Equal(t, tt.kind, n.Kind())
			require.Equal(t, tt.str, n.Kind().String())
			require.Equal(t, tt.gate, n.Gate() != nil)
			require.Equal(t, tt.fn, n.Func() != nil)
			require.Equal(t, tt.tick, n.Tick() != nil)
			require.Equal(t, tt.targets, n.Targets())
		})
	}
	require.Equal(t, "Kind(0)", Kind(0).String())

	own := []string{"a", "b"}
	m := Mutate("m", Needs(), fn, own)
	own[0] = "z"
	require.Equal(t, []string{"a", "b"}, m.Targets(), "Mutate keeps its own copy")
	m.Targets()[0] = "z"
	require.Equal(t, []string{"a", "b"}, m.Targets(), "Targets returns a copy")
}

func TestSettings(t *testing.T) {
	t.Parallel()

	t.Run("defaults", func(t *testing.T) {
		t.Parallel()

		s := Compute("c", Needs(), noopCompute).Settings()
		require.Equal(t, 3, s.MaxAttempts)
		require.Equal(t, 60*time.Second, s.AbandonAfter)
		require.Equal(t, 10*time.Second, s.HeartbeatInterval)
		require.Equal(t, 30*time.Second, s.HeartbeatTimeout)
		require.NotNil(t, s.Backoff)
		require.InDelta(t, float64(time.Second), float64(s.Backoff(1)), 0.2*float64(time.Second))
		require.Nil(t, s.OnSave)
		require.Nil(t, s.ConcurrencyKey)
		require.Zero(t, s.MaxParallel)
		require.False(t, s.UpdateRevisionOnChange)
		require.Equal(t, 100, s.MaxEntries)
	})

	t.Run("given", func(t *testing.T) {
		t.Parallel()

		var saved bool
		s := Mutate("m", Needs(), noopCompute, []string{"a"},
			MaxAttempts(7), AbandonAfter(time.Hour), Heartbeat(time.Second, 5*time.Second),
			Backoff(func(int) time.Duration { return time.Millisecond }),
			OnSave(func(context.Context, SaveEvent) { saved = true }),
			ConcurrencyKey(func(v Values) string { return v.String("a") }),
			MaxParallel(4), UpdateRevisionOnChange(),
		).Settings()
		require.Equal(t, 7, s.MaxAttempts)
		require.Equal(t, time.Hour, s.AbandonAfter)
		require.Equal(t, time.Second, s.HeartbeatInterval)
		require.Equal(t, 5*time.Second, s.HeartbeatTimeout)
		require.Equal(t, time.Millisecond, s.Backoff(1))
		s.OnSave(context.Background(), SaveEvent{})
		require.True(t, saved)
		require.Equal(t, "k", s.ConcurrencyKey(valuesOf(t, map[string]any{"a": "k"})))
		require.Equal(t, 4, s.MaxParallel)
		require.True(t, s.UpdateRevisionOnChange)

		require.Equal(t, 9, Historian("h", Needs(), MaxEntries(9)).Settings().MaxEntries)
	})
}

func TestMermaid(t *testing.T) {
	t.Parallel()

	g := MustNew("onboarding", "v1", []Node{
		Compute("greeting", Needs("name", "email"), noopCompute),
		Input("name"),
		Input("email"),
		Input("switch"),
		Mutate("paddle", IsTrue("switch"), noopCompute, []string{"switch", "name"}),
		TickOnce("reminder", Needs("email"), noopTick),
		TickRecurring("every day", Needs("email"), noopTick),
		Historian("history", Needs("name", "email")),
		Archive("end", Or(Provided("reminder"), Provided("every day"))),
	})
	want := `flowchart TD
    greeting["greeting"]
    name[/"name"/]
    email[/"email"/]
    switch[/"switch"/]
    paddle[["paddle"]]
    reminder(("reminder"))
    node_7((("every day")))
    history[("history")]
    node_9{{"end"}}
    email --> greeting
    name --> greeting
    switch --> paddle
    email --> reminder
    email --> node_7
    email --> history
    name --> history
    node_7 --> node_9
    reminder --> node_9
    paddle -.->|mutates| switch
    paddle -.->|mutates| name
`
	require.Equal(t, want, g.Mermaid())
	require.Equal(t, want, g.Mermaid(), "Mermaid is deterministic")
}

func TestMermaidIDsStayUnique(t *testing.T) {
	t.Parallel()

	g := MustNew("g", "v1", []Node{
		Input("node_2"),
		Input(`say "hi"`),
	})
	require.Equal(t, "flowchart TD\n"+
		"    node_2[/\"node_2\"/]\n"+
		"    node_2_[/\"say #quot;hi#quot;\"/]\n", g.Mermaid())
}
