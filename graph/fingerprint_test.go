package graph

import (
	"cmp"
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// opaqueGate is a gate defined outside this package, whose rendering does not name its nodes.
type opaqueGate struct{ nodes []string }

func (g opaqueGate) Holds(Values) bool   { return true }
func (g opaqueGate) Nodes() []string     { return g.nodes }
func (g opaqueGate) Unmet(Values) string { return "" }
func (g opaqueGate) String() string      { return "opaque()" }

func otherCompute(context.Context, Values) (any, error) { return 1, nil }

// A graph's fingerprint changes with every node, kind, gate and option, and Changes says how;
// functions, the order of the definitions, stated defaults, the name and the version leave it.
func TestFingerprintAndChanges(t *testing.T) {
	t.Parallel()
	base := []Node{
		Input("order"),
		Input("address"),
		Compute("pay", Needs("order"), noopCompute),
		Compute("pack", Needs("order"), noopCompute),
		Compute("ship", Needs("pay"), noopCompute),
		Compute("audit", opaqueGate{nodes: []string{"order"}}, noopCompute),
		Mutate("fix", Needs("ship"), noopCompute, []string{"address"}),
		Historian("log", Needs("pay")),
	}
	// with returns base with n in place of the node of its name, or added.
	with := func(n Node) []Node {
		nodes := slices.Clone(base)
		if i := slices.IndexFunc(nodes, func(m Node) bool { return m.Name() == n.Name() }); i >= 0 {
			nodes[i] = n
			return nodes
		}
		return append(nodes, n)
	}
	pay := func(opts ...NodeOption) []Node { return with(Compute("pay", Needs("order"), noopCompute, opts...)) }
	reversed := slices.Clone(base)
	slices.Reverse(reversed)

	for _, tc := range []struct {
		name    string
		version string
		nodes   []Node
		opts    []Option
		changes []string
	}{
		{name: "other functions", nodes: with(Compute("pack", Needs("order"), otherCompute))},
		{name: "reordered", nodes: reversed},
		{name: "defaults stated", nodes: pay(MaxAttempts(3), AbandonAfter(time.Minute), Heartbeat(10*time.Second, 30*time.Second))},
		{name: "another version", version: "v2", nodes: base},
		{name: "new node", nodes: with(Compute("refund", Needs("pay"), noopCompute)), changes: []string{`node "refund" is new`}},
		{name: "removed node", nodes: base[:len(base)-1], changes: []string{`node "log" is removed`}},
		{name: "kind", nodes: with(TickOnce("pack", Needs("order"), noopTick)), changes: []string{`node "pack": kind compute → tick_once`}},
		{name: "gate", nodes: with(Compute("ship", Needs("pay", "pack"), noopCompute)),
			changes: []string{`node "ship": gate needs(pay) → needs(pay, pack)`}},
		{name: "upstream of a custom gate", nodes: with(Compute("audit", opaqueGate{nodes: []string{"order", "pay"}}, noopCompute)),
			changes: []string{`node "audit": upstream (order) → (order, pay)`}},
		{name: "MaxAttempts", nodes: pay(MaxAttempts(5)), changes: []string{`node "pay": MaxAttempts 3 → 5`}},
		{name: "AbandonAfter", nodes: pay(AbandonAfter(2 * time.Minute)), changes: []string{`node "pay": AbandonAfter 1m0s → 2m0s`}},
		{name: "Heartbeat", nodes: pay(Heartbeat(5*time.Second, time.Minute)), changes: []string{
			`node "pay": Heartbeat interval 10s → 5s`, `node "pay": Heartbeat timeout 30s → 1m0s`}},
		{name: "MaxParallel", nodes: pay(MaxParallel(2)), changes: []string{`node "pay": MaxParallel no limit → 2`}},
		{name: "Backoff", nodes: pay(Backoff(func(int) time.Duration { return 0 })), changes: []string{`node "pay": Backoff default → set`}},
		{name: "ConcurrencyKey", nodes: pay(ConcurrencyKey(func(Values) string { return "" })),
			changes: []string{`node "pay": ConcurrencyKey none → set`}},
		{name: "RateLimit", nodes: pay(RateLimit(100, time.Minute)), changes: []string{`node "pay": RateLimit no limit → 100 per 1m0s`}},
		{name: "RateKey", nodes: pay(RateLimit(100, time.Minute, RateKey(func(Values) string { return "" }))),
			changes: []string{`node "pay": RateLimit no limit → 100 per 1m0s`, `node "pay": RateKey none → set`}},
		{name: "OnSave", nodes: with(Input("order", OnSave(noopOnSave))), changes: []string{`node "order": OnSave none → set`}},
		{name: "UpdateRevisionOnChange", nodes: with(Mutate("fix", Needs("ship"), noopCompute, []string{"address"}, UpdateRevisionOnChange())),
			changes: []string{`node "fix": UpdateRevisionOnChange false → true`}},
		{name: "targets", nodes: with(Mutate("fix", Needs("ship"), noopCompute, []string{"order", "address"})),
			changes: []string{`node "fix": targets (address) → (address, order)`}},
		{name: "MaxEntries", nodes: with(Historian("log", Needs("pay"), MaxEntries(10))), changes: []string{`node "log": MaxEntries 100 → 10`}},
		{name: "IDPrefix", nodes: base, opts: []Option{IDPrefix("ORD")}, changes: []string{`graph option IDPrefix "SHO" → "ORD"`}},
		{name: "CompletesWhen", nodes: base, opts: []Option{CompletesWhen(Needs("ship"))},
			changes: []string{`graph option CompletesWhen none → needs(ship)`}},
		{name: "Singleton", nodes: base, opts: []Option{Singleton()}, changes: []string{`graph option Singleton false → true`}},
		{name: "WithOnSave", nodes: base, opts: []Option{WithOnSave(noopOnSave)}, changes: []string{`graph option WithOnSave none → set`}},
		{name: "several", nodes: append(pay(MaxAttempts(5)), Input("coupon")), opts: []Option{Singleton()}, changes: []string{
			`graph option Singleton false → true`, `node "coupon" is new`, `node "pay": MaxAttempts 3 → 5`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			was := MustNew("shop", "v1", base)
			now := MustNew("shop", cmp.Or(tc.version, "v1"), tc.nodes, tc.opts...)
			require.Equal(t, tc.changes, was.Describe().Changes(now.Describe()))
			if tc.changes == nil {
				require.Equal(t, was.Fingerprint(), now.Fingerprint())
			} else {
				require.NotEqual(t, was.Fingerprint(), now.Fingerprint())
			}
			require.Len(t, now.Fingerprint(), 64)
		})
	}
}

// A description read back from its JSON, as the runtime stores it, is the description it was.
func TestDescriptionJSON(t *testing.T) {
	t.Parallel()
	g := MustNew("shop", "v1", []Node{
		Input("order", OnSave(noopOnSave)),
		Compute("pay", Needs("order"), noopCompute, MaxAttempts(5), Heartbeat(time.Second, 3*time.Second),
			ConcurrencyKey(func(Values) string { return "" }), MaxParallel(2),
			RateLimit(10, time.Minute, RateKey(func(Values) string { return "" }))),
		Mutate("fix", Needs("pay"), noopCompute, []string{"order"}),
		Historian("log", Needs("pay"), MaxEntries(7)),
	}, CompletesWhen(Needs("pay")), Singleton(), IDPrefix("ORD"))
	b, err := json.Marshal(g.Describe())
	require.NoError(t, err)
	var back Description
	require.NoError(t, json.Unmarshal(b, &back))
	require.Equal(t, g.Describe(), back)
	require.Equal(t, g.Fingerprint(), back.Fingerprint())
	require.Empty(t, back.Changes(g.Describe()))
}
