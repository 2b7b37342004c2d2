package graph

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// reservedNames are node names the runtime uses for its own columns.
var reservedNames = []string{"execution_id", "last_updated_at"}

// maxIDPrefixLen is the length of the longest IDPrefix allowed.
const maxIDPrefixLen = 16

// maxNameBytes is the length in bytes of the longest graph name, version or node name allowed.
// Names are stored in indexed columns, and a replica lists those of the graphs it serves in its
// writes.
const maxNameBytes = 255

// shownNameBytes is how much of a name too long to be allowed a problem shows.
const shownNameBytes = 40

// validator collects the problems of a graph.
type validator struct {
	g        *Graph
	problems []error
}

// graphf records a problem of the graph as a whole.
func (v *validator) graphf(format string, args ...any) {
	msg := fmt.Sprintf("graph %s: ", shown(v.g.name)) + fmt.Sprintf(format, args...)
	v.problems = append(v.problems, &problem{msg: msg})
}

// nodef records a problem of the node at position i.
func (v *validator) nodef(i int, format string, args ...any) {
	node := "node " + shown(v.g.nodes[i].name)
	if v.g.nodes[i].name == "" {
		node = fmt.Sprintf("node #%d", i+1)
	}
	v.graphf("%s: %s", node, fmt.Sprintf(format, args...))
}

// validate checks the graph and its options, given the cycles topoSort found, and returns all
// problems joined, or nil.
func (g *Graph) validate(o *graphOptions, cycles [][]int) error {
	v := &validator{g: g}
	if p := nameProblem(g.name); p != "" {
		v.graphf("name %s", p)
	}
	if p := nameProblem(g.version); p != "" {
		v.graphf("version %s", p)
	}
	if len(g.nodes) == 0 {
		v.graphf("has no nodes")
	}
	for i := range g.nodes {
		v.checkNode(i)
	}
	for _, cycle := range cycles {
		steps := make([]string, len(cycle))
		for k, i := range cycle {
			next := cycle[(k+1)%len(cycle)]
			steps[k] = fmt.Sprintf("%q depends on %q", g.nodes[i].name, g.nodes[next].name)
		}
		v.nodef(cycle[0], "gates form a cycle: %s", strings.Join(steps, ", "))
	}
	v.checkGraphOptions(o)
	return errors.Join(v.problems...)
}

// checkNode records the problems of the node at position i.
func (v *validator) checkNode(i int) {
	n := v.g.nodes[i]
	switch p := nameProblem(n.name); {
	case p != "":
		v.nodef(i, "name %s", p)
	case slices.Contains(reservedNames, n.name):
		v.nodef(i, "name is reserved (reserved names: %s)", strings.Join(reservedNames, ", "))
	case v.g.index[n.name] != i:
		v.nodef(i, "name is already used by node #%d", v.g.index[n.name]+1)
	}
	if !n.kind.valid() {
		v.nodef(i, "unknown kind %v; build nodes with Input, Compute, Mutate, TickOnce, TickRecurring, Historian, Archive, Map or Child", n.kind)
		return
	}

	if n.kind != KindInput {
		if n.gate == nil {
			v.nodef(i, "gate is nil; use Needs() for a node that runs at start")
		} else {
			v.checkGate(i, "gate", n.gate)
		}
	}
	switch {
	case (n.kind == KindCompute || n.kind == KindMutate) && n.fn == nil:
		v.nodef(i, "%s function is nil", n.kind)
	case n.kind.isTick() && n.tick == nil:
		v.nodef(i, "%s function is nil", n.kind)
	case n.kind == KindMap:
		v.checkMap(i)
	}
	v.checkOptions(i)
	if n.kind == KindMutate {
		v.checkTargets(i)
	}
}

// nameProblem returns the rule that s, a graph's name or version or a node's name, breaks, or ""
// if it breaks none. A name is 1 to maxNameBytes bytes of valid UTF-8, with no NUL or other
// control character: PostgreSQL text cannot hold a NUL or invalid UTF-8, and a control character
// makes a name that logs and operators cannot read.
func nameProblem(s string) string {
	const rules = "names are valid UTF-8 with no control characters"
	switch {
	case s == "":
		return "is empty"
	case len(s) > maxNameBytes:
		return fmt.Sprintf("is %d bytes long, over the limit of %d", len(s), maxNameBytes)
	}
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			return fmt.Sprintf("is not valid UTF-8 (byte %d is 0x%02x); %s", i, s[i], rules)
		case r == 0:
			return fmt.Sprintf("holds a NUL character (byte %d); %s", i, rules)
		case unicode.IsControl(r):
			return fmt.Sprintf("holds the control character %U (byte %d); %s", r, i, rules)
		}
		i += size
	}
	return ""
}

// shown is name quoted for a problem, cut short if it is too long to be allowed.
func shown(name string) string {
	if len(name) <= maxNameBytes {
		return fmt.Sprintf("%q", name)
	}
	cut := shownNameBytes
	for cut > 0 && !utf8.RuneStart(name[cut]) {
		cut--
	}
	return fmt.Sprintf("%q…", name[:cut])
}

// checkGate records the problems of a gate: a missing part, and references to unknown nodes.
// i is the position of the node it gates, or -1 for a gate of the graph.
func (v *validator) checkGate(i int, what string, gate Gate) {
	report := func(format string, args ...any) {
		if i < 0 {
			v.graphf(format, args...)
		} else {
			v.nodef(i, format, args...)
		}
	}
	for _, p := range checkGate(gate) {
		report("%s: %s", what, p)
	}
	names := slices.Compact(slices.Sorted(slices.Values(gate.Nodes())))
	for _, name := range names {
		if _, ok := v.g.index[name]; !ok {
			report("%s names unknown node %q", what, name)
		}
	}
	for _, name := range slices.Compact(slices.Sorted(slices.Values(failedNodes(gate)))) {
		if j, ok := v.g.index[name]; ok && !v.g.nodes[j].kind.runs() {
			report("%s: failed(%s) names %s node, which never fails; Failed takes a compute, mutate or tick node",
				what, name, article(v.g.nodes[j].kind))
		}
	}
}

// optionApplies reports whether an option applies to nodes of kind k.
func optionApplies(o option, k Kind) bool {
	switch o {
	case optOnSave:
		return true
	case optUpdateRevisionOnChange:
		return k == KindMutate
	case optMaxEntries:
		return k == KindHistorian
	case optResult, optCollectFailures:
		return k == KindMap
	default:
		return k != KindInput
	}
}

// checkOptions records options given to a node they do not apply to, and values out of range.
func (v *validator) checkOptions(i int) {
	n := v.g.nodes[i]
	s := n.opts.settings
	for o := range numOptions {
		if !n.opts.given[o] {
			continue
		}
		if !optionApplies(o, n.kind) {
			switch o {
			case optUpdateRevisionOnChange:
				v.nodef(i, "option %v applies only to mutate nodes, not to %s nodes", o, n.kind)
			case optMaxEntries:
				v.nodef(i, "option %v applies only to historian nodes, not to %s nodes", o, n.kind)
			case optResult, optCollectFailures:
				v.nodef(i, "option %v applies only to Map and Child nodes, not to %s nodes", o, n.kind)
			default:
				v.nodef(i, "option %v does not apply to input nodes, which accept only OnSave", o)
			}
			continue
		}
		switch o {
		case optMaxAttempts:
			if s.MaxAttempts <= 0 {
				v.nodef(i, "option MaxAttempts(%d) must be at least 1", s.MaxAttempts)
			}
		case optAbandonAfter:
			if s.AbandonAfter <= 0 {
				v.nodef(i, "option AbandonAfter(%v) must be positive", s.AbandonAfter)
			}
		case optHeartbeat:
			v.checkHeartbeat(i, s)
		case optBackoff:
			if s.Backoff == nil {
				v.nodef(i, "option Backoff has a nil function")
			}
		case optOnSave:
			if s.OnSave == nil {
				v.nodef(i, "option OnSave has a nil function")
			}
		case optConcurrencyKey:
			if s.ConcurrencyKey == nil {
				v.nodef(i, "option ConcurrencyKey has a nil function")
			}
		case optMaxParallel:
			if s.MaxParallel <= 0 {
				v.nodef(i, "option MaxParallel(%d) must be at least 1; leave it out for no limit", s.MaxParallel)
			}
		case optPriority:
			if s.Priority < 0 || s.Priority > MaxPriority {
				v.nodef(i, "option Priority(%d) must be from 0 to %d; higher goes first", s.Priority, MaxPriority)
			}
		case optRateLimit:
			if s.RateLimit <= 0 {
				v.nodef(i, "option RateLimit(%d, %v) must allow at least 1 start; leave it out for no limit", s.RateLimit, s.RatePer)
			}
			if s.RatePer < time.Millisecond {
				v.nodef(i, "option RateLimit(%d, %v) needs a window of at least 1ms", s.RateLimit, s.RatePer)
			}
			if n.opts.rateKeyGiven && s.RateKey == nil {
				v.nodef(i, "option RateLimit has a RateKey with a nil function")
			}
		case optMaxEntries:
			if s.MaxEntries <= 0 {
				v.nodef(i, "option MaxEntries(%d) must be at least 1", s.MaxEntries)
			}
		}
	}
}

// checkMap records the problems of a map node: its child graph and its function.
func (v *validator) checkMap(i int) {
	n := v.g.nodes[i]
	what := "Map"
	if n.one {
		what = "Child"
	}
	if n.each == nil {
		v.nodef(i, "%s function is nil", what)
	}
	switch c := n.child; {
	case c == nil:
		v.nodef(i, "%s child graph is nil; pass the graph whose executions it starts", what)
	case c == v.g || c.name == v.g.name:
		v.nodef(i, "%s child graph is the graph itself; a graph cannot start executions of itself", what)
	case c.completesWhen == nil:
		v.nodef(i, "%s child graph %q has no CompletesWhen; the node waits for each child to complete, "+
			"so give the child graph graph.CompletesWhen(...)", what, c.name)
	default:
		if r := n.opts.settings.Result; n.opts.given[optResult] {
			if _, ok := c.index[r]; !ok {
				v.nodef(i, "option Result(%s) names no node of the child graph %q", shown(r), c.name)
			}
		}
	}
}

// checkHeartbeat records a heartbeat that is not positive, or too slow for its timeout.
func (v *validator) checkHeartbeat(i int, s Settings) {
	interval, timeout := s.HeartbeatInterval, s.HeartbeatTimeout
	if interval <= 0 {
		v.nodef(i, "option Heartbeat interval %v must be positive", interval)
	}
	if timeout <= 0 {
		v.nodef(i, "option Heartbeat timeout %v must be positive", timeout)
	}
	if interval > 0 && timeout > 0 && 2*interval > timeout {
		v.nodef(i, "option Heartbeat interval %v is more than half the timeout %v; one late heartbeat would abandon the computation", interval, timeout)
	}
}

// checkTargets records the problems of a mutate node's targets.
func (v *validator) checkTargets(i int) {
	n := v.g.nodes[i]
	if len(n.targets) == 0 {
		v.nodef(i, "mutate has no targets")
		return
	}
	var upstream map[string]bool
	if n.opts.settings.UpdateRevisionOnChange {
		upstream = v.g.ancestors(i)
	}
	for k, t := range n.targets {
		j, known := v.g.index[t]
		switch {
		case slices.Index(n.targets, t) != k:
			v.nodef(i, "target %q is listed more than once", t)
		case t == n.name:
			v.nodef(i, "mutate cannot target itself")
		case !known:
			v.nodef(i, "target %q is not a node of the graph", t)
		case v.g.nodes[j].kind != KindInput:
			v.nodef(i, "target %q is a %s node; only input nodes can be mutated", t, v.g.nodes[j].kind)
		case upstream[t]:
			v.nodef(i, "option UpdateRevisionOnChange with target %q, which is upstream of %q, would make the mutate recompute itself", t, n.name)
		}
	}
}

// ancestors returns the names of all nodes that node i depends on through gates, directly or
// not. It terminates on cycles.
func (g *Graph) ancestors(i int) map[string]bool {
	seen := map[string]bool{}
	stack := g.deps(i)
	for len(stack) > 0 {
		j := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if seen[g.nodes[j].name] {
			continue
		}
		seen[g.nodes[j].name] = true
		stack = append(stack, g.deps(j)...)
	}
	return seen
}

// checkGraphOptions records the problems of the graph's options.
func (v *validator) checkGraphOptions(o *graphOptions) {
	if o.onSaveGiven && o.onSave == nil {
		v.graphf("option WithOnSave has a nil function")
	}
	switch {
	case o.completesWhenGiven && o.completesWhen == nil:
		v.graphf("option CompletesWhen has a nil gate")
	case o.completesWhenGiven:
		v.checkGate(-1, "option CompletesWhen: gate", o.completesWhen)
	}
	if o.idPrefixGiven && !validIDPrefix(o.idPrefix) {
		v.graphf("option IDPrefix(%q) must be 1 to %d characters of A-Z, a-z, 0-9 and _", o.idPrefix, maxIDPrefixLen)
	}
}

// validIDPrefix reports whether p is 1 to 16 characters of A-Z, a-z, 0-9 and _.
func validIDPrefix(p string) bool {
	if p == "" || len(p) > maxIDPrefixLen {
		return false
	}
	for _, r := range p {
		if !isASCIIAlnum(r) && r != '_' {
			return false
		}
	}
	return true
}

// article renders a kind with its indefinite article: "an input", "a historian".
func article(k Kind) string {
	if s := k.String(); strings.ContainsRune("aeiou", rune(s[0])) {
		return "an " + s
	}
	return "a " + k.String()
}
