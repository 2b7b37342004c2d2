package graph

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Description is the canonical description of a graph's definition: its nodes, their kinds,
// gates and options, and the graph's options. It holds everything that decides how the graph's
// executions behave but the functions, which cannot be compared: a ComputeFunc, TickFunc, When
// predicate, Backoff, ConcurrencyKey, RateKey or OnSave changed in place leaves it as it was, while
// adding or removing one of the last four changes it. Options hold their resolved values, so a node
// that states a default is described as one that relies on it. Nodes are in name order, so that
// reordering their definitions changes nothing. The graph's name and version are not part of it.
//
// It encodes to JSON. The runtime records it with the Fingerprint of each graph version it
// serves, and refuses a changed graph under a recorded version, saying what changed (Changes).
type Description struct {
	// IDPrefix is the prefix of the execution IDs, resolved.
	IDPrefix string `json:"id_prefix"`
	// CompletesWhen is the CompletesWhen gate as Gate.String renders it, or "".
	CompletesWhen string `json:"completes_when,omitempty"`
	// Singleton is true for a graph made with Singleton.
	Singleton bool `json:"singleton,omitempty"`
	// OnSave is true for a graph with a WithOnSave callback.
	OnSave bool `json:"on_save,omitempty"`
	// Nodes describe the nodes, in name order.
	Nodes []NodeDescription `json:"nodes"`
}

// NodeDescription describes a node in a Description. The options that do not apply to the node's
// kind are zero.
type NodeDescription struct {
	Name string `json:"name"`
	// Kind is the node's kind as Kind.String gives it, such as "compute".
	Kind string `json:"kind"`
	// Gate is the gate as Gate.String renders it; "" for an input.
	Gate string `json:"gate,omitempty"`
	// Upstream are the nodes the gate references, as Node.Upstream gives them.
	Upstream []string `json:"upstream,omitempty"`
	// Targets are a mutate node's targets, sorted.
	Targets []string `json:"targets,omitempty"`

	MaxAttempts       int           `json:"max_attempts,omitempty"`
	AbandonAfter      time.Duration `json:"abandon_after,omitempty"`
	HeartbeatInterval time.Duration `json:"heartbeat_interval,omitempty"`
	HeartbeatTimeout  time.Duration `json:"heartbeat_timeout,omitempty"`
	// MaxParallel is 0 for no limit.
	MaxParallel int `json:"max_parallel,omitempty"`
	// Backoff is true for a node given a Backoff of its own, rather than DefaultBackoff.
	Backoff bool `json:"backoff,omitempty"`
	// ConcurrencyKey is true for a node with a ConcurrencyKey.
	ConcurrencyKey bool `json:"concurrency_key,omitempty"`
	// OnSave is true for a node with an OnSave callback of its own.
	OnSave                 bool `json:"on_save,omitempty"`
	UpdateRevisionOnChange bool `json:"update_revision_on_change,omitempty"`
	MaxEntries             int  `json:"max_entries,omitempty"`
	Priority               int  `json:"priority,omitempty"`
	// Child is a map node's child graph, as name@version.
	Child string `json:"child,omitempty"`
	// One is true for a Child, false for a Map.
	One             bool   `json:"one,omitempty"`
	Result          string `json:"result,omitempty"`
	CollectFailures bool   `json:"collect_failures,omitempty"`
	// RateLimit and RatePer are 0 for no rate limit; RateKey is true for a limit per key.
	RateLimit int           `json:"rate_limit,omitempty"`
	RatePer   time.Duration `json:"rate_per,omitempty"`
	RateKey   bool          `json:"rate_key,omitempty"`
}

// Describe returns the graph's Description.
func (g *Graph) Describe() Description {
	d := Description{IDPrefix: g.idPrefix, Singleton: g.singleton, OnSave: g.onSave != nil,
		Nodes: make([]NodeDescription, 0, len(g.nodes))}
	if g.completesWhen != nil {
		d.CompletesWhen = g.completesWhen.String()
	}
	for _, n := range g.nodes {
		d.Nodes = append(d.Nodes, n.describe())
	}
	slices.SortFunc(d.Nodes, func(a, b NodeDescription) int { return cmp.Compare(a.Name, b.Name) })
	return d
}

// describe returns the node's description.
func (n Node) describe() NodeDescription {
	s := n.opts.settings
	d := NodeDescription{Name: n.name, Kind: n.kind.String(), Upstream: n.Upstream(),
		Targets: slices.Sorted(slices.Values(n.targets)), OnSave: s.OnSave != nil}
	if n.gate != nil {
		d.Gate = n.gate.String()
	}
	applies := func(o option) bool { return optionApplies(o, n.kind) }
	if applies(optMaxAttempts) {
		d.MaxAttempts, d.AbandonAfter, d.MaxParallel = s.MaxAttempts, s.AbandonAfter, s.MaxParallel
		d.HeartbeatInterval, d.HeartbeatTimeout = s.HeartbeatInterval, s.HeartbeatTimeout
		d.Backoff, d.ConcurrencyKey, d.Priority = n.opts.given[optBackoff], s.ConcurrencyKey != nil, s.Priority
		d.RateLimit, d.RatePer, d.RateKey = s.RateLimit, s.RatePer, s.RateKey != nil
	}
	if applies(optUpdateRevisionOnChange) {
		d.UpdateRevisionOnChange = s.UpdateRevisionOnChange
	}
	if applies(optMaxEntries) {
		d.MaxEntries = s.MaxEntries
	}
	if n.child != nil {
		d.Child, d.One, d.Result, d.CollectFailures = n.child.name+"@"+n.child.version, n.one, s.Result, s.CollectFailures
	}
	return d
}

// Fingerprint returns the hex SHA-256 of the JSON encoding of the graph's Description: two
// definitions have the same fingerprint exactly when they have the same Description.
func (g *Graph) Fingerprint() string { return g.Describe().Fingerprint() }

// Fingerprint returns the hex SHA-256 of the JSON encoding of d.
func (d Description) Fingerprint() string {
	b, _ := json.Marshal(d) // cannot fail: strings, numbers and booleans
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// Changes says what differs from d to next, one change a line, in name order: a node added or
// removed (`node "refund" is new`), a node's kind, gate or option (`node "charge": MaxAttempts
// 3 → 5`, `node "ship": gate needs(pay) → needs(pay, pack)`), or a graph option (`graph option
// IDPrefix "SHO" → "ORD"`). A node whose kind changed has that one change. Changes is empty
// exactly when the two descriptions are equal.
func (d Description) Changes(next Description) []string {
	var out []string
	for _, f := range graphFields {
		if a, b := f.value(d), f.value(next); a != b {
			out = append(out, fmt.Sprintf("graph option %s %s → %s", f.name, a, b))
		}
	}
	before, after := byName(d.Nodes), byName(next.Nodes)
	all := maps.Clone(before)
	maps.Copy(all, after)
	for _, name := range slices.Sorted(maps.Keys(all)) {
		a, was := before[name]
		b, is := after[name]
		switch {
		case !was:
			out = append(out, fmt.Sprintf("node %q is new", name))
		case !is:
			out = append(out, fmt.Sprintf("node %q is removed", name))
		case a.Kind != b.Kind:
			out = append(out, fmt.Sprintf("node %q: kind %s → %s", name, a.Kind, b.Kind))
		default:
			for _, f := range nodeFields {
				if f.name == "upstream" && a.Gate != b.Gate {
					continue // the gates' change says it
				}
				if va, vb := f.value(a), f.value(b); va != vb {
					out = append(out, fmt.Sprintf("node %q: %s %s → %s", name, f.name, va, vb))
				}
			}
		}
	}
	return out
}

// byName indexes nodes by name.
func byName(nodes []NodeDescription) map[string]NodeDescription {
	m := make(map[string]NodeDescription, len(nodes))
	for _, n := range nodes {
		m[n.Name] = n
	}
	return m
}

// field is an entry of a description compared by Changes, with its value as Changes shows it.
type field[T any] struct {
	name  string
	value func(T) string
}

var graphFields = []field[Description]{
	{"IDPrefix", func(d Description) string { return strconv.Quote(d.IDPrefix) }},
	{"CompletesWhen", func(d Description) string { return cmp.Or(d.CompletesWhen, "none") }},
	{"Singleton", func(d Description) string { return strconv.FormatBool(d.Singleton) }},
	{"WithOnSave", func(d Description) string { return isSet(d.OnSave) }},
}

var nodeFields = []field[NodeDescription]{
	{"gate", func(n NodeDescription) string { return cmp.Or(n.Gate, "none") }},
	{"upstream", func(n NodeDescription) string { return "(" + strings.Join(n.Upstream, ", ") + ")" }},
	{"targets", func(n NodeDescription) string { return "(" + strings.Join(n.Targets, ", ") + ")" }},
	{"MaxAttempts", func(n NodeDescription) string { return strconv.Itoa(n.MaxAttempts) }},
	{"AbandonAfter", func(n NodeDescription) string { return n.AbandonAfter.String() }},
	{"Heartbeat interval", func(n NodeDescription) string { return n.HeartbeatInterval.String() }},
	{"Heartbeat timeout", func(n NodeDescription) string { return n.HeartbeatTimeout.String() }},
	{"MaxParallel", func(n NodeDescription) string {
		if n.MaxParallel == 0 {
			return "no limit"
		}
		return strconv.Itoa(n.MaxParallel)
	}},
	{"Backoff", func(n NodeDescription) string {
		if n.Backoff {
			return "set"
		}
		return "default"
	}},
	{"ConcurrencyKey", func(n NodeDescription) string { return isSet(n.ConcurrencyKey) }},
	{"OnSave", func(n NodeDescription) string { return isSet(n.OnSave) }},
	{"UpdateRevisionOnChange", func(n NodeDescription) string { return strconv.FormatBool(n.UpdateRevisionOnChange) }},
	{"MaxEntries", func(n NodeDescription) string { return strconv.Itoa(n.MaxEntries) }},
	{"Priority", func(n NodeDescription) string { return strconv.Itoa(n.Priority) }},
	{"child", func(n NodeDescription) string { return cmp.Or(n.Child, "none") }},
	{"One", func(n NodeDescription) string { return strconv.FormatBool(n.One) }},
	{"Result", func(n NodeDescription) string { return cmp.Or(n.Result, "none") }},
	{"CollectFailures", func(n NodeDescription) string { return strconv.FormatBool(n.CollectFailures) }},
	{"RateLimit", func(n NodeDescription) string {
		if n.RateLimit == 0 {
			return "no limit"
		}
		return fmt.Sprintf("%d per %v", n.RateLimit, n.RatePer)
	}},
	{"RateKey", func(n NodeDescription) string { return isSet(n.RateKey) }},
}

// isSet shows whether a function is set.
func isSet(set bool) string {
	if set {
		return "set"
	}
	return "none"
}
