package replication

import (
	"fmt"

	"github.com/rs/zerolog"
)

// raftLogger passes raft's log lines to zerolog. raft logs elections, term
// changes and conf changes at info, which is what an operator wants to see
// of a replica; its debug lines come with every message.
type raftLogger struct {
	log zerolog.Logger
}

func (l raftLogger) Debug(v ...any)                 { logLine(l.log.Debug(), v) }
func (l raftLogger) Debugf(format string, v ...any) { l.log.Debug().Msgf(format, v...) }
func (l raftLogger) Info(v ...any)                  { logLine(l.log.Info(), v) }
func (l raftLogger) Infof(format string, v ...any)  { l.log.Info().Msgf(format, v...) }
func (l raftLogger) Warning(v ...any)               { logLine(l.log.Warn(), v) }
func (l raftLogger) Warningf(format string, v ...any) {
	l.log.Warn().Msgf(format, v...)
}
func (l raftLogger) Error(v ...any)                 { logLine(l.log.Error(), v) }
func (l raftLogger) Errorf(format string, v ...any) { l.log.Error().Msgf(format, v...) }

// Fatal panics rather than exit: raft calls it where it cannot go on, and a
// panic lets the replica's owner (the shard actor's supervisor) restart the
// replica instead of taking the whole broker down.
func (l raftLogger) Fatal(v ...any)                 { l.Panic(v...) }
func (l raftLogger) Fatalf(format string, v ...any) { l.Panicf(format, v...) }

func (l raftLogger) Panic(v ...any) {
	s := fmt.Sprint(v...)
	l.log.Error().Msg(s)
	panic(s)
}

func (l raftLogger) Panicf(format string, v ...any) {
	s := fmt.Sprintf(format, v...)
	l.log.Error().Msg(s)
	panic(s)
}

// logLine formats v only when e's level is enabled: raft's debug lines are
// frequent, and most of the time nobody reads them.
func logLine(e *zerolog.Event, v []any) {
	if e.Enabled() {
		e.Msg(fmt.Sprint(v...))
	}
}
