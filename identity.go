package journey

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/journey-go/journey/persistence"
)

// identityGrace is how long New waits for the lock of a replica id held by another session: a
// process killed a moment ago leaves a session that PostgreSQL ends within milliseconds.
const identityGrace = 2 * time.Second

// holdIdentity makes sure that no other live process holds Config.ReplicaID, so that the first
// heartbeat may take the replica's row over (and its sweepers abandon what an earlier, dead process
// under the id left RUNNING). Unless PollOnly, it returns the LISTEN connection, which holds the
// id's advisory lock from then on, for as long as the process lives. It writes nothing.
//
// A live holder keeps the lock and heartbeats: a second process is refused with ErrReplicaIDInUse.
// A holder whose heartbeat is older than its ReplicaStaleAfter is dead, even if PostgreSQL still
// keeps its session (a host that went away, until TCP keepalives end it): the id is taken over
// without the lock. A holder that keeps no lock (PollOnly) is alive while its heartbeat moves.
func (r *Runtime) holdIdentity(ctx context.Context) (*pgx.Conn, error) {
	host, _ := os.Hostname()
	r.identity = persistence.Identity{
		Incarnation: persistence.NewUUID(),
		Holder:      fmt.Sprintf("host %s pid %d", cmp.Or(host, "unknown"), os.Getpid()),
	}
	conn, free, err := r.lockIdentity(ctx)
	if err == nil && !free {
		var row *persistence.ReplicaHold
		row, err = r.store.ReplicaRow(ctx, r.cfg.ReplicaID)
		switch {
		case err != nil:
		case row != nil && !row.Stale:
			err = r.inUse(ctx)
		default:
			r.logger.Warn("a session of an earlier process of the replica id still holds its lock, but no process has "+
				"heartbeat for it since its ReplicaStaleAfter: taking the id over without the lock", "holder", deref(row.Holder))
		}
	}
	r.identity.Locked = free && conn != nil
	if err == nil {
		err = r.awaitUnlockedHolder(ctx)
	}
	if err != nil {
		closeConn(conn)
		return nil, err
	}
	return conn, nil
}

// lockIdentity takes the advisory lock of the replica's id on the LISTEN connection that it opens
// and returns, unless PollOnly, where it only tells whether no session holds it. free reports
// whether the lock was free, within identityGrace.
func (r *Runtime) lockIdentity(ctx context.Context) (conn *pgx.Conn, free bool, err error) {
	grace := time.NewTimer(identityGrace)
	defer grace.Stop()
	for {
		switch {
		case r.cfg.PollOnly:
			free, err = r.store.IdentityFree(ctx, r.cfg.ReplicaID)
		case conn == nil:
			conn, free, err = r.connectLocked(ctx)
		default:
			free, err = tryLock(ctx, conn, r.store.IdentityKey(r.cfg.ReplicaID))
		}
		if err != nil || free {
			return conn, free, err
		}
		select {
		case <-grace.C:
			return conn, false, nil
		case <-ctx.Done():
			closeConn(conn)
			return nil, false, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// connectLocked opens the LISTEN connection and takes the advisory lock of the replica's id on
// it, if no other session holds it.
func (r *Runtime) connectLocked(ctx context.Context) (conn *pgx.Conn, locked bool, err error) {
	cfg := r.pool.Config().ConnConfig
	if r.cfg.ListenURL != "" {
		cfg, _ = pgx.ParseConfig(r.cfg.ListenURL) // validate has parsed it
	}
	if conn, err = pgx.ConnectConfig(ctx, cfg.Copy()); err != nil {
		return nil, false, fmt.Errorf("opening the LISTEN connection: %w", err)
	}
	if locked, err = tryLock(ctx, conn, r.store.IdentityKey(r.cfg.ReplicaID)); err != nil {
		closeConn(conn)
		return nil, false, err
	}
	return conn, locked, nil
}

// tryLock takes the session's advisory lock of key, if no other session holds it.
func tryLock(ctx context.Context, conn *pgx.Conn, key string) (locked bool, err error) {
	err = conn.QueryRow(ctx, "SELECT pg_try_advisory_lock(hashtextextended($1, 0))", key).Scan(&locked)
	if err != nil {
		return false, fmt.Errorf("taking the lock %s: %w", key, err)
	}
	return locked, nil
}

// awaitUnlockedHolder waits, if the replica's row is held by another process that keeps no lock
// (PollOnly) and heartbeats, until either its heartbeat moves (it lives: ErrReplicaIDInUse) or
// its ReplicaStaleAfter passes without one (it is dead).
func (r *Runtime) awaitUnlockedHolder(ctx context.Context) error {
	row, err := r.store.ReplicaRow(ctx, r.cfg.ReplicaID)
	if err != nil || row == nil || row.Incarnation == nil || row.Locked == nil || *row.Locked || row.Stale {
		return err
	}
	r.logger.Info("the replica's row is held by a process that keeps no lock of its id (PollOnly); waiting for its next "+
		"heartbeat, or for it to go stale", "holder", deref(row.Holder), "until", row.Until)
	stale := time.NewTimer(row.Until.Sub(row.LastHeartbeat))
	defer stale.Stop()
	look := time.NewTicker(cmp.Or(r.cfg.ReplicaHeartbeatInterval, time.Second) / 4)
	defer look.Stop()
	for {
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for the holder of replica id %s: %w", r.cfg.ReplicaID, ctx.Err())
		case <-stale.C:
			return nil
		case <-look.C:
			now, err := r.store.ReplicaRow(ctx, r.cfg.ReplicaID)
			switch {
			case err != nil:
				return err
			case now == nil || now.Stale:
				return nil
			case !now.LastHeartbeat.Equal(row.LastHeartbeat) || deref(now.Incarnation) != deref(row.Incarnation):
				return r.inUse(ctx)
			}
		}
	}
}

// inUse is the error of New for a replica id that another live process holds: it names the
// process, and until when its heartbeat keeps the id at least.
func (r *Runtime) inUse(ctx context.Context) error {
	holder, until := "another process", "its heartbeat stops"
	if row, err := r.store.ReplicaRow(ctx, r.cfg.ReplicaID); err == nil && row != nil {
		holder = cmp.Or(deref(row.Holder), holder)
		until = row.Until.UTC().Format(time.RFC3339)
	}
	return fmt.Errorf("%w: ReplicaID %q is held by %s, alive, whose heartbeat keeps it until at least %s: give each process "+
		"a ReplicaID of its own (or leave it empty for a unique one), or stop that process first",
		ErrReplicaIDInUse, r.cfg.ReplicaID, holder, until)
}

// closeConn closes conn, if not nil, within a second.
func closeConn(conn *pgx.Conn) {
	if conn == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = conn.Close(ctx)
}
