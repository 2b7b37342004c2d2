package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/journey-go/journey/persistence"
)

// The commands that inspect and act on a database. Each is a thin layer over the persistence
// package's inspection queries, which the dashboard renders too.

const inspectFlagsNote = `The database is $DATABASE_URL. Flags may come before or after the arguments.`

// opsFlags are the flags that every inspecting command has.
type opsFlags struct {
	schema *string
	json   *bool
}

// newOpsFlagSet returns a command's flag set with -schema and -json.
func newOpsFlagSet(env *environment, name, synopsis, description string) (*flag.FlagSet, opsFlags) {
	fs := newFlagSet(env, name, synopsis, description+"\n\n"+inspectFlagsNote)
	return fs, opsFlags{
		schema: fs.String("schema", "journey", "the PostgreSQL `schema` that holds journey's tables"),
		json:   fs.Bool("json", false, "print JSON instead of a table"),
	}
}

// parseArgs parses flags placed anywhere among args, as in `journey executions show ID --json`,
// and checks that there are want positional arguments. It returns the arguments, and the exit
// code to return and false if the command should not run.
func parseArgs(env *environment, fs *flag.FlagSet, args []string, want ...string) ([]string, int, bool) {
	var pos []string
	for {
		if code, ok := parseFlags(fs, args); !ok {
			return nil, code, false
		}
		if fs.NArg() == 0 {
			break
		}
		pos, args = append(pos, fs.Arg(0)), fs.Args()[1:]
	}
	if len(pos) != len(want) {
		fmt.Fprintf(env.stderr, "journey %s: want %d argument(s) (%s), got %d: %q\n", fs.Name(), len(want),
			strings.Join(want, " "), len(pos), pos)
		fs.Usage()
		return nil, 2, false
	}
	return pos, 0, true
}

// openStore opens a Store without graphs on $DATABASE_URL and checks the schema. It returns a
// function that closes it.
func openStore(ctx context.Context, env *environment, name, schema string) (*persistence.Store, func(), bool) {
	url := env.getenv("DATABASE_URL")
	if url == "" {
		fmt.Fprintf(env.stderr, "journey %s: DATABASE_URL is not set: set it to journey's database\n", name)
		return nil, nil, false
	}
	db, err := openDB(url)
	if err != nil {
		fmt.Fprintf(env.stderr, "journey %s: %v\n", name, err)
		return nil, nil, false
	}
	store, err := persistence.New(persistence.Config{DB: db, Schema: schema, Logger: env.logger})
	if err == nil {
		err = store.CheckSchema(ctx)
	}
	if err != nil {
		_ = db.Close()
		fmt.Fprintf(env.stderr, "journey %s: %v\n", name, err)
		return nil, nil, false
	}
	return store, func() { _ = db.Close() }, true
}

// fail prints err for command name and returns exit status 1.
func fail(env *environment, name string, err error) int {
	fmt.Fprintf(env.stderr, "journey %s: %v\n", name, err)
	return 1
}

// printJSON prints v as indented JSON.
func printJSON(env *environment, v any) int {
	enc := json.NewEncoder(env.stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return fail(env, "json", err)
	}
	return 0
}

// table writes rows of tab-separated cells, aligned.
func table(w io.Writer, header string, rows [][]string) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, header)
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	_ = tw.Flush()
}

// at formats a time for a table.
func at(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.Local().Format("2006-01-02 15:04:05")
}

func orDash(s *string) string {
	if s == nil || *s == "" {
		return "-"
	}
	return *s
}

const graphsDescription = `graphs lists the graph versions that replicas have served, with the live replicas that
serve each and the count of its executions, in all and by state. A version that no live replica
serves shows since when (UNSERVED SINCE); if executions of it have work left (running or waiting
to run, the JSON's "waiting"), it is STRANDED: only a replica that serves that version can run
that work. Keep or start such a replica until the version drains, or move its executions to a
compatible version with "journey graphs move".`

// runGraphsMove implements "journey graphs move NAME FROM TO".
func runGraphsMove(ctx context.Context, env *environment, args []string) int {
	fs, of := newOpsFlagSet(env, "graphs move", "NAME FROM TO [-schema name]",
		"move moves every execution of graph NAME at version FROM to version TO, which must keep every node of FROM, "+
			"of the same kind, and may add nodes; no live replica may serve FROM any more, and no attempt of FROM may be "+
			"running. The executions advance by the gates of TO at the next sweep of a replica that serves it.")
	pos, code, ok := parseArgs(env, fs, args, "NAME", "FROM", "TO")
	if !ok {
		return code
	}
	store, closeDB, ok := openStore(ctx, env, "graphs move", *of.schema)
	if !ok {
		return 1
	}
	defer closeDB()
	n, err := store.MoveVersion(ctx, pos[0], pos[1], pos[2])
	if err != nil {
		return fail(env, "graphs move", err)
	}
	fmt.Fprintf(env.stdout, "moved %d execution(s) of graph %q from version %q to %q\n", n, pos[0], pos[1], pos[2])
	return 0
}

// unserved is the UNSERVED SINCE column of a graph version: "-" while a live replica serves it,
// else since when none has, and STRANDED with the executions that wait, if any.
func unserved(g persistence.GraphSummary) string {
	switch {
	case g.UnservedSince == nil:
		return "-"
	case g.Stranded:
		return fmt.Sprintf("%s STRANDED: %d waiting", at(g.UnservedSince), g.Waiting)
	}
	return at(g.UnservedSince)
}

// runGraphs implements "journey graphs".
func runGraphs(ctx context.Context, env *environment, args []string) int {
	if len(args) > 0 && args[0] == "move" {
		return runGraphsMove(ctx, env, args[1:])
	}
	fs, of := newOpsFlagSet(env, "graphs", "[-schema name] [-json] | move NAME FROM TO", graphsDescription)
	if _, code, ok := parseArgs(env, fs, args); !ok {
		return code
	}
	store, closeDB, ok := openStore(ctx, env, "graphs", *of.schema)
	if !ok {
		return 1
	}
	defer closeDB()
	graphs, err := store.GraphSummaries(ctx)
	if err != nil {
		return fail(env, "graphs", err)
	}
	if *of.json {
		return printJSON(env, graphs)
	}
	rows := make([][]string, 0, len(graphs))
	for _, g := range graphs {
		replicas := strings.Join(g.Replicas, ",")
		if replicas == "" {
			replicas = "none live"
		}
		if g.PausedAt != nil {
			replicas = "PAUSED " + at(g.PausedAt) + "; " + replicas
		}
		rows = append(rows, []string{g.Name, g.Version, fmt.Sprint(len(g.Nodes)), replicas, fmt.Sprint(g.Executions),
			fmt.Sprint(g.States[persistence.ExecFailed]), fmt.Sprint(g.States[persistence.ExecRunning]),
			fmt.Sprint(g.States[persistence.ExecWaiting]), fmt.Sprint(g.States[persistence.ExecArchived]), at(&g.LastSeenAt),
			unserved(g)})
	}
	table(env.stdout, "GRAPH\tVERSION\tNODES\tREPLICAS\tEXECUTIONS\tFAILED\tRUNNING\tWAITING\tARCHIVED\tLAST SEEN\tUNSERVED SINCE", rows)
	return 0
}

const executionsDescription = `executions list lists executions, newest first, a page at a time; executions show ID shows
everything about one execution: its values, what each node waits for, every attempt, the
notifications with their deliveries, the history of its values and the operators' requests.`

// runExecutions implements "journey executions list" and "journey executions show".
func runExecutions(ctx context.Context, env *environment, args []string) int {
	if len(args) > 0 {
		switch args[0] {
		case "list":
			return runExecutionsList(ctx, env, args[1:])
		case "show":
			return runExecutionsShow(ctx, env, args[1:])
		}
	}
	fmt.Fprintf(env.stderr, "Usage: journey executions list|show ...\n\n%s\n\nRun \"journey executions list -h\" "+
		"or \"journey executions show -h\" for their flags.\n", executionsDescription)
	if len(args) > 0 && (args[0] == "-h" || args[0] == "-help" || args[0] == "--help") {
		return 0
	}
	return 2
}

// whereFlags collects repeated --where node=value flags (persistence.ParseWhere).
type whereFlags []persistence.Filter

func (w *whereFlags) String() string { return "" }

func (w *whereFlags) Set(s string) error {
	f, err := persistence.ParseWhere(s)
	if err != nil {
		return err
	}
	*w = append(*w, f)
	return nil
}

func runExecutionsList(ctx context.Context, env *environment, args []string) int {
	fs, of := newOpsFlagSet(env, "executions list",
		"[--graph G] [--version V] [--key K] [--where node=value ...] [--state S] [--archived] [--limit N] [--after CURSOR]",
		"list lists executions, newest first. --where compares a node's value: as JSON if the text is JSON "+
			"(10, true, \"x\"), else as a string. --key finds the execution that holds a key (journey.WithKey), "+
			"and with --archived those that held it before.")
	var f persistence.ExecutionFilter
	var where whereFlags
	fs.StringVar(&f.Graph, "graph", "", "only the executions of this `graph`")
	fs.StringVar(&f.Version, "version", "", "only the executions of this graph `version`")
	fs.StringVar(&f.Key, "key", "", "only the executions started with this `key`")
	fs.Var(&where, "where", "only the executions whose `node=value`; repeat for several")
	fs.StringVar(&f.State, "state", "", "only the executions in this `state`: "+strings.Join(persistence.ExecStates, ", "))
	fs.BoolVar(&f.Archived, "archived", false, "include the archived executions")
	fs.IntVar(&f.Limit, "limit", 50, "at most `N` executions")
	after := fs.String("after", "", "start after this `cursor`, printed at the end of the previous page")
	if _, code, ok := parseArgs(env, fs, args); !ok {
		return code
	}
	f.Where = where
	if *after != "" {
		c, err := persistence.ParseCursor(*after)
		if err != nil {
			return fail(env, "executions list", err)
		}
		f.After = &c
	}
	store, closeDB, ok := openStore(ctx, env, "executions list", *of.schema)
	if !ok {
		return 1
	}
	defer closeDB()
	page, err := store.ListPage(ctx, f)
	if err != nil {
		return fail(env, "executions list", err)
	}
	if *of.json {
		out := struct {
			Executions []persistence.ExecutionRow `json:"executions"`
			Next       string                     `json:"next,omitempty"`
		}{Executions: page.Executions}
		if page.Next != nil {
			out.Next = page.Next.String()
		}
		return printJSON(env, out)
	}
	rows := make([][]string, 0, len(page.Executions))
	for _, e := range page.Executions {
		why := "-" // what stopped it: the node that failed and its error, or the cancel's reason
		switch {
		case e.FailedNode != "":
			why = e.FailedNode + ": " + e.FailedError
		case e.State == persistence.ExecCanceled:
			why = orDash(e.CancelReason)
		}
		rows = append(rows, []string{e.ID, e.Graph, e.Version, e.State, fmt.Sprint(e.Revision), at(&e.CreatedAt),
			at(&e.UpdatedAt), orDash(&e.Key), why})
	}
	table(env.stdout, "ID\tGRAPH\tVERSION\tSTATE\tREVISION\tCREATED\tUPDATED\tKEY\tWHY", rows)
	if page.Next != nil {
		fmt.Fprintf(env.stdout, "\nmore: add --after %s\n", page.Next)
	}
	return 0
}

func runExecutionsShow(ctx context.Context, env *environment, args []string) int {
	fs, of := newOpsFlagSet(env, "executions show", "ID | --key K [--graph G] [-schema name] [-json]",
		"show shows everything about one execution, given by its id or by its key.")
	key := fs.String("key", "", "show the unarchived execution that holds this `key` (journey.WithKey) instead of an ID")
	graphName := fs.String("graph", "", "with --key: the `graph` whose executions' key it is, if several graphs' hold it")
	want := []string{"ID"}
	if slices.ContainsFunc(args, func(a string) bool { return strings.TrimLeft(strings.SplitN(a, "=", 2)[0], "-") == "key" }) {
		want = nil
	}
	pos, code, ok := parseArgs(env, fs, args, want...)
	if !ok {
		return code
	}
	store, closeDB, ok := openStore(ctx, env, "executions show", *of.schema)
	if !ok {
		return 1
	}
	defer closeDB()
	var id string
	if *key == "" {
		id = pos[0]
	} else {
		page, err := store.ListPage(ctx, persistence.ExecutionFilter{Key: *key, Graph: *graphName, Limit: 2})
		switch {
		case err != nil:
			return fail(env, "executions show", err)
		case len(page.Executions) == 0:
			return fail(env, "executions show", fmt.Errorf("no unarchived execution holds key %q; `journey executions list --key K --archived` "+
				"lists those that held it", *key))
		case len(page.Executions) > 1:
			return fail(env, "executions show", fmt.Errorf("executions of graphs %q and %q hold key %q: give --graph",
				page.Executions[0].Graph, page.Executions[1].Graph, *key))
		}
		id = page.Executions[0].ID
	}
	d, err := store.Inspect(ctx, id)
	if err != nil {
		return fail(env, "executions show", fmt.Errorf("%w; `journey executions list` lists the executions", err))
	}
	if *of.json {
		return printJSON(env, d)
	}
	showExecution(env.stdout, d)
	return 0
}

// showExecution prints an execution's detail as sections of text.
func showExecution(w io.Writer, d *persistence.ExecutionDetail) {
	e := d.Execution
	fmt.Fprintf(w, "Execution %s of graph %q version %q: %s, revision %d\n", e.ID, e.Graph, e.Version, e.State, e.Revision)
	if e.Key != "" {
		fmt.Fprintf(w, "key %q\n", e.Key)
	}
	fmt.Fprintf(w, "created %s, updated %s", at(&e.CreatedAt), at(&e.UpdatedAt))
	if e.ArchivedAt != nil {
		fmt.Fprintf(w, ", archived %s", at(e.ArchivedAt))
	}
	fmt.Fprintln(w)
	switch {
	case e.CancelReason != nil:
		fmt.Fprintf(w, "canceled: %s\n", *e.CancelReason)
	case e.FailedNode != "":
		fmt.Fprintf(w, "failed at %s: %s\n", e.FailedNode, e.FailedError)
	}
	if d.Graph != nil && d.Graph.PausedAt != nil {
		fmt.Fprintf(w, "its graph version is paused since %s: journey resume --graph %s --version %s\n", at(d.Graph.PausedAt), e.Graph, e.Version)
	}

	if p := d.Parent; p != nil {
		fmt.Fprintf(w, "child %d of node %s of %s: journey executions show %s\n", p.Index, p.Node, p.ID, p.ID)
	}

	fmt.Fprintln(w, "\nValues:")
	rows := make([][]string, 0, len(d.Values))
	for _, v := range d.Values {
		rows = append(rows, []string{"  " + v.Node, string(v.Value), fmt.Sprint(v.Revision), at(&v.SetAt)})
	}
	section(w, "  NODE\tVALUE\tREVISION\tSET AT", rows)

	fmt.Fprintln(w, "\nWaiting:")
	switch {
	case d.Graph == nil:
		fmt.Fprintln(w, "  (unknown: no replica has recorded this graph version)")
	case len(d.Waiting) == 0:
		fmt.Fprintln(w, "  (nothing)")
	}
	for _, n := range d.Waiting {
		fmt.Fprintf(w, "  %s: %s\n", n.Node, n.Reason)
	}

	for _, m := range d.Maps {
		fmt.Fprintf(w, "\nChildren of %s: %d of %d ended\n", m.Node, m.Done, m.Total)
		rows = rows[:0]
		for _, c := range m.Children {
			rows = append(rows, []string{"  " + fmt.Sprint(c.Index), c.ID, c.State})
		}
		section(w, "  ITEM\tEXECUTION\tSTATE", rows)
		if len(m.Children) < m.Total {
			fmt.Fprintf(w, "  … the first %d\n", len(m.Children))
		}
	}

	fmt.Fprintln(w, "\nAttempts:")
	rows = rows[:0]
	for _, a := range d.Attempts {
		rows = append(rows, []string{"  " + fmt.Sprint(a.ID), a.Node, fmt.Sprintf("%d/%d", a.Attempt, a.MaxAttempts), a.State,
			orDash(a.ReplicaID), at(a.ClaimedAt), at(a.FinishedAt), orDash(a.Error)})
	}
	section(w, "  ID\tNODE\tATTEMPT\tSTATE\tREPLICA\tCLAIMED\tFINISHED\tERROR", rows)

	fmt.Fprintln(w, "\nNotifications:")
	if len(d.Notifications) == 0 {
		fmt.Fprintln(w, "  (none)")
	}
	for _, c := range d.Notifications {
		fmt.Fprintf(w, "  %s (phase %d) claimed %s\n", c.Event, c.Phase, at(&c.ClaimedAt))
		for _, dl := range c.Deliveries {
			fmt.Fprintf(w, "    to %s: %s after %d attempt(s)", dl.Target, dl.State, dl.Attempts)
			if dl.LastError != nil {
				fmt.Fprintf(w, ", last error: %s", *dl.LastError)
			}
			fmt.Fprintln(w)
		}
	}

	fmt.Fprintln(w, "\nHistory:")
	rows = rows[:0]
	for _, h := range d.History {
		value := string(h.Value)
		if h.Value == nil {
			value = "(cleared)"
		}
		rows = append(rows, []string{"  " + fmt.Sprint(h.Revision), h.Node, value, at(&h.At)})
	}
	section(w, "  REVISION\tNODE\tVALUE\tAT", rows)

	if len(d.Requests) > 0 {
		fmt.Fprintln(w, "\nRequests:")
		rows = rows[:0]
		for _, r := range d.Requests {
			rows = append(rows, []string{"  " + fmt.Sprint(r.ID), r.Action, orDash(r.Node), at(&r.RequestedAt), at(r.DoneAt),
				orDash(r.ReplicaID), orDash(r.Error)})
		}
		section(w, "  ID\tACTION\tNODE\tREQUESTED\tDONE\tREPLICA\tERROR", rows)
	}
}

// section prints a table, or (none).
func section(w io.Writer, header string, rows [][]string) {
	if len(rows) == 0 {
		fmt.Fprintln(w, "  (none)")
		return
	}
	table(w, header, rows)
}

const replicasDescription = `replicas lists the replicas that heartbeat in the schema: the process that holds each one's
id (its host and pid), the age of its heartbeat, whether it is stale (older than its own
ReplicaStaleAfter: its running work is being reclaimed), how many computations it runs, and the
graphs it serves.`

// runReplicas implements "journey replicas".
func runReplicas(ctx context.Context, env *environment, args []string) int {
	fs, of := newOpsFlagSet(env, "replicas", "[-schema name] [-json]", replicasDescription)
	if _, code, ok := parseArgs(env, fs, args); !ok {
		return code
	}
	store, closeDB, ok := openStore(ctx, env, "replicas", *of.schema)
	if !ok {
		return 1
	}
	defer closeDB()
	replicas, err := store.ReplicaStatuses(ctx)
	if err != nil {
		return fail(env, "replicas", err)
	}
	if *of.json {
		return printJSON(env, replicas)
	}
	rows := make([][]string, 0, len(replicas))
	for _, r := range replicas {
		stale := "no"
		if r.Stale {
			stale = "STALE"
		}
		age := (time.Duration(r.HeartbeatAgeMS) * time.Millisecond).Round(100 * time.Millisecond)
		holder := "-"
		if r.Holder != nil {
			holder = *r.Holder
		}
		rows = append(rows, []string{r.ID, holder, age.String(), stale, fmt.Sprint(r.Running), strings.Join(r.Graphs, ","), at(&r.StartedAt)})
	}
	table(env.stdout, "REPLICA\tHELD BY\tHEARTBEAT AGE\tSTALE\tRUNNING\tSERVES\tSTARTED", rows)
	return 0
}

const schedulesDescription = `schedules lists the schedules of Config.Schedules, as the replica that last fired or
recorded each one defines it: its graph, cron, location and catch-up rule, the latest fire time
that started an execution (LAST FIRE, with the execution's key schedule:NAME:TIME), and the next
fire time. The times are shown in the schedule's location. A schedule that no replica lists any
more stays, its UPDATED time falling behind.`

// runSchedules implements "journey schedules".
func runSchedules(ctx context.Context, env *environment, args []string) int {
	fs, of := newOpsFlagSet(env, "schedules", "[-schema name] [-json]", schedulesDescription)
	if _, code, ok := parseArgs(env, fs, args); !ok {
		return code
	}
	store, closeDB, ok := openStore(ctx, env, "schedules", *of.schema)
	if !ok {
		return 1
	}
	defer closeDB()
	schedules, err := store.Schedules(ctx)
	if err != nil {
		return fail(env, "schedules", err)
	}
	if *of.json {
		return printJSON(env, schedules)
	}
	rows := make([][]string, 0, len(schedules))
	for _, s := range schedules {
		rows = append(rows, []string{s.Name, s.GraphName + "@" + s.GraphVersion, s.Cron, s.Location, s.CatchUp,
			fireTime(s.LastFire, s.Location), fireTime(s.NextFire, s.Location), at(&s.UpdatedAt)})
	}
	table(env.stdout, "SCHEDULE\tGRAPH\tCRON\tLOCATION\tCATCH UP\tLAST FIRE\tNEXT FIRE\tUPDATED", rows)
	return 0
}

// fireTime is a schedule's fire time in its location, with the zone's abbreviation; "-" for none.
func fireTime(t *time.Time, location string) string {
	if t == nil {
		return "-"
	}
	loc, err := time.LoadLocation(location)
	if err != nil || location == "Local" {
		return at(t)
	}
	return t.In(loc).Format("2006-01-02 15:04 MST")
}

// runRetry is journey retry: of a node of one execution (ID NODE), or, with --graph, of a node in
// every failed execution of a graph that the filters select.
func runRetry(ctx context.Context, env *environment, args []string) int {
	if !hasGraphFlag(args) {
		return runAction(persistence.ActionRetry)(ctx, env, args)
	}
	fs, of := newOpsFlagSet(env, "retry", "--graph G --node N [--version V] [--where node=value ...] [--dry-run] [-schema name] [-json]",
		"retry --graph asks for a retry of node N in every failed execution of graph G that the filters select, "+
			"in pages of 500, and prints how many. A replica that serves the graph carries each out.")
	var f persistence.ExecutionFilter
	var where whereFlags
	fs.StringVar(&f.Graph, "graph", "", "the executions of this `graph`")
	fs.StringVar(&f.Version, "version", "", "only those of this graph `version`")
	fs.Var(&where, "where", "only those whose `node=value`; repeat for several")
	node := fs.String("node", "", "the `node` to retry, where it failed for good")
	dryRun := fs.Bool("dry-run", false, "count the executions, and retry none")
	if _, code, ok := parseArgs(env, fs, args); !ok {
		return code
	}
	if *node == "" {
		fmt.Fprintln(env.stderr, "journey retry: --graph needs --node: the node to retry")
		return 2
	}
	f.Where = where
	store, closeDB, ok := openStore(ctx, env, "retry", *of.schema)
	if !ok {
		return 1
	}
	defer closeDB()
	n, err := store.RetryWhere(ctx, f, *node, *dryRun)
	if *of.json && err == nil {
		return printJSON(env, struct {
			Graph   string `json:"graph"`
			Node    string `json:"node"`
			Retried int    `json:"retried"`
			DryRun  bool   `json:"dry_run"`
		}{f.Graph, *node, n, *dryRun})
	}
	verb := "Asked for a retry of"
	if *dryRun {
		verb = "Would retry"
	}
	fmt.Fprintf(env.stdout, "%s node %q in %d failed execution(s) of graph %q.\n", verb, *node, n, f.Graph)
	if err != nil {
		return fail(env, "retry", err)
	}
	return 0
}

// hasGraphFlag reports whether args give --graph: the command acts on a graph, not on an
// execution.
func hasGraphFlag(args []string) bool {
	return slices.ContainsFunc(args, func(a string) bool {
		name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		return strings.HasPrefix(a, "-") && name == "graph"
	})
}

// runPause is journey pause or resume (paused false): of one execution (ID), or of a graph
// version (--graph G --version V), which needs no replica: it is one transaction.
func runPause(paused bool) func(ctx context.Context, env *environment, args []string) int {
	action := persistence.ActionPause
	if !paused {
		action = persistence.ActionResume
	}
	return func(ctx context.Context, env *environment, args []string) int {
		if !hasGraphFlag(args) {
			return runAction(action)(ctx, env, args)
		}
		fs, of := newOpsFlagSet(env, action, "--graph G --version V [-schema name]",
			action+" --graph "+action+"s a graph version: while it is paused no replica claims its work, and what "+
				"waits, or comes ready, waits PAUSED; running attempts finish.")
		name := fs.String("graph", "", "the `graph`")
		version := fs.String("version", "", "its `version`")
		if _, code, ok := parseArgs(env, fs, args); !ok {
			return code
		}
		store, closeDB, ok := openStore(ctx, env, action, *of.schema)
		if !ok {
			return 1
		}
		defer closeDB()
		changed, err := store.SetGraphPaused(ctx, *name, *version, paused)
		if err != nil {
			return fail(env, action, err)
		}
		state := map[bool]string{true: "paused", false: "running"}[paused]
		if !changed {
			fmt.Fprintf(env.stdout, "Graph %q version %q was %s already.\n", *name, *version, state)
			return 0
		}
		fmt.Fprintf(env.stdout, "Graph %q version %q is %s.\n", *name, *version, state)
		return 0
	}
}

const actionDescription = `%s records the request in the database. A replica that serves the execution's graph version
carries it out at once (it needs the graph's Go code), and the command waits up to -wait for it.`

// runAction returns the command function of an action: retry, archive, unarchive or cancel.
func runAction(action string) func(ctx context.Context, env *environment, args []string) int {
	return func(ctx context.Context, env *environment, args []string) int {
		want, synopsis := []string{"ID"}, "ID [-schema name] [-json] [-wait duration]"
		switch action {
		case persistence.ActionRetry:
			want, synopsis = []string{"ID", "NODE"}, "ID NODE [-schema name] [-json] [-wait duration]"
		case persistence.ActionCancel:
			synopsis = "ID [-reason text] [-schema name] [-json] [-wait duration]"
		}
		fs, of := newOpsFlagSet(env, action, synopsis, fmt.Sprintf(actionDescription, action))
		wait := fs.Duration("wait", 10*time.Second, "wait this long for a replica to carry it out; 0 does not wait")
		reason := ""
		if action == persistence.ActionCancel {
			fs.StringVar(&reason, "reason", "canceled by an operator", "why the execution is canceled: its event and its attempts' errors say it")
		}
		pos, code, ok := parseArgs(env, fs, args, want...)
		if !ok {
			return code
		}
		store, closeDB, ok := openStore(ctx, env, action, *of.schema)
		if !ok {
			return 1
		}
		defer closeDB()
		arg := reason
		if len(pos) > 1 {
			arg = pos[1] // the node of a retry
		}
		req, err := store.Ask(ctx, pos[0], action, arg)
		if err != nil {
			return fail(env, action, err)
		}
		return followRequest(ctx, env, store, req, *of.json, *wait)
	}
}

// followRequest says who will carry out req, waits up to wait for it, and reports the outcome.
func followRequest(ctx context.Context, env *environment, store *persistence.Store, req *persistence.Request, asJSON bool, wait time.Duration) int {
	name, version, _ := strings.Cut(req.GraphKey, "@")
	what := fmt.Sprintf("%s execution %s", req.Action, req.ExecutionID)
	if req.Node != nil {
		what = fmt.Sprintf("retry node %q of execution %s", *req.Node, req.ExecutionID)
	}
	out := env.stdout
	if asJSON {
		out = env.stderr // the JSON of the request alone on stdout
	}
	fmt.Fprintf(out, "Recorded request %d: %s.\n", req.ID, what)
	fmt.Fprintf(out, "A replica serving graph %q version %q carries it out.\n", name, version)
	serving, err := store.ServedBy(ctx, req.GraphKey)
	if err != nil {
		return fail(env, req.Action, err)
	}
	if len(serving) == 0 {
		fmt.Fprintf(env.stderr, "warning: no live replica serves graph %q version %q: the request waits until one starts.\n",
			name, version)
		wait = 0
	}
	if wait > 0 {
		action := req.Action
		if req, err = store.AwaitRequest(ctx, req.ID, wait); err != nil {
			return fail(env, action, err)
		}
	}
	switch {
	case asJSON:
		if code := printJSON(env, req); code != 0 {
			return code
		}
	case req.DoneAt == nil && wait > 0:
		fmt.Fprintf(out, "Not carried out after %s: `journey executions show %s` shows when it is.\n", wait, req.ExecutionID)
	case req.DoneAt == nil:
		fmt.Fprintf(out, "`journey executions show %s` shows when it is carried out.\n", req.ExecutionID)
	case req.Error != nil:
		fmt.Fprintf(out, "Replica %s refused it: %s\n", orDash(req.ReplicaID), *req.Error)
	default:
		fmt.Fprintf(out, "Done by replica %s.\n", orDash(req.ReplicaID))
	}
	if req.Error != nil {
		return 1
	}
	return 0
}
