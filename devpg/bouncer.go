package devpg

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// ErrNoBouncer is returned by StartBouncer, and by StartBouncerWith and BouncerVersion without a
// program, when the pgbouncer program is not installed.
var ErrNoBouncer = errors.New("no pgbouncer program on PATH or in /usr/sbin: install the pgbouncer package (apt-get install pgbouncer)")

// debianBouncer is where Debian's pgbouncer package installs the program.
const debianBouncer = "/usr/sbin/pgbouncer"

// preparingBouncer is the first version of PgBouncer with max_prepared_statements.
var preparingBouncer = []int{1, 21}

// Bouncer is a throwaway PgBouncer started by StartBouncer. Its methods are safe for concurrent
// use.
type Bouncer struct {
	url     string
	dir     string
	logPath string
	cmd     *exec.Cmd
	exited  chan struct{}

	once sync.Once
}

// BouncerConfig says which PgBouncer StartBouncerWith starts, and how. Its zero value is what
// StartBouncer starts.
type BouncerConfig struct {
	// Program is the pgbouncer program. Default: pgbouncer on PATH, else /usr/sbin/pgbouncer,
	// where Debian's package puts it (PgBouncer 1.18 in Debian 12).
	Program string
	// MaxPreparedStatements is PgBouncer's max_prepared_statements, which PgBouncer 1.21 added:
	// above 0, PgBouncer prepares a statement that a client prepared by name on whichever server
	// connection the client's next transaction gets, so that pgx's default query mode,
	// QueryExecModeCacheStatement, works through it. An older PgBouncer refuses to start with it.
	// Default 0: PgBouncer's own, which is none before 1.24 and 200 from 1.24 on.
	MaxPreparedStatements int
	// ConnectQuery is PgBouncer's connect_query: SQL that it runs on each server connection as it
	// opens it, such as SETs that its clients cannot make, since a setting that one client made
	// would stay on a server connection that others share. Default "": none.
	ConnectQuery string
}

// StartBouncer starts PgBouncer on 127.0.0.1 at a free port in front of the server that upstream
// (a URL) names, in transaction pooling mode: each transaction, or each statement outside one,
// gets whichever server connection is free, as hosted PostgreSQL behind PgBouncer, Supavisor or
// RDS Proxy does. Everything else is PgBouncer's default: no ignore_startup_parameters, so a
// startup parameter other than the few PgBouncer knows fails the connection; and, before
// PgBouncer 1.24, no max_prepared_statements, so a named prepared statement does not outlive its
// transaction. Only max_client_conn is raised, to 1,000, for tests that run several replicas. Its
// users are trusted, as devpg's cluster trusts them.
//
// It starts the pgbouncer on PATH, or else Debian's; StartBouncerWith starts another, or sets
// max_prepared_statements or connect_query. It returns once a connection through it works. The
// caller must call Stop.
func StartBouncer(ctx context.Context, upstream string) (*Bouncer, error) {
	return StartBouncerWith(ctx, upstream, BouncerConfig{})
}

// StartBouncerWith is StartBouncer with the program and settings of cfg.
func StartBouncerWith(ctx context.Context, upstream string, cfg BouncerConfig) (*Bouncer, error) {
	bin, err := bouncerProgram(cfg.Program)
	if err != nil {
		return nil, err
	}
	up, err := url.Parse(upstream)
	if err != nil {
		return nil, fmt.Errorf("parsing the upstream URL: %w", err)
	}
	cred, err := serverCredential() // PgBouncer refuses to run as root, as PostgreSQL does
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "journey-bouncer-")
	if err != nil {
		return nil, fmt.Errorf("creating the bouncer's directory: %w", err)
	}
	b := &Bouncer{dir: dir, logPath: filepath.Join(dir, "pgbouncer.log"), exited: make(chan struct{})}
	if err := b.start(ctx, bin, up, cred, cfg); err != nil {
		return nil, errors.Join(err, os.RemoveAll(dir))
	}
	return b, nil
}

// BouncerVersion runs program --version (BouncerConfig.Program's default if "") and returns
// PgBouncer's version, such as "1.25.2", and whether it is 1.21 or later, which
// BouncerConfig.MaxPreparedStatements needs.
func BouncerVersion(ctx context.Context, program string) (version string, prepares bool, err error) {
	bin, err := bouncerProgram(program)
	if err != nil {
		return "", false, err
	}
	out, err := exec.CommandContext(ctx, bin, "--version").Output()
	if err != nil {
		return "", false, fmt.Errorf("running %s --version: %w", bin, err)
	}
	first, _, _ := strings.Cut(string(out), "\n")
	version, ok := strings.CutPrefix(strings.TrimSpace(first), "PgBouncer ")
	v, parsed := parseVersion(version)
	if !ok || !parsed {
		return "", false, fmt.Errorf("%s --version does not begin with PgBouncer's version: %q", bin, first)
	}
	return version, slices.Compare(v, preparingBouncer) >= 0, nil
}

// bouncerProgram returns program, or else the default of BouncerConfig.Program.
func bouncerProgram(program string) (string, error) {
	if program != "" {
		return program, nil
	}
	if bin, err := exec.LookPath("pgbouncer"); err == nil {
		return bin, nil
	}
	if !isExecutable(debianBouncer) {
		return "", ErrNoBouncer
	}
	return debianBouncer, nil
}

func (b *Bouncer) start(ctx context.Context, bin string, up *url.URL, cred *syscall.Credential, cfg BouncerConfig) error {
	port, err := freePort(ctx)
	if err != nil {
		return err
	}
	user := up.User.Username()
	if user == "" {
		user = superuser
	}
	server := fmt.Sprintf("host=%s port=%s", up.Hostname(), cmp.Or(up.Port(), "5432"))
	if cfg.ConnectQuery != "" {
		server += " connect_query='" + strings.ReplaceAll(cfg.ConnectQuery, "'", "''") + "'"
	}
	config := fmt.Sprintf(`[databases]
* = %s

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = trust
auth_file = %s
pool_mode = transaction
max_client_conn = 1000
logfile = %s
`, server, port, filepath.Join(b.dir, "users.txt"), b.logPath)
	if cfg.MaxPreparedStatements > 0 {
		config += fmt.Sprintf("max_prepared_statements = %d\n", cfg.MaxPreparedStatements)
	}
	files := map[string]string{"pgbouncer.ini": config, "users.txt": strconv.Quote(user) + ` ""` + "\n"}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(b.dir, name), []byte(text), 0o644); err != nil {
			return fmt.Errorf("writing the bouncer's %s: %w", name, err)
		}
	}
	if cred != nil {
		if err := os.Chown(b.dir, int(cred.Uid), int(cred.Gid)); err != nil {
			return fmt.Errorf("giving the bouncer's directory to the postgres user: %w", err)
		}
		// A program under root's home (a checkout's .tools, say) is out of the postgres user's
		// reach: it runs a copy in its own directory.
		if bin != debianBouncer {
			if bin, err = copyProgram(bin, b.dir); err != nil {
				return err
			}
		}
	}

	// A copy just written may be held open for writing by a process forked meanwhile, before its
	// exec closes what it inherited (golang/go#22315): its exec fails with ETXTBSY, briefly.
	for try := 1; ; try++ {
		b.cmd = exec.Command(bin, filepath.Join(b.dir, "pgbouncer.ini")) //nolint:gosec,noctx // our binary and file; it lives past ctx
		b.cmd.Dir = b.dir
		b.cmd.Env = serverEnv()
		b.cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		setPdeathsig(b.cmd.SysProcAttr, syscall.SIGKILL)
		err := b.cmd.Start()
		if err == nil {
			break
		}
		if !errors.Is(err, syscall.ETXTBSY) || try == 20 {
			return fmt.Errorf("starting pgbouncer: %w", err)
		}
		time.Sleep(time.Duration(try) * 10 * time.Millisecond)
	}
	go func() {
		_ = b.cmd.Wait()
		close(b.exited)
	}()

	u := *up
	u.Host = "127.0.0.1:" + strconv.Itoa(port)
	b.url = u.String()
	deadline := time.Now().Add(readyTimeout)
	for {
		err := ping(ctx, b.url)
		if err == nil {
			return nil
		}
		select {
		case <-b.exited:
			return fmt.Errorf("pgbouncer exited before accepting connections; its log:\n%s", b.log())
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
			if time.Now().Before(deadline) {
				continue
			}
		}
		b.kill()
		return fmt.Errorf("no connection through pgbouncer (%w); its log:\n%s", err, b.log())
	}
}

// URL returns the upstream URL with its host and port replaced by the bouncer's.
func (b *Bouncer) URL() string { return b.url }

// Stop stops PgBouncer (SIGTERM, its immediate shutdown) and removes its directory. Calling it
// again does nothing.
func (b *Bouncer) Stop() error {
	var err error
	b.once.Do(func() {
		b.kill()
		err = os.RemoveAll(b.dir)
	})
	return err
}

func (b *Bouncer) kill() {
	_ = b.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-b.exited:
	case <-time.After(immediateStopTimeout):
		_ = b.cmd.Process.Kill()
		<-b.exited
	}
}

func (b *Bouncer) log() string {
	text, err := os.ReadFile(b.logPath)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	if len(text) > logTailBytes {
		text = text[len(text)-logTailBytes:]
	}
	return string(text)
}

// copyProgram copies the program bin into dir, as an executable that every user may run, and
// returns the copy's path.
func copyProgram(bin, dir string) (string, error) {
	data, err := os.ReadFile(bin) //nolint:gosec // the caller's program
	if err != nil {
		return "", fmt.Errorf("reading %s: %w", bin, err)
	}
	copied := filepath.Join(dir, filepath.Base(bin))
	if err := os.WriteFile(copied, data, 0o755); err != nil { //nolint:gosec // a program, run by the postgres user
		return "", fmt.Errorf("copying %s for the postgres user: %w", bin, err)
	}
	return copied, nil
}
