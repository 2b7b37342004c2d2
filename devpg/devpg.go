package devpg

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

const (
	// readyTimeout bounds how long Start and Restart wait for the server to accept connections.
	readyTimeout = 60 * time.Second
	// fastStopTimeout is how long Stop waits for a fast shutdown before an immediate one.
	fastStopTimeout = 15 * time.Second
	// immediateStopTimeout is how long Stop waits for an immediate shutdown before SIGKILL.
	immediateStopTimeout = 10 * time.Second
	// startAttempts is how many ports Start tries, in case another process takes the free port
	// it found before the server binds it.
	startAttempts = 3
	// logTailBytes is how much of the server log an error message quotes.
	logTailBytes = 4 << 10

	dirPrefix     = "journey-devpg-"
	ownerFileName = "owner.pid"
	superuser     = "postgres"
	database      = "postgres"
)

// Cluster is a throwaway PostgreSQL cluster started by Start. Its methods are safe for
// concurrent use.
type Cluster struct {
	logger  *slog.Logger
	bin     binaries
	dir     string // the temporary directory: data directory, server log and sockets
	dataDir string
	logPath string
	port    int
	cred    *syscall.Credential // the postgres OS user when running as root, else nil
	options options

	mu      sync.Mutex
	server  *server // nil when no server runs
	stopped bool
}

// server is one run of the postgres process.
type server struct {
	cmd    *exec.Cmd
	exited chan struct{} // closed when the process has exited; err is set by then
	err    error         // what cmd.Wait returned
}

// Start initialises and starts a throwaway cluster on 127.0.0.1 at a free port, with a superuser
// "postgres" trusted on loopback and a database "postgres". It is tuned for tests: fsync,
// synchronous_commit and full_page_writes are off, max_connections is 500, and the Unix socket
// lives in the cluster's temporary directory.
//
// The binaries initdb and postgres are taken from PATH, or else from the newest
// /usr/lib/postgresql/<version>/bin. If there are none, Start returns an error wrapping
// ErrNoBinaries that says what to install.
//
// Options such as Setting change the cluster's configuration.
//
// Start returns once the server accepts connections. The caller must call Stop. A nil logger
// discards the log.
func Start(ctx context.Context, logger *slog.Logger, opts ...Option) (*Cluster, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	logger = logger.With("service", "devpg")
	began := time.Now()

	bin, err := findBinaries()
	if err != nil {
		return nil, err
	}
	cred, err := serverCredential()
	if err != nil {
		return nil, err
	}
	removeStaleDirs(logger)

	dir, err := os.MkdirTemp("", dirPrefix)
	if err != nil {
		return nil, fmt.Errorf("creating the cluster directory: %w", err)
	}
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	c := &Cluster{
		logger:  logger,
		options: o,
		bin:     bin,
		dir:     dir,
		dataDir: filepath.Join(dir, "data"),
		logPath: filepath.Join(dir, "postgres.log"),
		cred:    cred,
	}
	if err := c.init(ctx); err != nil {
		return nil, errors.Join(err, os.RemoveAll(dir))
	}

	for attempt := 1; ; attempt++ {
		c.port, err = freePort(ctx)
		if err == nil {
			err = c.start(ctx)
		}
		if err == nil {
			break
		}
		if attempt == startAttempts || !strings.Contains(c.logTail(), "Address already in use") {
			return nil, errors.Join(err, os.RemoveAll(dir))
		}
		logger.Warn("port taken before the server could bind it; retrying", "port", c.port)
	}

	logger.Info("PostgreSQL started", "url", c.URL(), "dir", dir,
		"elapsed", time.Since(began).Round(time.Millisecond))
	return c, nil
}

// URL returns the connection URL of the cluster's database "postgres" as its superuser:
// postgres://postgres@127.0.0.1:PORT/postgres?sslmode=disable.
func (c *Cluster) URL() string {
	return fmt.Sprintf("postgres://%s@127.0.0.1:%d/%s?sslmode=disable", superuser, c.port, database)
}

// Stop shuts the server down (a fast shutdown, then an immediate one if that takes too long)
// and removes the cluster's temporary directory. Calling it again does nothing.
func (c *Cluster) Stop() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return nil
	}
	c.stopped = true
	err := c.shutdown()
	if rmErr := os.RemoveAll(c.dir); rmErr != nil {
		err = errors.Join(err, fmt.Errorf("removing the cluster directory: %w", rmErr))
	}
	if err != nil {
		return err
	}
	c.logger.Info("PostgreSQL stopped", "url", c.URL())
	return nil
}

// Restart stops the server with a fast shutdown, which terminates every open connection, and
// starts it again on the same port and data. It returns once the server accepts connections.
func (c *Cluster) Restart(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return errors.New("restarting PostgreSQL: the cluster was stopped")
	}
	if err := c.shutdown(); err != nil {
		return fmt.Errorf("restarting PostgreSQL: %w", err)
	}
	if err := c.start(ctx); err != nil {
		return fmt.Errorf("restarting PostgreSQL: %w", err)
	}
	c.logger.Info("PostgreSQL restarted", "url", c.URL())
	return nil
}

// Option changes the configuration of a cluster started by Start.
type Option func(*options)

type options struct {
	settings [][2]string // name, value: lines appended to postgresql.conf, in order
}

// Setting sets a server parameter in the cluster's postgresql.conf, after (and so over) the
// defaults of Start. For example, Setting("shared_preload_libraries", "pg_stat_statements")
// loads the statement statistics; the server does not start if the library is not installed.
func Setting(name, value string) Option {
	return func(o *options) { o.settings = append(o.settings, [2]string{name, value}) }
}

// URLOrStart returns $DATABASE_URL and a stop function that does nothing if the variable is
// set. Otherwise it starts a cluster and returns its URL and a stop function that stops it
// (logging any error).
func URLOrStart(ctx context.Context, logger *slog.Logger) (url string, stop func(), err error) {
	if u := os.Getenv("DATABASE_URL"); u != "" {
		return u, func() {}, nil
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	c, err := Start(ctx, logger)
	if err != nil {
		return "", func() {}, err
	}
	return c.URL(), func() {
		if err := c.Stop(); err != nil {
			logger.Error("stopping PostgreSQL", "service", "devpg", "error", err)
		}
	}, nil
}

// init creates the data directory with initdb and appends our settings to postgresql.conf.
func (c *Cluster) init(ctx context.Context) error {
	if err := os.WriteFile(filepath.Join(c.dir, ownerFileName), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		return fmt.Errorf("creating the cluster directory: %w", err)
	}
	if c.cred != nil {
		if err := os.Chown(c.dir, int(c.cred.Uid), int(c.cred.Gid)); err != nil {
			return fmt.Errorf("handing the cluster directory to the postgres user: %w", err)
		}
	}

	cmd := exec.CommandContext(ctx, c.bin.initdb,
		"--pgdata", c.dataDir,
		"--username", superuser,
		"--auth", "trust",
		"--encoding", "UTF8",
		"--locale", "C",
		"--no-sync",
	)
	c.prepare(cmd)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("initdb: %w\n%s", err, out)
	}

	conf := fmt.Sprintf(`
# Added by journey's devpg: a throwaway cluster, tuned for tests.
listen_addresses = '127.0.0.1'
unix_socket_directories = '%s'
max_connections = 500
fsync = off
synchronous_commit = off
full_page_writes = off
`, quote(c.dir))
	for _, s := range c.options.settings {
		conf += fmt.Sprintf("%s = '%s'\n", s[0], quote(s[1]))
	}
	f, err := os.OpenFile(filepath.Join(c.dataDir, "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("configuring the cluster: %w", err)
	}
	_, err = io.WriteString(f, conf)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("configuring the cluster: %w", err)
	}
	return nil
}

// quote escapes a value for a single-quoted string in postgresql.conf.
func quote(s string) string { return strings.ReplaceAll(s, "'", "''") }

// start runs the server at c.port and waits until it accepts connections. The caller holds c.mu
// or has not published c yet.
func (c *Cluster) start(ctx context.Context) error {
	logFile, err := os.OpenFile(c.logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("opening the server log: %w", err)
	}
	defer logFile.Close() // the child has its own copy of the descriptor

	//nolint:noctx // the server outlives ctx, which bounds only the start: Stop ends it
	cmd := exec.Command(c.bin.postgres, "-D", c.dataDir, "-p", strconv.Itoa(c.port))
	c.prepare(cmd)
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	// The server should outlive neither us nor a Ctrl-C meant for us: the kernel sends it SIGINT
	// (fast shutdown) if we die, and its own process group keeps the terminal's SIGINT away so
	// that Stop decides when it ends.
	setPdeathsig(cmd.SysProcAttr, syscall.SIGINT)
	cmd.SysProcAttr.Setpgid = true
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting postgres: %w", err)
	}
	srv := &server{cmd: cmd, exited: make(chan struct{})}
	go func() {
		srv.err = cmd.Wait()
		close(srv.exited)
	}()
	c.server = srv

	if err := c.waitReady(ctx, srv); err != nil {
		if stopErr := c.shutdown(); stopErr != nil {
			c.logger.Warn("stopping a server that failed to start", "error", stopErr)
		}
		return err
	}
	return nil
}

// waitReady polls the server with pgx until a connection succeeds, the server exits, or
// readyTimeout passes.
func (c *Cluster) waitReady(ctx context.Context, srv *server) error {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	const poll = 20 * time.Millisecond
	for {
		err := ping(ctx, c.URL())
		if err == nil {
			return nil
		}
		select {
		case <-srv.exited:
			// srv.err is nil if postgres exited with status 0, which %w would print as %!w(<nil>).
			return fmt.Errorf("postgres exited before accepting connections (%v); server log:\n%s",
				srv.err, c.logTail()) //nolint:errorlint // see above
		case <-ctx.Done():
			return fmt.Errorf("postgres did not accept connections (%w; last error: %w); server log:\n%s",
				ctx.Err(), err, c.logTail())
		case <-time.After(poll):
		}
	}
}

func ping(ctx context.Context, url string) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	return conn.Ping(ctx)
}

// shutdown stops the running server, if any: SIGINT (fast shutdown), then SIGQUIT (immediate
// shutdown), then SIGKILL, each after a timeout. The caller holds c.mu.
func (c *Cluster) shutdown() error {
	srv := c.server
	if srv == nil {
		return nil
	}
	c.server = nil
	steps := []struct {
		sig     syscall.Signal
		timeout time.Duration
	}{
		{syscall.SIGINT, fastStopTimeout},
		{syscall.SIGQUIT, immediateStopTimeout},
		{syscall.SIGKILL, immediateStopTimeout},
	}
	for _, step := range steps {
		select {
		case <-srv.exited:
			return nil
		default:
		}
		if err := srv.cmd.Process.Signal(step.sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
			return fmt.Errorf("signalling postgres: %w", err)
		}
		select {
		case <-srv.exited:
			return nil
		case <-time.After(step.timeout):
			c.logger.Warn("postgres did not stop in time", "signal", step.sig.String(), "timeout", step.timeout)
		}
	}
	return fmt.Errorf("postgres (pid %d) did not exit after SIGKILL", srv.cmd.Process.Pid)
}

// prepare sets the working directory, environment and credentials of a server program.
func (c *Cluster) prepare(cmd *exec.Cmd) {
	cmd.Dir = c.dir // the postgres user may not be allowed into the caller's directory
	cmd.Env = serverEnv()
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred}
	setPdeathsig(cmd.SysProcAttr, syscall.SIGTERM) // start overrides it for the server
}

// logTail returns the end of the server log.
func (c *Cluster) logTail() string {
	f, err := os.Open(c.logPath)
	if err != nil {
		return fmt.Sprintf("(no server log: %v)", err)
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.Size() > logTailBytes {
		if _, err := f.Seek(-logTailBytes, io.SeekEnd); err != nil {
			return fmt.Sprintf("(reading the server log: %v)", err)
		}
	}
	b, err := io.ReadAll(f)
	if err != nil {
		return fmt.Sprintf("(reading the server log: %v)", err)
	}
	return string(b)
}

// serverEnv is our environment without the PG* variables, which would change what initdb and
// postgres do.
func serverEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PG") {
			env = append(env, kv)
		}
	}
	return env
}

// serverCredential returns the credential to run the server programs with: nil to run them as
// ourselves, or the postgres OS user when we are root, since PostgreSQL refuses to run as root.
func serverCredential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("PostgreSQL refuses to run as root, and there is no postgres OS user to run it as "+
			"(%w): install the postgresql package, which creates it, or run as a non-root user", err)
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("parsing the uid of the postgres user: %w", err)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("parsing the gid of the postgres user: %w", err)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}, nil
}

// freePort asks the kernel for a free TCP port on 127.0.0.1.
func freePort(ctx context.Context) (int, error) {
	l, err := new(net.ListenConfig).Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("finding a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// removeStaleDirs removes the directories of clusters whose owner process has died without
// stopping them (a test binary killed by its timeout, say). A directory is stale when its owner
// is gone and no server runs in it.
func removeStaleDirs(logger *slog.Logger) {
	dirs, err := filepath.Glob(filepath.Join(os.TempDir(), dirPrefix+"*"))
	if err != nil {
		return
	}
	for _, dir := range dirs {
		owner, ok := readPID(filepath.Join(dir, ownerFileName))
		if !ok || alive(owner) {
			continue // being created (no owner file yet), or in use
		}
		if server, ok := readPID(filepath.Join(dir, "data", "postmaster.pid")); ok && alive(server) {
			continue
		}
		if err := os.RemoveAll(dir); err != nil {
			logger.Debug("removing a stale cluster directory", "dir", dir, "error", err)
			continue
		}
		logger.Debug("removed a stale cluster directory", "dir", dir)
	}
}

// readPID reads the process id on the first line of a file.
func readPID(path string) (int, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	line, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	return pid, err == nil && pid > 0
}

func alive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
