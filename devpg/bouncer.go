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
	"strconv"
	"sync"
	"syscall"
	"time"
)

// ErrNoBouncer is returned by StartBouncer when the pgbouncer program is not installed.
var ErrNoBouncer = errors.New("no pgbouncer program on PATH or in /usr/sbin: install the pgbouncer package (apt-get install pgbouncer)")

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

// StartBouncer starts PgBouncer on 127.0.0.1 at a free port in front of the server that upstream
// (a URL) names, in transaction pooling mode: each transaction, or each statement outside one,
// gets whichever server connection is free, as hosted PostgreSQL behind PgBouncer, Supavisor or
// RDS Proxy does. Everything else is PgBouncer's default: no ignore_startup_parameters and no
// max_prepared_statements, so a startup parameter other than the few PgBouncer knows fails the
// connection, and a named prepared statement does not outlive its transaction. Only
// max_client_conn is raised, to 1,000, for tests that run several replicas. Its users are trusted,
// as devpg's cluster trusts them.
//
// It returns once a connection through it works. The caller must call Stop.
func StartBouncer(ctx context.Context, upstream string) (*Bouncer, error) {
	bin, err := exec.LookPath("pgbouncer")
	if err != nil {
		if _, statErr := os.Stat("/usr/sbin/pgbouncer"); statErr != nil {
			return nil, ErrNoBouncer
		}
		bin = "/usr/sbin/pgbouncer"
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
	if err := b.start(ctx, bin, up, cred); err != nil {
		return nil, errors.Join(err, os.RemoveAll(dir))
	}
	return b, nil
}

func (b *Bouncer) start(ctx context.Context, bin string, up *url.URL, cred *syscall.Credential) error {
	port, err := freePort(ctx)
	if err != nil {
		return err
	}
	user := up.User.Username()
	if user == "" {
		user = superuser
	}
	config := fmt.Sprintf(`[databases]
* = host=%s port=%s

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = trust
auth_file = %s
pool_mode = transaction
max_client_conn = 1000
logfile = %s
`, up.Hostname(), cmp.Or(up.Port(), "5432"), port, filepath.Join(b.dir, "users.txt"), b.logPath)
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
	}

	b.cmd = exec.Command(bin, filepath.Join(b.dir, "pgbouncer.ini")) //nolint:gosec,noctx // our binary and file; it lives past ctx
	b.cmd.Dir = b.dir
	b.cmd.Env = serverEnv()
	b.cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	setPdeathsig(b.cmd.SysProcAttr, syscall.SIGKILL)
	if err := b.cmd.Start(); err != nil {
		return fmt.Errorf("starting pgbouncer: %w", err)
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
