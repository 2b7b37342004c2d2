package journeyui

import (
	"cmp"
	"fmt"
	"time"

	"github.com/journey-go/journey/persistence"
)

// The states of a node in the picture, each a CSS class and a data-state attribute.
const (
	nodeSet     = "set"
	nodeRunning = "running"
	nodeFailed  = "failed"
	nodeWaiting = "waiting"
)

// nodeStates gives each node of an execution its state in the picture, from its value and its
// newest attempt (latest): failed if that attempt failed for good, running if it runs, set if the
// node has a value, and waiting otherwise (for its inputs, its gate, or its turn to run).
func nodeStates(d *persistence.ExecutionDetail, latest map[string]persistence.Attempt) map[string]string {
	out := map[string]string{}
	for _, v := range d.Values {
		out[v.Node] = nodeSet
	}
	for node, a := range latest {
		switch a.State {
		case persistence.StateFailed, persistence.StateAbandoned:
			out[node] = nodeFailed
		case persistence.StateRunning:
			out[node] = nodeRunning
		}
	}
	return out
}

// latestAttempts gives each node that has run its newest attempt.
func latestAttempts(d *persistence.ExecutionDetail) map[string]persistence.Attempt {
	latest := map[string]persistence.Attempt{}
	for _, a := range d.Attempts {
		latest[a.Node] = a // ordered by id: the newest last
	}
	return latest
}

// Sizes of the picture, in SVG units.
const (
	boxW, boxH = 160, 44
	gapX, gapY = 64, 18
	margin     = 8
)

// picture is a graph version drawn in layers: each node in the column of its depth (the longest
// path from a node without upstream), in definition order within its column.
type picture struct {
	Width, Height int
	Nodes         []pictureNode
	Edges         []pictureEdge
}

type pictureNode struct {
	Name, Label, Kind, Gate, State string
	X, Y                           int
}

type pictureEdge struct {
	From, To string
	Path     string // an SVG path, from the upstream's right side to the node's left side
}

// draw lays out graph g for an execution whose nodes are in states.
func draw(g *persistence.GraphVersion, states map[string]string) picture {
	depth := map[string]int{}
	nodes := map[string]persistence.GraphNode{}
	for _, n := range g.Nodes {
		nodes[n.Name] = n
	}
	var depthOf func(name string, seen int) int
	depthOf = func(name string, seen int) int {
		if d, ok := depth[name]; ok {
			return d
		}
		d := 0
		if seen <= len(g.Nodes) { // a cycle cannot make it recurse forever
			for _, up := range nodes[name].Upstream {
				if _, known := nodes[up]; known {
					d = max(d, depthOf(up, seen+1)+1)
				}
			}
		}
		depth[name] = d
		return d
	}
	var p picture
	rows := map[int]int{} // nodes placed in each column so far
	at := map[string]pictureNode{}
	for _, n := range g.Nodes {
		col := depthOf(n.Name, 0)
		row := rows[col]
		rows[col]++
		pn := pictureNode{Name: n.Name, Label: shorten(n.Name, 20), Kind: n.Kind, Gate: n.Gate,
			State: cmp.Or(states[n.Name], nodeWaiting),
			X:     margin + col*(boxW+gapX), Y: margin + row*(boxH+gapY)}
		p.Nodes = append(p.Nodes, pn)
		at[n.Name] = pn
		p.Width = max(p.Width, pn.X+boxW+margin)
		p.Height = max(p.Height, pn.Y+boxH+margin)
	}
	for _, n := range g.Nodes {
		to := at[n.Name]
		for _, up := range n.Upstream {
			from, ok := at[up]
			if !ok {
				continue
			}
			x1, y1, x2, y2 := from.X+boxW, from.Y+boxH/2, to.X, to.Y+boxH/2
			p.Edges = append(p.Edges, pictureEdge{From: up, To: n.Name,
				Path: fmt.Sprintf("M%d,%d C%d,%d %d,%d %d,%d", x1, y1, x1+gapX/2, y1, x2-gapX/2, y2, x2-4, y2)})
		}
	}
	return p
}

// shorten cuts s to n runes, with an ellipsis.
func shorten(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

// timelineRow is an attempt placed on the execution's timeline, in percent of its width.
type timelineRow struct {
	persistence.Attempt
	Start, Width float64
	Duration     string
}

// timeline places each attempt between its claim (or its creation, if never claimed) and its end
// (or now, while it runs), on a scale from the first attempt's creation to the last end.
func timeline(attempts []persistence.Attempt, now time.Time) []timelineRow {
	if len(attempts) == 0 {
		return nil
	}
	span := func(a persistence.Attempt) (time.Time, time.Time) {
		start := a.CreatedAt
		if a.ClaimedAt != nil {
			start = *a.ClaimedAt
		}
		end := start
		switch {
		case a.FinishedAt != nil:
			end = *a.FinishedAt
		case a.State == persistence.StateRunning:
			end = now
		}
		return start, end
	}
	first, last := attempts[0].CreatedAt, attempts[0].CreatedAt
	for _, a := range attempts {
		s, e := span(a)
		first, last = minTime(first, s), maxTime(last, e)
	}
	total := last.Sub(first)
	out := make([]timelineRow, 0, len(attempts))
	for _, a := range attempts {
		s, e := span(a)
		row := timelineRow{Attempt: a, Duration: "-"}
		if a.ClaimedAt != nil && (a.FinishedAt != nil || a.State == persistence.StateRunning) {
			row.Duration = e.Sub(s).Round(time.Millisecond).String()
		}
		if total > 0 {
			row.Start = 100 * float64(s.Sub(first)) / float64(total)
			row.Width = 100 * float64(e.Sub(s)) / float64(total)
		}
		row.Start = min(row.Start, 99.5)
		row.Width = min(max(row.Width, 0.5), 100-row.Start) // a mark for the instant ones
		out = append(out, row)
	}
	return out
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
