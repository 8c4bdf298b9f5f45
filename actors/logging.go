package actors

import (
	"context"
	"log/slog"
	"strings"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"
)

// LoggerFactory routes protoactor's slog output into zerolog, so the broker
// writes one log stream in one format. protoactor logs at Info by default
// ("[ACTOR] Recovering" and friends); its records arrive with lib=Proto.Actor.
func LoggerFactory(zl zerolog.Logger) actor.ConfigOption {
	return actor.WithLoggerFactory(func(system *actor.ActorSystem) *slog.Logger {
		return slog.New(renameMessage{zerolog.NewSlogHandler(zl)}).With("lib", "protoactor", "system", system.ID)
	})
}

// renameMessage renames a slog attribute called "message", which collides
// with zerolog's own message field and would print two "message" keys
// (protoactor's dead-letter log uses one).
type renameMessage struct{ slog.Handler }

func (h renameMessage) Handle(ctx context.Context, r slog.Record) error {
	clash := false
	r.Attrs(func(a slog.Attr) bool {
		clash = a.Key == "message"
		return !clash
	})
	if !clash {
		return h.Handler.Handle(ctx, r)
	}
	nr := slog.NewRecord(r.Time, r.Level, r.Message, r.PC)
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "message" {
			a.Key = "msg_value"
		}
		nr.AddAttrs(a)
		return true
	})
	return h.Handler.Handle(ctx, nr)
}

func (h renameMessage) WithAttrs(attrs []slog.Attr) slog.Handler {
	return renameMessage{h.Handler.WithAttrs(attrs)}
}

func (h renameMessage) WithGroup(name string) slog.Handler {
	return renameMessage{h.Handler.WithGroup(name)}
}

// KindOf infers an actor's kind from its path: children of the streams,
// subscribers, lanes and connections supervisors are shards, feeders, lanes
// and connection writers.
func KindOf(pid *actor.PID) Kind {
	if pid == nil {
		return ""
	}
	parts := strings.Split(pid.Id, "/")
	if len(parts) == 2 && parts[1] == "registry" {
		return KindRegistry
	}
	if len(parts) < 3 {
		return KindSupervisor
	}
	switch parts[len(parts)-2] {
	case "streams":
		return KindShard
	case "subscribers":
		return KindFeeder
	case "lanes":
		return KindLane
	case "connections":
		return KindConnWriter
	case "groups":
		return KindGroup
	}
	return ""
}

// WatchRestarts logs every supervision decision and reports it to onEvent
// (a metric), so no restart goes unseen (ARCHITECTURE.md, invariant 6). It returns a function
// that stops watching.
func WatchRestarts(system *actor.ActorSystem, zl zerolog.Logger, onEvent func(ev *actor.SupervisorEvent, kind Kind)) func() {
	sub := system.EventStream.Subscribe(func(evt any) {
		ev, ok := evt.(*actor.SupervisorEvent)
		if !ok {
			return
		}
		kind := KindOf(ev.Child)
		zl.Warn().Str("actor", ev.Child.Id).Str("kind", string(kind)).
			Str("directive", ev.Directive.String()).Interface("reason", ev.Reason).
			Msg("actor failed; supervisor applied directive")
		if onEvent != nil {
			onEvent(ev, kind)
		}
	})
	return func() { system.EventStream.Unsubscribe(sub) }
}
