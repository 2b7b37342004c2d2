// Package devpg starts throwaway PostgreSQL clusters, for tests and local development: no server
// to install as a service, no database to create, nothing left behind.
//
// # A cluster
//
// Start runs initdb and postgres from the local server binaries (apt-get install postgresql),
// found on PATH or in /usr/lib/postgresql/<version>/bin, in a temporary directory. It returns
// once the server accepts connections:
//
//	c, err := devpg.Start(ctx, logger)
//	if err != nil {
//		return err // wraps ErrNoBinaries if the binaries are not installed
//	}
//	defer c.Stop()
//	pool, err := pgxpool.New(ctx, c.URL())
//
// The server listens on 127.0.0.1 at a free port, and trusts every local connection of the
// superuser "postgres" to the database "postgres". It is tuned for speed rather than durability
// (fsync, synchronous_commit and full_page_writes are off) and allows 500 connections. Setting
// changes any server parameter:
//
//	c, err := devpg.Start(ctx, logger, devpg.Setting("shared_preload_libraries", "pg_stat_statements"))
//
// Stop shuts the server down and removes the directory. Restart stops and starts it again on the
// same port and data, which breaks every open connection: a test of reconnection needs no more.
//
// # A pooler
//
// StartBouncer puts a PgBouncer in transaction pooling mode in front of a cluster, for the tests
// of what runs behind a pooler. StartBouncerWith picks the program, and sets
// max_prepared_statements (PgBouncer 1.21 and later, which BouncerVersion tells) or a
// connect_query for the server connections:
//
//	b, err := devpg.StartBouncerWith(ctx, c.URL(), devpg.BouncerConfig{
//		Program:               "/opt/pgbouncer/bin/pgbouncer",
//		MaxPreparedStatements: 200,
//	})
//	if err != nil {
//		return err
//	}
//	defer b.Stop()
//	pool, err := pgxpool.New(ctx, b.URL())
//
// # A program's database
//
// URLOrStart is for programs such as examples: it returns $DATABASE_URL when it is set, and
// otherwise starts a cluster, with a function that stops it:
//
//	url, stop, err := devpg.URLOrStart(ctx, logger)
//	if err != nil {
//		return err
//	}
//	defer stop()
//
// # Clean-up
//
// The server is a child process of the caller, and on Linux the kernel sends it SIGINT (a fast
// shutdown) if the caller dies, so that a test binary killed by its timeout does not leave a
// server running. Directories left behind by such a death are removed by a later Start.
//
// PostgreSQL refuses to run as root: when the caller is root, initdb and postgres run as the
// "postgres" OS user, which Debian's postgresql package creates.
//
// Tests of journey's users want package journeytest, which shares one cluster among the tests of
// a test binary. This package imports nothing else from the journey module.
package devpg
