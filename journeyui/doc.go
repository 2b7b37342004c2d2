// Package journeyui is journey-go's web dashboard: an http.Handler that shows the executions,
// replicas, schedules and reclaims of a schema, and lets an operator retry a failed node, archive and
// unarchive an execution.
//
// It needs no Go code of the graphs: it reads what the replicas record in the database (the
// graph versions, the values, the attempts), as `journey executions show` does, and an action
// is a request that a replica serving the graph carries out.
//
// # Serve it on its own
//
// The command `journey ui` serves the schema at $DATABASE_URL on DefaultAddr, loopback only. A
// program does the same with Listen and Serve, which stops when ctx ends:
//
//	srv, err := journeyui.Listen(ctx, journeyui.DefaultAddr, journeyui.Options{DB: db})
//	if err != nil {
//		return err
//	}
//	fmt.Println("dashboard at", srv.URL())
//	return srv.Serve(ctx)
//
// db is a database/sql pool on pgx's driver (import _ "github.com/jackc/pgx/v5/stdlib"):
//
//	db, err := sql.Open("pgx", os.Getenv("DATABASE_URL"))
//
// # Mount it in an application
//
// Handler returns the dashboard itself, to mount next to the application's own handlers. Under
// a path prefix, Options.BasePath makes its links start with that prefix:
//
//	ui, err := journeyui.Handler(ctx, journeyui.Options{DB: db, Schema: "journey", BasePath: "/journey"})
//	if err != nil {
//		return err
//	}
//	mux.Handle("/journey/", http.StripPrefix("/journey", ui))
//
// Handler checks that the schema holds journey's tables, and says what to do if it does not.
// ExampleHandler shows a whole program, with a replica and the pages it serves.
//
// # Protect it
//
// Options.Token requires a token of every request: open any page with ?token=TOKEN once, or
// send "Authorization: Bearer TOKEN". Options.BasicAuth requires a user and a password instead.
// Listen refuses an address beyond loopback without either (ErrUnprotected). Actions are POSTs
// that carry a CSRF token, and Options.ReadOnly turns them off.
//
// Every asset (the stylesheet; the graph picture is inline SVG drawn on the server) is
// embedded: no page asks for anything off the machine.
//
// This package imports persistence, which holds all the SQL, and not the root
// package: an application that does not mount the dashboard does not build it.
package journeyui
