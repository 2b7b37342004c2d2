package migrations

import (
	"context"
	"log/slog"

	"github.com/uptrace/bun"
)

// MigrateThrough applies the embedded migrations numbered up to last, and no others: the schema
// of the release that had no later ones.
func MigrateThrough(ctx context.Context, db *bun.DB, schema, last string, logger *slog.Logger) ([]string, error) {
	sources, err := load(embedded)
	if err != nil {
		return nil, err
	}
	var through []source
	for _, s := range sources {
		if s.number <= last {
			through = append(through, s)
		}
	}
	return run(ctx, db, schema, logger, through)
}
