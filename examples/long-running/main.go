// Command long-running shows the heartbeat of a computation that takes a while. Its compute node
// works for about three seconds; meanwhile the computation's watchdog extends its heartbeat
// deadline every 200ms (±20%), and the main goroutine polls Computations and prints each
// heartbeat it sees. Had the process died, the sweeper (every 100ms here) would have abandoned
// the attempt 600ms after its last heartbeat and retried it, on this replica or another.
//
//	go run ./examples/long-running
//
// It uses $DATABASE_URL when it is set. Otherwise it starts a throwaway PostgreSQL cluster from
// the local server binaries (apt-get install postgresql) and removes it when it ends.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/journey-go/journey"
	"github.com/journey-go/journey/devpg"
	"github.com/journey-go/journey/graph"
)

const (
	workTime     = 3 * time.Second
	workTick     = 100 * time.Millisecond
	pollInterval = 250 * time.Millisecond
)

// report is a compute node that works for workTime, checking ctx at every tick so that it stops
// at once if it loses its claim, is abandoned, or the runtime stops.
var report = graph.MustNew("report", "v1", []graph.Node{
	graph.Input("rows"),
	graph.Compute("total", graph.Needs("rows"),
		func(ctx context.Context, in graph.Values) (any, error) {
			ticker := time.NewTicker(workTick)
			defer ticker.Stop()
			rows := in.Int("rows")
			var total int64
			for i := int64(0); i < int64(workTime/workTick); i++ {
				select {
				case <-ctx.Done():
					return nil, ctx.Err()
				case <-ticker.C:
					total += rows
				}
			}
			return total, nil
		},
		graph.Heartbeat(200*time.Millisecond, 600*time.Millisecond),
		graph.AbandonAfter(30*time.Second)),
})

func main() {
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	if err := run(logger); err != nil {
		fmt.Fprintf(os.Stderr, "long-running: %v\n", err)
		os.Exit(1)
	}
}

func run(logger *slog.Logger) (err error) {
	ctx, stopSignals := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stopSignals()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()

	url, stopDB, err := devpg.URLOrStart(ctx, logger)
	if err != nil {
		return fmt.Errorf("getting a database (set DATABASE_URL, or install the PostgreSQL server binaries): %w", err)
	}
	defer stopDB() // runs after rt.Stop below

	rt, err := journey.New(ctx, journey.Config{
		DatabaseURL:   url,
		Graphs:        []*graph.Graph{report},
		SweepInterval: 100 * time.Millisecond,
		Logger:        logger,
	})
	if err != nil {
		return err
	}
	defer func() {
		sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer scancel()
		if serr := rt.Stop(sctx); serr != nil && err == nil {
			err = fmt.Errorf("stopping the runtime: %w", serr)
		}
	}()

	ex, err := rt.Start(ctx, report)
	if err != nil {
		return fmt.Errorf("starting an execution: %w", err)
	}
	fmt.Println("execution:", ex.ID)
	if _, err := rt.Set(ctx, ex.ID, "rows", 7); err != nil {
		return fmt.Errorf("setting rows: %w", err)
	}
	began := time.Now()
	fmt.Printf("set rows; total takes about %v to compute\n", workTime)

	type result struct {
		v   graph.Value
		err error
	}
	done := make(chan result, 1)
	go func() {
		v, err := rt.Get(ctx, ex.ID, "total", journey.WaitAny())
		done <- result{v, err}
	}()

	seen := map[time.Time]bool{}
	poll := time.NewTicker(pollInterval)
	defer poll.Stop()
	for {
		select {
		case r := <-done:
			if r.err != nil {
				return fmt.Errorf("waiting for total: %w", r.err)
			}
			comps, err := rt.Computations(ctx, ex.ID)
			if err != nil {
				return fmt.Errorf("reading computations: %w", err)
			}
			var attempts []journey.Computation
			for _, c := range comps {
				if c.Node == "total" {
					attempts = append(attempts, c)
				}
			}
			fmt.Printf("total = %s (revision %d) after %v\n", r.v.Raw, r.v.Revision, time.Since(began).Round(time.Millisecond))
			fmt.Printf("finished in %d attempt(s); last state %s\n", len(attempts), attempts[len(attempts)-1].State)
			fmt.Printf("distinct heartbeats seen: %d\n", len(seen))
			return nil
		case <-poll.C:
			comps, err := rt.Computations(ctx, ex.ID)
			if err != nil {
				return fmt.Errorf("reading computations: %w", err)
			}
			for _, c := range comps {
				if c.State != journey.StateRunning || c.LastHeartbeatAt == nil || seen[*c.LastHeartbeatAt] {
					continue
				}
				seen[*c.LastHeartbeatAt] = true
				what := "heartbeat"
				if c.ClaimedAt != nil && c.ClaimedAt.Equal(*c.LastHeartbeatAt) {
					what = "claimed  "
				}
				fmt.Printf("  %s at %s  attempt %d  heartbeat deadline %s  deadline %s\n", what,
					c.LastHeartbeatAt.Format("15:04:05.000"), c.Attempt,
					fmtTime(c.HeartbeatDeadline), fmtTime(c.Deadline))
			}
		}
	}
}

func fmtTime(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.Format("15:04:05.000")
}
