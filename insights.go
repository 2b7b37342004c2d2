package journey

import (
	"context"
	"time"

	"github.com/journey-go/journey/persistence"
)

// Scope selects the executions that Insights reads.
type Scope string

// The scopes of Insights.
const (
	ScopeActive   Scope = persistence.ScopeActive // not archived: the default
	ScopeArchived Scope = persistence.ScopeArchived
	ScopeAll      Scope = persistence.ScopeAll
)

// InsightsOptions select what Insights reads. The zero value reads the active executions of every
// version started in the last 24 hours.
type InsightsOptions struct {
	// Version, if set, keeps the executions of that version. Default: all versions.
	Version string
	// Since is the window: the executions started since this long ago. Default 24 hours; 100
	// years at most.
	Since time.Duration
	// Scope: ScopeActive (default), ScopeArchived or ScopeAll.
	Scope Scope
	// IdleAfter: an execution that has not failed for good ends at its last value once it has
	// had no write for this long (NodeInsight.EndsHere). Default 24 hours.
	IdleAfter time.Duration
	// Bucket is the series' bucket, a whole number of minutes. Default: chosen from Since, 48
	// buckets at most. The series holds 10,000 buckets at most.
	Bucket time.Duration
}

// Insights says where the executions of a graph go and where they stop, and how its work went over
// time: per node, in graph order, the executions that reached it and how long they took, those
// that ended there, those that failed for good there (NodeInsight.FailedForGood: the node's last
// attempt failed or was abandoned, with no retry left), and its attempts, failures and run times;
// and a series of executions started, attempts finished and executions failed for good per
// bucket. The nodes are those of the newest version recorded (or of opts.Version). Attempts that
// retention deleted (Config.Retention) are not counted.
type Insights = persistence.Insights

// NodeInsight is a node's part of Insights.
type NodeInsight = persistence.NodeInsight

// InsightPoint is one bucket of the series of Insights.
type InsightPoint = persistence.InsightPoint

// Insights reads the insights of the graph named graphName (see the type Insights). A graph that
// no replica has recorded is ErrUnknownGraph; a negative window, idle time or bucket, or one
// past the limits of InsightsOptions, is an error that says so, and changes nothing.
func (r *Runtime) Insights(ctx context.Context, graphName string, opts InsightsOptions) (*Insights, error) {
	if err := r.check(); err != nil {
		return nil, err
	}
	return r.store.Insights(ctx, persistence.InsightsQuery{Graph: graphName, Version: opts.Version, Since: opts.Since,
		Scope: string(opts.Scope), IdleAfter: opts.IdleAfter, Bucket: opts.Bucket}.WithDefaults())
}
