package graph

import (
	"fmt"
	"strconv"
	"strings"
)

// mermaidShapes gives the opening and closing of each kind's node shape.
var mermaidShapes = map[Kind][2]string{
	KindInput:         {"[/", "/]"},   // parallelogram
	KindCompute:       {"[", "]"},     // rectangle
	KindMutate:        {"[[", "]]"},   // subroutine
	KindTickOnce:      {"((", "))"},   // circle
	KindTickRecurring: {"(((", ")))"}, // double circle
	KindHistorian:     {"[(", ")]"},   // cylinder
	KindArchive:       {"{{", "}}"},   // hexagon
	KindMap:           {"([", "])"},   // stadium
}

// mermaidKeywords are words that Mermaid does not accept as node IDs.
var mermaidKeywords = map[string]bool{
	"end": true, "graph": true, "flowchart": true, "subgraph": true, "direction": true,
	"style": true, "class": true, "classdef": true, "click": true, "linkstyle": true,
	"call": true, "href": true, "default": true,
}

// Mermaid renders the graph as a Mermaid flowchart ("flowchart TD"), for documentation and
// debugging. Each node is drawn in a shape for its kind: input as a parallelogram, compute as a
// rectangle, mutate as a subroutine box, a one-off tick as a circle, a recurring tick as a
// double circle, historian as a cylinder, archive as a hexagon and map as a stadium. An edge runs from each
// upstream node to the nodes whose gate references it, and a dotted edge labelled "mutates"
// from each mutate node to its targets. Nodes and edges follow definition order, and the edges
// into a node follow the order of Node.Upstream, so the output is the same for the same graph.
func (g *Graph) Mermaid() string {
	ids := g.mermaidIDs()
	var b strings.Builder
	b.WriteString("flowchart TD\n")
	for i, n := range g.nodes {
		shape := mermaidShapes[n.kind]
		label := strings.ReplaceAll(n.name, `"`, "#quot;")
		fmt.Fprintf(&b, "    %s%s\"%s\"%s\n", ids[i], shape[0], label, shape[1])
	}
	for i, n := range g.nodes {
		for _, up := range n.upstream {
			fmt.Fprintf(&b, "    %s --> %s\n", ids[g.index[up]], ids[i])
		}
	}
	for i, n := range g.nodes {
		for _, t := range n.targets {
			fmt.Fprintf(&b, "    %s -.->|mutates| %s\n", ids[i], ids[g.index[t]])
		}
	}
	return b.String()
}

// mermaidIDs returns a Mermaid node ID for each node, by position. A name that is a plain
// identifier and no Mermaid keyword is its own ID; any other gets "node_" and its position,
// made unique against the names.
func (g *Graph) mermaidIDs() []string {
	ids := make([]string, len(g.nodes))
	for i, n := range g.nodes {
		if plainIdentifier(n.name) && !mermaidKeywords[strings.ToLower(n.name)] {
			ids[i] = n.name
			continue
		}
		id := "node_" + strconv.Itoa(i+1)
		for {
			if _, taken := g.index[id]; !taken {
				break
			}
			id += "_"
		}
		ids[i] = id
	}
	return ids
}

// plainIdentifier reports whether s is an ASCII letter followed by ASCII letters, digits and
// underscores.
func plainIdentifier(s string) bool {
	if s == "" {
		return false
	}
	for i, r := range s {
		switch {
		case 'a' <= r && r <= 'z', 'A' <= r && r <= 'Z':
		case i > 0 && (isASCIIAlnum(r) || r == '_'):
		default:
			return false
		}
	}
	return true
}
