package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/journey-go/journey/journeyui"
)

const uiDescription = `ui serves the web dashboard of the schema at $DATABASE_URL: the overview, the executions
(filtered and paged like executions list), each execution with its graph drawn and coloured by
state, the replicas and the reclaims, with buttons to retry, archive and unarchive.

It listens on loopback by default. Any other address needs a token (--token, or
JOURNEY_UI_TOKEN) or basic auth (--basic-auth user:password, or JOURNEY_UI_BASIC_AUTH): the
command refuses to start without one. It stops on SIGINT or SIGTERM.`

// uiFlags are the flags of the dashboard, for journey ui and journey dev --ui.
type uiFlags struct {
	addr, token, basicAuth *string
	readOnly               *bool
}

func addUIFlags(fs *flag.FlagSet, addrName string) uiFlags {
	return uiFlags{
		addr:      fs.String(addrName, journeyui.DefaultAddr, "listen on this `host:port`"),
		token:     fs.String("token", "", "require this `token` (default $JOURNEY_UI_TOKEN)"),
		basicAuth: fs.String("basic-auth", "", "require this `user:password` (default $JOURNEY_UI_BASIC_AUTH)"),
		readOnly:  fs.Bool("read-only", false, "hide the actions (retry, archive, unarchive), and refuse them"),
	}
}

// options returns the dashboard's options from the flags and the environment.
func (f uiFlags) options(env *environment, schema string) (journeyui.Options, error) {
	opts := journeyui.Options{Schema: schema, ReadOnly: *f.readOnly, Logger: env.logger,
		Token: *f.token}
	if opts.Token == "" {
		opts.Token = env.getenv("JOURNEY_UI_TOKEN")
	}
	basic := *f.basicAuth
	if basic == "" {
		basic = env.getenv("JOURNEY_UI_BASIC_AUTH")
	}
	if basic != "" {
		user, pass, ok := strings.Cut(basic, ":")
		if !ok || user == "" || pass == "" {
			return opts, fmt.Errorf("bad basic auth: want user:password")
		}
		opts.BasicAuth = &journeyui.BasicAuth{User: user, Password: pass}
	}
	return opts, nil
}

// runUI implements "journey ui".
func runUI(ctx context.Context, env *environment, args []string) int {
	fs := newFlagSet(env, "ui", "[--addr host:port] [-schema name] [--read-only] [--token T] [--basic-auth user:password]",
		uiDescription)
	schema := fs.String("schema", "journey", "the PostgreSQL `schema` that holds journey's tables")
	uf := addUIFlags(fs, "addr")
	if _, code, ok := parseArgs(env, fs, args); !ok {
		return code
	}
	url := env.getenv("DATABASE_URL")
	if url == "" {
		fmt.Fprintln(env.stderr, "journey ui: DATABASE_URL is not set: set it to journey's database")
		return 1
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	return serveUI(ctx, env, "ui", url, *schema, uf, func() {})
}

// serveUI serves the dashboard of the schema at url until ctx ends. It calls listening once it
// listens.
func serveUI(ctx context.Context, env *environment, name, url, schema string, uf uiFlags, listening func()) int {
	opts, err := uf.options(env, schema)
	if err != nil {
		return fail(env, name, err)
	}
	db, err := openDB(url)
	if err != nil {
		return fail(env, name, err)
	}
	defer func() { _ = db.Close() }()
	opts.DB = db.DB
	srv, err := journeyui.Listen(ctx, *uf.addr, opts)
	if err != nil {
		return fail(env, name, err)
	}
	fmt.Fprintf(env.stdout, "The dashboard of schema %s is at %s\n", schema, srv.URL())
	listening()
	if err := srv.Serve(ctx); err != nil {
		return fail(env, name, err)
	}
	return 0
}
