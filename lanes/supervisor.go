package lanes

import (
	"fmt"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/getfelix/felix-go/actors"
)

// The lanes supervisor (felix/lanes) owns the lane set: it spawns the lanes
// when it starts, replaces a lane that stopped for good (past its restart
// limit, or stopped by an operator) under a new name, and is the only
// place lanes are created. Anyone may ask it for a lane (GetLane); a
// feeder keeps the ref it was given, and ends its subscription when that
// lane is gone.

// GetLane asks for lane Index; the supervisor responds with *LaneRef, the
// lane serving now.
type GetLane struct {
	actors.ControlMessage
	Index int
}

// LaneSupervisorConfig configures the lanes supervisor.
type LaneSupervisorConfig struct {
	// Lanes is how many lanes there are (subscriber_writer_lanes).
	Lanes int
	Lane  LaneConfig
	// OnSpawned, when set, is told of each lane spawned (the directory).
	OnSpawned func(ref LaneRef)
}

// laneSupervisor is the lane set's owner. Only Receive touches it.
type laneSupervisor struct {
	cfg   LaneSupervisorConfig
	lanes []LaneRef
	// gen counts replacements, naming them lane-<i>.<gen>: a stopped
	// lane's name may not be free in protoactor's registry yet.
	gen      int
	stopping bool
}

// LaneSupervisorProps returns the props of the lanes supervisor, a
// top-level actor.
func LaneSupervisorProps(cfg LaneSupervisorConfig, created func(*actors.Mailbox)) *actor.Props {
	// One instance across restarts: a restart stops no lane it can still
	// see, and spawns only the missing ones.
	s := &laneSupervisor{cfg: cfg, lanes: make([]LaneRef, cfg.Lanes)}
	return actors.SupervisorPropsFor(func() actor.Actor { return s }, created)
}

func (s *laneSupervisor) Receive(ctx actor.Context) {
	switch msg := ctx.Message().(type) {
	case *actor.Started:
		s.handleStarted(ctx)
	case *actor.Stopping, *actor.Restarting:
		// Its lanes stop with it; a restart spawns them again at Started.
		s.stopping = true
	case *GetLane:
		s.handleGetLane(ctx, msg)
	case *actor.Terminated:
		s.handleTerminated(ctx, msg)
	}
}

// handleStarted spawns every lane not serving.
func (s *laneSupervisor) handleStarted(ctx actor.Context) {
	s.stopping = false
	for i := range s.lanes {
		s.ensure(ctx, i)
	}
}

func (s *laneSupervisor) handleGetLane(ctx actor.Context, msg *GetLane) {
	if msg.Index < 0 || msg.Index >= len(s.lanes) {
		ctx.Respond(&LaneRef{Index: msg.Index, Err: fmt.Errorf("lanes: no lane %d of %d", msg.Index, len(s.lanes))})
		return
	}
	// The lane may have stopped with its Terminated still on the way.
	s.ensure(ctx, msg.Index)
	ref := s.lanes[msg.Index]
	ctx.Respond(&ref)
}

// handleTerminated replaces the lane that stopped, unless it was replaced
// already or the supervisor is stopping with its lanes.
func (s *laneSupervisor) handleTerminated(ctx actor.Context, msg *actor.Terminated) {
	for i, ref := range s.lanes {
		if ref.PID != nil && ref.PID.Equal(msg.Who) && !s.stopping {
			s.ensure(ctx, i)
			return
		}
	}
}

// ensure spawns lane i when it has none, or when its mailbox closed.
func (s *laneSupervisor) ensure(ctx actor.Context, i int) {
	old := s.lanes[i]
	if old.Mailbox != nil && !old.Mailbox.IsClosed() {
		return
	}
	name := fmt.Sprintf("lane-%d", i)
	if old.PID != nil || old.Err != nil {
		s.gen++
		name = fmt.Sprintf("lane-%d.%d", i, s.gen)
	}
	ref := LaneRef{Index: i}
	props := LaneProps(i, s.cfg.Lane, func(m *actors.Mailbox) { ref.Mailbox = m })
	pid, err := ctx.SpawnNamed(props, name)
	if err != nil {
		s.lanes[i] = LaneRef{Index: i, Err: fmt.Errorf("lanes: spawn %s: %w", name, err)}
		s.cfg.Lane.Log.Error().Err(err).Int("lane", i).Msg("lane not spawned")
		return
	}
	ref.PID = pid
	ctx.Watch(pid)
	s.lanes[i] = ref
	if s.cfg.OnSpawned != nil {
		s.cfg.OnSpawned(ref)
	}
	if old.PID != nil {
		s.cfg.Lane.Log.Warn().Int("lane", i).Str("actor", pid.Id).Msg("lane had stopped; replaced it")
	}
}
