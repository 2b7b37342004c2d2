package journeyui

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/journey-go/journey/persistence"
)

// insightsPage is the data of a graph's insights page.
type insightsPage struct {
	Ins                   *persistence.Insights
	Version, Since, Scope string
	Charts                []chart
}

// chart is a line chart of the series, drawn as SVG on the server: no script runs in the page.
type chart struct {
	ID, Title, Unit string
	Width, Height   int
	Max             string // the value at the top of the chart
	Lines           []chartLine
}

// chartLine is one line of a chart: its points as an SVG points list, and each point with its
// value, for the reader and the tests.
type chartLine struct {
	Name, Class string
	Points      string
	Values      []chartPoint
}

type chartPoint struct {
	X, Y  float64
	Value string
	At    string
}

// The size of a chart, and of a funnel bar at 100%.
const (
	chartWidth, chartHeight = 600, 120
	funnelBar               = 240
)

// series are the charts of the page: each line a value of every point of the series.
var seriesCharts = []struct {
	id, title, unit string
	lines           []string
	value           func(p persistence.InsightPoint, line string) float64
}{
	{"throughput", "Executions started and attempts succeeded", "per bucket", []string{"started", "succeeded"},
		func(p persistence.InsightPoint, line string) float64 {
			if line == "started" {
				return float64(p.Started)
			}
			return float64(p.Succeeded)
		}},
	{"failures", "Attempts failed and abandoned, and executions failed for good", "per bucket",
		[]string{"failed", "abandoned", "failed for good"},
		func(p persistence.InsightPoint, line string) float64 {
			switch line {
			case "failed":
				return float64(p.Failed)
			case "abandoned":
				return float64(p.Abandoned)
			}
			return float64(p.FailedForGood)
		}},
	{"runtime", "Run time of the attempts, p50 and p95", "ms", []string{"p50", "p95"},
		func(p persistence.InsightPoint, line string) float64 {
			if line == "p50" {
				return float64(p.RunP50) / float64(time.Millisecond)
			}
			return float64(p.RunP95) / float64(time.Millisecond)
		}},
}

// charts draws the series of ins.
func charts(ins *persistence.Insights) []chart {
	var out []chart
	for _, sc := range seriesCharts {
		top := 0.0
		for _, p := range ins.Series {
			for _, line := range sc.lines {
				top = max(top, sc.value(p, line))
			}
		}
		c := chart{ID: sc.id, Title: sc.title, Unit: sc.unit, Width: chartWidth, Height: chartHeight,
			Max: strconv.FormatFloat(top, 'f', -1, 64)}
		step := float64(chartWidth) / float64(max(len(ins.Series)-1, 1))
		for _, line := range sc.lines {
			l := chartLine{Name: line, Class: "line-" + strings.ReplaceAll(line, " ", "-")}
			var pts []string
			for i, p := range ins.Series {
				v := sc.value(p, line)
				y := float64(chartHeight)
				if top > 0 {
					y -= v / top * chartHeight
				}
				pt := chartPoint{X: float64(i) * step, Y: y, Value: strconv.FormatFloat(v, 'f', -1, 64),
					At: p.At.UTC().Format(time.RFC3339)}
				l.Values = append(l.Values, pt)
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", pt.X, pt.Y))
			}
			l.Points = strings.Join(pts, " ")
			c.Lines = append(c.Lines, l)
		}
		out = append(out, c)
	}
	return out
}

// insights serves a graph's insights: its funnel, and its series as charts.
func (u *ui) insights(w http.ResponseWriter, r *http.Request) {
	query := r.URL.Query()
	p := insightsPage{Version: query.Get("version"), Since: query.Get("since"), Scope: query.Get("scope")}
	q := persistence.InsightsQuery{Graph: r.PathValue("graph"), Version: p.Version, Scope: p.Scope}
	if p.Since != "" {
		d, err := time.ParseDuration(p.Since)
		if err != nil {
			u.fail(w, r, fmt.Errorf("%w: bad window %q: want a duration, such as 24h", persistence.ErrBadRequest, p.Since), "")
			return
		}
		q.Since = d
	}
	ins, err := u.store.Insights(r.Context(), q.WithDefaults())
	if err != nil {
		u.fail(w, r, err, "")
		return
	}
	p.Ins, p.Charts = ins, charts(ins)
	u.render(w, r, "insights", "Insights · "+ins.Graph, http.StatusOK, p)
}
