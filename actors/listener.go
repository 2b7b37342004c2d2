package actors

import (
	"context"
	"log/slog"
	"strings"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/jackc/pgx/v5"

	"github.com/journey-go/journey/persistence"
)

// ListenerConfig configures the listener of one replica.
type ListenerConfig struct {
	// First, if set, is the connection of the first LISTEN; Connect opens the later ones. The
	// listener closes both.
	First *pgx.Conn
	// Connect opens the connection held for LISTEN alone.
	Connect func(ctx context.Context) (*pgx.Conn, error)
	Channel string
	// OnWork is called when work may be available.
	OnWork func()
	// OnPromote is called when work may be due behind a concurrency key or a limit; nil calls
	// OnWork.
	OnPromote func()
	// OnExecution is called when a value or a node's outcome changed in an execution, with the
	// execution's revision after the change, or -1 if the notification did not say.
	OnExecution func(id string, revision int64)
	// OnCancel, if set, is called when an execution was canceled.
	OnCancel func(id string)
	// OnGraphs, if set, is called when a graph version was paused or resumed.
	OnGraphs func()
	// OnNotice is called when a lifecycle notification was claimed.
	OnNotice func()
	// OnRequest, if set, is called when an operator's request was recorded.
	OnRequest func()
	// OnReconnect is called after the connection was re-established: notifications may have been
	// missed, so everyone should look again.
	OnReconnect func()
	// Listening, if set, is closed once the first LISTEN has succeeded.
	Listening chan struct{}
	// Store, if set, hears of every notification (persistence.Store.Heard): a write in an
	// application's transaction waits for its commit, which one announces.
	Store  *persistence.Store
	Logger *slog.Logger
}

// listener holds the LISTEN connection in a goroutine of its own, and fans notifications out.
type listener struct {
	cfg    ListenerConfig
	logger *slog.Logger
	cancel context.CancelFunc
	done   chan struct{}
	// listened is set once a LISTEN has succeeded: a later one is a reconnection.
	listened bool
}

// NewListener returns the props of a listener actor.
func NewListener(cfg ListenerConfig) *actor.Props {
	return actor.PropsFromProducer(func() actor.Actor {
		return &listener{cfg: cfg, logger: cfg.Logger.With("service", "listener")}
	})
}

// Receive implements actor.Actor.
func (l *listener) Receive(ctx actor.Context) {
	switch ctx.Message().(type) {
	case *actor.Started:
		lctx, cancel := context.WithCancel(context.Background())
		l.cancel, l.done = cancel, make(chan struct{})
		go l.loop(lctx)
	case *actor.Stopping:
		l.cancel()
		<-l.done
	}
}

func (l *listener) loop(ctx context.Context) {
	defer close(l.done)
	backoff := 50 * time.Millisecond
	for ctx.Err() == nil {
		err := l.listen(ctx)
		if ctx.Err() != nil {
			return
		}
		l.logger.Warn("LISTEN connection lost; reconnecting", "error", err, "retry_in", backoff)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 5*time.Second)
	}
}

func (l *listener) listen(ctx context.Context) error {
	conn := l.cfg.First
	l.cfg.First = nil
	if conn == nil {
		var err error
		if conn, err = l.cfg.Connect(ctx); err != nil {
			return err
		}
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = conn.Close(cctx)
	}()
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{l.cfg.Channel}.Sanitize()); err != nil {
		return err
	}
	switch {
	case l.listened && l.cfg.OnReconnect != nil:
		l.cfg.OnReconnect()
	case !l.listened && l.cfg.Listening != nil:
		close(l.cfg.Listening)
	}
	l.listened = true
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		if l.cfg.Store != nil {
			l.cfg.Store.Heard() // a commit of an application's transaction, maybe, that a write waits for
		}
		switch {
		case n.Payload == persistence.PayloadWork:
			l.cfg.OnWork()
		case n.Payload == persistence.PayloadPromote && l.cfg.OnPromote != nil:
			l.cfg.OnPromote()
		case n.Payload == persistence.PayloadPromote:
			l.cfg.OnWork()
		case n.Payload == persistence.PayloadNotice:
			l.cfg.OnNotice()
		case n.Payload == persistence.PayloadGraphs && l.cfg.OnGraphs != nil:
			l.cfg.OnGraphs()
		case n.Payload == persistence.PayloadRequest && l.cfg.OnRequest != nil:
			l.cfg.OnRequest()
		case strings.HasPrefix(n.Payload, persistence.PayloadCancel) && l.cfg.OnCancel != nil:
			l.cfg.OnCancel(strings.TrimPrefix(n.Payload, persistence.PayloadCancel))
		case strings.HasPrefix(n.Payload, persistence.PayloadExecution):
			for _, item := range strings.Split(strings.TrimPrefix(n.Payload, persistence.PayloadExecution), ",") {
				id, rev := persistence.ParseChange(item)
				l.cfg.OnExecution(id, rev)
			}
		}
	}
}
