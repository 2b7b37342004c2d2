package persistence

import (
	"context"
	"fmt"
	"time"
)

// AcquireLease takes or renews the lease name for holder until ttl from now, and reports whether
// holder has it. A lease held by another holder is taken over only once it has expired. It is a
// single statement that waits for no lock held beyond another AcquireLease, so a frozen holder
// delays the others by ttl at most.
func (s *Store) AcquireLease(ctx context.Context, name, holder string, ttl time.Duration) (bool, error) {
	var got []string
	err := s.db.NewRaw(s.q(`WITH t AS (SELECT coalesce(?::timestamptz, now()) AS now)
		INSERT INTO {s}.leases AS l (name, holder, expires_at)
		SELECT ?, ?, t.now + ? * interval '1 millisecond' FROM t
		ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, expires_at = excluded.expires_at
		WHERE l.holder = excluded.holder OR l.expires_at <= (SELECT now FROM t)
		RETURNING holder`), s.clock.NowOrNil(), name, holder, ttl.Milliseconds()).Scan(ctx, &got)
	if err != nil && !isNoRows(err) {
		return false, fmt.Errorf("taking the lease %s: %w", name, err)
	}
	return len(got) == 1, nil
}

// ReleaseLease gives up holder's lease name, if it holds it, so that another holder can take it
// at once.
func (s *Store) ReleaseLease(ctx context.Context, name, holder string) error {
	_, err := s.db.NewRaw(s.q("DELETE FROM {s}.leases WHERE name = ? AND holder = ?"), name, holder).Exec(ctx)
	if err != nil {
		return fmt.Errorf("releasing the lease %s: %w", name, err)
	}
	return nil
}
