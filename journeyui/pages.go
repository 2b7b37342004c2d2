package journeyui

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/journey-go/journey/persistence"
)

// pageNames are the templates of the pages, each rendered inside templates/layout.html.
var pageNames = []string{"overview", "executions", "execution", "replicas", "schedules", "reclaims", "insights", "error"}

// parsePages parses each page with the layout. Links start with base.
func parsePages(base string) (map[string]*template.Template, error) {
	funcs := template.FuncMap{
		"path": func(p string) string { return base + p },
		"at": func(t any) string {
			switch t := t.(type) {
			case time.Time:
				return t.UTC().Format("2006-01-02 15:04:05.000")
			case *time.Time:
				if t != nil {
					return t.UTC().Format("2006-01-02 15:04:05.000")
				}
			}
			return "-"
		},
		"ms": func(ms int64) string {
			return (time.Duration(ms) * time.Millisecond).Round(100 * time.Millisecond).String()
		},
		"deref": func(s *string) string { return derefOr(s, "-") },
		"fire":  fireTime,
		"json":  prettyJSON,
		"pct":   func(f float64) string { return strconv.FormatFloat(f, 'f', 2, 64) + "%" },
		"count": group,
		"query": func(v url.Values) template.URL { return template.URL(v.Encode()) }, // encoded: a safe query
		"join":  strings.Join,
		"add":   func(a, b int) int { return a + b },
		"dur":   func(d time.Duration) time.Duration { return d.Round(100 * time.Microsecond) },
		// bar is the width of a funnel bar for a share in percent.
		"bar": func(pct float64) string { return strconv.FormatFloat(pct*funnelBar/100, 'f', 1, 64) },
		// list links to the executions of a graph version, in a state if one is given.
		"list": func(graph, version, state string) string {
			q := url.Values{"graph": {graph}, "version": {version}}
			if state != "" {
				q.Set("state", state)
			}
			if state == persistence.ExecArchived {
				q.Set("archived", "on")
			}
			return base + "/executions?" + q.Encode()
		},
		// states are the columns of the overview, in the order of the CLI's `journey graphs`.
		"states": func() []string {
			return []string{persistence.ExecFailed, persistence.ExecRunning, persistence.ExecWaiting, persistence.ExecArchived}
		},
	}
	out := map[string]*template.Template{}
	for _, name := range pageNames {
		t, err := template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/"+name+".html")
		if err != nil {
			return nil, fmt.Errorf("journeyui: parsing the %s page: %w", name, err)
		}
		out[name] = t
	}
	return out, nil
}

// page is what the layout renders around a page's Data.
type page struct {
	Title    string
	Nav      string
	Schema   string
	ReadOnly bool
	CSRF     string
	Data     any
}

// render renders a page, or logs why it could not.
func (u *ui) render(w http.ResponseWriter, r *http.Request, name, title string, status int, data any) {
	p := page{Title: title, Nav: name, Schema: u.opts.Schema, ReadOnly: u.opts.ReadOnly, Data: data}
	if !u.opts.ReadOnly {
		p.CSRF = u.csrfToken(w, r)
	}
	var buf bytes.Buffer
	if err := u.pages[name].Execute(&buf, p); err != nil {
		u.opts.Logger.Error("rendering a dashboard page", "page", name, "error", err)
		http.Error(w, "rendering the page failed: see the server's log", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// errorPage is the data of the error page.
type errorPage struct {
	Message string
	Back    string // a link back, if any
}

// fail shows err as a page, with the status its kind calls for. An unexpected error is logged,
// and shown too: an operator is the reader.
func (u *ui) fail(w http.ResponseWriter, r *http.Request, err error, back string) {
	status := http.StatusInternalServerError
	switch {
	case errors.Is(err, persistence.ErrNotFound):
		status = http.StatusNotFound
	case badInput(err):
		status = http.StatusBadRequest
	case errors.Is(err, persistence.ErrNotFailed):
		status = http.StatusConflict
	default:
		u.opts.Logger.Error("a dashboard page failed", "path", r.URL.Path, "error", err)
	}
	u.render(w, r, "error", http.StatusText(status), status, errorPage{Message: err.Error(), Back: back})
}

// badInput reports whether err is the store refusing what the request asked: a bad filter or
// cursor, an unknown graph or node, or text or a value that cannot reach PostgreSQL.
func badInput(err error) bool {
	for _, bad := range []error{persistence.ErrBadRequest, persistence.ErrUnknownGraph, persistence.ErrUnknownNode,
		persistence.ErrInvalidText, persistence.ErrInvalidValue} {
		if errors.Is(err, bad) {
			return true
		}
	}
	return false
}

// overviewPage is the data of the overview.
type overviewPage struct {
	*persistence.Overview
	Stale []persistence.ReplicaStatus
}

func (u *ui) overview(w http.ResponseWriter, r *http.Request) {
	o, err := u.store.Overview(r.Context())
	if err != nil {
		u.fail(w, r, err, "")
		return
	}
	p := overviewPage{Overview: o}
	for _, rs := range o.Replicas {
		if rs.Stale {
			p.Stale = append(p.Stale, rs)
		}
	}
	u.render(w, r, "overview", "Overview", http.StatusOK, p)
}

// inputError is a mistake in the query of the list's page, shown above the list.
type inputError struct{ error }

// executionsPage is the data of the list of executions.
type executionsPage struct {
	Graph, Version, Key, State string
	Where                      []string
	Archived                   bool
	Limit                      int
	States                     []string
	Error                      string
	Page                       *persistence.ExecutionPage
	// Next is the query of the next page, if there is one.
	Next url.Values
	// Paged is true after the first page.
	Paged bool
	// First is the query of the first page.
	First url.Values
	// Flash says what a retry of many asked for.
	Flash string
}

func (u *ui) executions(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	p := executionsPage{Graph: q.Get("graph"), Version: q.Get("version"), Key: q.Get("key"), State: q.Get("state"),
		Archived: q.Get("archived") != "", States: persistence.ExecStates, Limit: DefaultPageSize}
	f := persistence.ExecutionFilter{Graph: p.Graph, Version: p.Version, Key: p.Key, State: p.State, Archived: p.Archived}
	err := func() error {
		for _, w := range q["where"] {
			if w = strings.TrimSpace(w); w == "" {
				continue
			}
			p.Where = append(p.Where, w)
			filter, err := persistence.ParseWhere(w)
			if err != nil {
				return inputError{err}
			}
			f.Where = append(f.Where, filter)
		}
		if l := q.Get("limit"); l != "" {
			n, err := strconv.Atoi(l)
			if err != nil || n < 1 || n > 1000 {
				return inputError{fmt.Errorf("bad limit %q: want a number from 1 to 1000", l)}
			}
			p.Limit = n
		}
		f.Limit = p.Limit
		if a := q.Get("after"); a != "" {
			c, err := persistence.ParseCursor(a)
			if err != nil {
				return inputError{err}
			}
			f.After, p.Paged = &c, true
		}
		var err error
		p.Page, err = u.store.ListPage(r.Context(), f)
		return err
	}()
	first := url.Values{}
	for k, v := range q {
		if k != "after" {
			first[k] = v
		}
	}
	p.First = first
	if n := q.Get("retried"); n != "" {
		p.Flash = fmt.Sprintf("Asked for a retry of node %q in %s failed execution(s): the replicas serving the graph carry them out.",
			q.Get("node"), n)
	}
	status := http.StatusOK
	switch {
	case err == nil:
		if p.Page.Next != nil {
			p.Next = url.Values{"after": {p.Page.Next.String()}}
			for k, v := range first {
				p.Next[k] = v
			}
		}
	case errors.As(err, new(inputError)), badInput(err):
		p.Error, status = err.Error(), http.StatusBadRequest
	default:
		u.fail(w, r, err, "")
		return
	}
	u.render(w, r, "executions", "Executions", status, p)
}

// mayAct reports whether the dashboard may carry out the action that r posts: it is not
// read-only, and the form carries the page's CSRF token. If not, it answers so.
func (u *ui) mayAct(w http.ResponseWriter, r *http.Request) bool {
	switch {
	case u.opts.ReadOnly:
		http.Error(w, "Forbidden: the dashboard is read-only.", http.StatusForbidden)
		return false
	case !u.checkCSRF(r):
		http.Error(w, "Forbidden: the form's CSRF token is missing or stale: reload the page and try again.", http.StatusForbidden)
		return false
	}
	return true
}

// retryMany asks for a retry of a node in every failed execution of a graph that the list's
// filters select (persistence.RetryWhere), and goes back to the list, which says how many.
func (u *ui) retryMany(w http.ResponseWriter, r *http.Request) {
	back := u.opts.BasePath + "/executions"
	if !u.mayAct(w, r) {
		return
	}
	f := persistence.ExecutionFilter{Graph: r.PostFormValue("graph"), Version: r.PostFormValue("version")}
	list := url.Values{"graph": {f.Graph}, "version": {f.Version}, "state": {persistence.ExecFailed}}
	for _, where := range r.PostForm["where"] {
		filter, err := persistence.ParseWhere(where)
		if err != nil {
			u.fail(w, r, err, back)
			return
		}
		f.Where = append(f.Where, filter)
		list.Add("where", where)
	}
	node := r.PostFormValue("node")
	n, err := u.store.RetryWhere(r.Context(), f, node, false)
	if err != nil {
		u.fail(w, r, err, back+"?"+list.Encode())
		return
	}
	list.Set("retried", strconv.Itoa(n))
	list.Set("node", node)
	http.Redirect(w, r, back+"?"+list.Encode(), http.StatusSeeOther)
}

// executionPage is the data of an execution's page.
type executionPage struct {
	*persistence.ExecutionDetail
	Picture  *picture
	Timeline []timelineRow
	// Failed are the nodes that failed for good, with how: each gets a Retry button.
	Failed []failedNode
	// Flash says what became of the request that brought the operator here, if any.
	Flash string
}

func (u *ui) execution(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	d, err := u.store.Inspect(r.Context(), id)
	if err != nil {
		u.fail(w, r, err, u.opts.BasePath+"/executions")
		return
	}
	p := executionPage{ExecutionDetail: d, Timeline: timeline(d.Attempts, time.Now())}
	latest := latestAttempts(d)
	states := nodeStates(d, latest)
	if d.Graph != nil {
		pic := draw(d.Graph, states)
		p.Picture = &pic
		for _, n := range d.Graph.Nodes {
			if a := latest[n.Name]; states[n.Name] == nodeFailed {
				p.Failed = append(p.Failed, failedNode{Node: n.Name, Error: derefOr(a.Error, ""),
					How: persistence.Failure(a.State, a.Attempt, a.MaxAttempts, derefOr(a.Error, ""))})
			}
		}
	}
	if n, err := strconv.ParseInt(r.URL.Query().Get("request"), 10, 64); err == nil {
		if i := slices.IndexFunc(d.Requests, func(req persistence.Request) bool { return req.ID == n }); i >= 0 {
			p.Flash = describe(d.Requests[i])
		}
	}
	u.render(w, r, "execution", "Execution "+id, http.StatusOK, p)
}

// failedNode is a node that failed for good: How says how (persistence.Failure), with Error.
type failedNode struct{ Node, How, Error string }

// describe says what became of a request.
func describe(req persistence.Request) string {
	what := req.Action
	if req.Node != nil {
		what += " " + *req.Node
	}
	switch {
	case req.DoneAt == nil:
		return fmt.Sprintf("Request %d (%s) is recorded: a replica serving %s carries it out when one is live. Reload to see it.",
			req.ID, what, req.GraphKey)
	case req.Error != nil:
		return fmt.Sprintf("Request %d (%s) was refused by replica %s: %s", req.ID, what, derefOr(req.ReplicaID, "-"), *req.Error)
	default:
		return fmt.Sprintf("Request %d (%s) was carried out by replica %s.", req.ID, what, derefOr(req.ReplicaID, "-"))
	}
}

// act records an action on an execution (retry, archive, unarchive, cancel), waits a little for a
// replica to carry it out, and goes back to the execution's page.
func (u *ui) act(w http.ResponseWriter, r *http.Request) {
	id, action := r.PathValue("id"), r.PathValue("action")
	back := u.opts.BasePath + "/executions/" + url.PathEscape(id)
	if !u.mayAct(w, r) {
		return
	}
	arg := r.PostFormValue("node")
	switch action {
	case persistence.ActionRetry, persistence.ActionArchive, persistence.ActionUnarchive, persistence.ActionPause, persistence.ActionResume:
	case persistence.ActionCancel:
		arg = r.PostFormValue("reason")
	default:
		http.NotFound(w, r)
		return
	}
	req, err := u.store.Ask(r.Context(), id, action, arg)
	if err != nil {
		u.fail(w, r, err, back)
		return
	}
	if _, err := u.store.AwaitRequest(r.Context(), req.ID, u.opts.ActionWait); err != nil {
		u.fail(w, r, err, back)
		return
	}
	http.Redirect(w, r, back+"?request="+strconv.FormatInt(req.ID, 10), http.StatusSeeOther)
}

func (u *ui) replicas(w http.ResponseWriter, r *http.Request) {
	rs, err := u.store.ReplicaStatuses(r.Context())
	if err != nil {
		u.fail(w, r, err, "")
		return
	}
	u.render(w, r, "replicas", "Replicas", http.StatusOK, rs)
}

// reclaimsShown is how many reclaims the page lists.
const reclaimsShown = 200

func (u *ui) schedules(w http.ResponseWriter, r *http.Request) {
	ss, err := u.store.Schedules(r.Context())
	if err != nil {
		u.fail(w, r, err, "")
		return
	}
	u.render(w, r, "schedules", "Schedules", http.StatusOK, ss)
}

// fireTime is a schedule's fire time in the schedule's location, with the zone's abbreviation,
// as journey schedules shows it; in UTC if the location cannot be loaded here; "-" for none.
func fireTime(t *time.Time, location string) string {
	if t == nil {
		return "-"
	}
	loc, err := time.LoadLocation(location)
	if err != nil || location == "Local" {
		loc = time.UTC
	}
	return t.In(loc).Format("2006-01-02 15:04 MST")
}

func (u *ui) reclaims(w http.ResponseWriter, r *http.Request) {
	rs, err := u.store.Reclaims(r.Context(), reclaimsShown)
	if err != nil {
		u.fail(w, r, err, "")
		return
	}
	u.render(w, r, "reclaims", "Reclaims", http.StatusOK, rs)
}

// prettyJSON indents a JSON value for display.
func prettyJSON(raw json.RawMessage) string {
	if raw == nil {
		return "(cleared)"
	}
	var buf bytes.Buffer
	if err := json.Indent(&buf, raw, "", "  "); err != nil {
		return string(raw)
	}
	return buf.String()
}

func derefOr(s *string, fallback string) string {
	if s == nil || *s == "" {
		return fallback
	}
	return *s
}

// group writes n with thousands separators.
func group(n int64) string {
	s := strconv.FormatInt(n, 10)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 && s[i-1] != '-' {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}
