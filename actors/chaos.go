package actors

import (
	"errors"
	"fmt"
	"math/rand/v2"

	"github.com/asynkron/protoactor-go/actor"
)

// Chaos: crashing or stopping live actors on request, to prove that their
// supervisors and their peers recover. Kill chooses the actors from a
// Directory; whether chaos is allowed at all is the caller's to decide (the
// broker refuses without --chaos).

// ChaosPanic makes the actor that receives it panic inside its own Receive,
// so its supervisor handles a real crash. It is control traffic: it reaches
// an actor whose queue is full or held. Only Kill sends it.
type ChaosPanic struct {
	ControlMessage
	Reason string
}

// KillRequest asks Kill to crash or stop actors: the one at Path, or Count
// of Kind's at random. It is also the body of POST /debug/chaos/kill.
type KillRequest struct {
	Path  string `json:"path,omitempty"`
	Kind  string `json:"kind,omitempty"`
	Count int    `json:"count,omitempty"` // with Kind: how many, at random (default 1)
	Mode  string `json:"mode,omitempty"`  // panic (default) or stop
}

// KillResult names what Kill killed, and how.
type KillResult struct {
	Killed []string `json:"killed"`
	Mode   string   `json:"mode"`
}

// Errors of Kill. Their text begins "broker: " because a broker is what
// refuses: the broker returns these same values, the admin route strips
// the prefix and answers ErrNoSuchActor with 404 and the others with 400,
// and felix chaos prints what remains.
var (
	// ErrNoSuchActor is returned when no live actor has the requested path.
	ErrNoSuchActor = errors.New("broker: no such actor")
	// ErrNotKillable is returned when the requested path is an actor of a
	// kind chaos may not kill (a supervisor, a session).
	ErrNotKillable = errors.New("broker: supervisors cannot be killed (a restart stops every child); kill their children")
	// ErrBadKillRequest is returned when a KillRequest names both a path
	// and a kind, or neither, or a kind or mode that does not exist.
	ErrBadKillRequest = errors.New("broker: bad kill request")
)

// killableKinds are the data-path kinds chaos may kill. Supervisors are
// not among them: a supervisor's restart would stop every child.
var killableKinds = map[string]Kind{
	string(KindShard): KindShard, string(KindFeeder): KindFeeder,
	string(KindLane): KindLane, string(KindConnWriter): KindConnWriter,
	string(KindGroup): KindGroup,
}

// Kill crashes (mode panic: the actor panics inside its own Receive and its
// supervisor restarts it) or stops (mode stop: removed for good) the actors
// req chooses from dir: the one at req.Path, or req.Count (at least one) of
// kind req.Kind at random, fewer when fewer are live. It returns before
// they have crashed or stopped. A request it refuses kills nothing.
func Kill(root *actor.RootContext, dir *Directory, req KillRequest) (KillResult, error) {
	mode := req.Mode
	if mode == "" {
		mode = "panic"
	}
	if mode != "panic" && mode != "stop" {
		return KillResult{}, fmt.Errorf("%w: mode %q (want panic or stop)", ErrBadKillRequest, req.Mode)
	}
	targets, err := killTargets(dir, req)
	if err != nil {
		return KillResult{}, err
	}
	res := KillResult{Mode: mode, Killed: []string{}}
	for _, e := range targets {
		if mode == "panic" {
			root.Send(e.PID, &ChaosPanic{Reason: "killed by chaos request"})
		} else {
			root.Stop(e.PID)
		}
		res.Killed = append(res.Killed, e.PID.Id)
	}
	return res, nil
}

// pathOnlyKinds may be killed by path only, never picked at random: the
// registry has no children, so its restart stops nothing; stopping it is
// losing a core actor, which stops the whole broker (its package doc).
var pathOnlyKinds = map[Kind]bool{KindRegistry: true}

// killTargets are the live entries req chooses.
func killTargets(dir *Directory, req KillRequest) ([]*Entry, error) {
	switch {
	case req.Path != "" && req.Kind != "":
		return nil, fmt.Errorf("%w: give a path or a kind, not both", ErrBadKillRequest)
	case req.Path != "":
		e, ok := dir.Lookup(req.Path)
		if !ok {
			return nil, fmt.Errorf("%w: %q (list them with felix tree)", ErrNoSuchActor, req.Path)
		}
		if _, ok := killableKinds[string(e.Kind)]; !ok && !pathOnlyKinds[e.Kind] {
			return nil, ErrNotKillable
		}
		return []*Entry{e}, nil
	case req.Kind != "":
		kind, ok := killableKinds[req.Kind]
		if !ok {
			return nil, fmt.Errorf("%w: kind %q (want shard, feeder, lane, connection_writer or group)", ErrBadKillRequest, req.Kind)
		}
		var all []*Entry
		for _, e := range dir.List() {
			if e.Kind == kind {
				all = append(all, e)
			}
		}
		rand.Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })
		return all[:min(len(all), max(1, req.Count))], nil
	default:
		return nil, fmt.Errorf("%w: give a path or a kind", ErrBadKillRequest)
	}
}
