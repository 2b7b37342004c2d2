// Package journeyui is journey-go's web dashboard: an http.Handler that shows the executions,
// replicas and reclaims of a schema, and lets an operator retry a failed node, archive and
// unarchive an execution.
//
// It needs no Go code of the graphs: it reads what the replicas record in the database (the
// graph versions, the values, the attempts), as `journey executions show` does, and an action is
// a request that a replica serving the graph carries out. `journey ui` serves it; an application
// can mount it next to its own handlers:
//
//	db, err := sql.Open("pgx", databaseURL) // import _ "github.com/jackc/pgx/v5/stdlib"
//	...
//	ui, err := journeyui.Handler(ctx, journeyui.Options{DB: db, Schema: "journey", Token: token})
//	...
//	mux.Handle("/journey/", http.StripPrefix("/journey", ui)) // and Options.BasePath "/journey"
//
// Every asset (the stylesheet; the graph picture is inline SVG drawn on the server) is embedded:
// no page asks for anything off the machine. Actions are POSTs that carry a CSRF token, and
// Options.ReadOnly turns them off.
//
// This package imports persistence, which holds all the SQL, and not the root package: an
// application that does not mount the dashboard does not build it.
package journeyui
