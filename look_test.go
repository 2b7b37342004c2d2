package journey_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/journey-go/journey"
	"github.com/journey-go/journey/graph"
	"github.com/journey-go/journey/internal/pgtest"
)

// A Get that waits looks first, even right after its replica's own Set to the execution: a value
// that another replica wrote, whose NOTIFY this replica never heard (PollOnly hears none; a writer
// that dies between its COMMIT and its notifications sends none), is returned at once, not a
// PollInterval later.
func TestWaitingGetLooksFirst(t *testing.T) {
	t.Parallel()
	for _, pollOnly := range []bool{true, false} {
		t.Run(map[bool]string{true: "poll only", false: "listening"}[pollOnly], func(t *testing.T) {
			t.Parallel()
			g := graph.MustNew("first-look", "v1", []graph.Node{graph.Input("x"), graph.Input("w")})
			cfg := testConfig(t, g)
			cfg.PollOnly, cfg.PollInterval = pollOnly, time.Minute
			rt := newRuntime(t, cfg)
			ctx := testCtx(t)
			ex, err := rt.Start(ctx, g)
			require.NoError(t, err)
			rev, err := rt.Set(ctx, ex.ID, "x", 1)
			require.NoError(t, err)
			// Another writer's change, with no notification.
			db := pgtest.DB(t)
			_, err = db.ExecContext(ctx, `INSERT INTO `+pgx.Identifier{cfg.Schema, "nodes"}.Sanitize()+`
					(lane, execution_id, node, graph_key, rev, changed_at, value, value_rev, set_at, hseq)
				SELECT lane, execution_id, 'w', graph_key, $2::bigint + 1, now(), '"from elsewhere"', $2::bigint + 1, now(), hseq + 1
				FROM `+pgx.Identifier{cfg.Schema, "nodes"}.Sanitize()+` WHERE execution_id = $1 AND node = 'x'`, ex.ID, rev)
			require.NoError(t, err)

			gctx, cancel := context.WithTimeout(ctx, 10*time.Second) // far below the poll
			defer cancel()
			v, err := rt.Get(gctx, ex.ID, "w", journey.WaitAny())
			require.NoError(t, err)
			require.Equal(t, "from elsewhere", v.String())
			require.Equal(t, rev+1, v.Revision)
		})
	}
}
