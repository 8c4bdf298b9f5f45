package broker

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"

	"github.com/getfelix/felix-go/actors"
)

// ActorInfo is one node of the supervision tree as /debug/actors serves it.
type ActorInfo struct {
	Path         string            `json:"path"`
	Kind         string            `json:"kind"`
	Parent       string            `json:"parent,omitempty"`
	Labels       map[string]string `json:"labels,omitempty"`
	MailboxDepth int               `json:"mailbox_depth"`
	MailboxBytes int64             `json:"mailbox_bytes"`
	PeakBytes    int64             `json:"mailbox_peak_bytes"`
	Capacity     int               `json:"capacity"`
	MaxBytes     int64             `json:"max_bytes,omitempty"`
	Policy       string            `json:"policy"`
	Dropped      uint64            `json:"dropped"`
	ByteDropped  uint64            `json:"byte_dropped"`
	Evicted      uint64            `json:"evicted"`
	Restarts     int64             `json:"restarts"`
	LastFailure  *actors.Failure   `json:"last_failure,omitempty"`
}

// Actors lists the live supervision tree, parents before children. An
// actor is listed from the broker's directory, not asked, so one stuck in
// Receive still shows (with its growing mailbox).
func (b *Broker) Actors() []ActorInfo {
	entries := b.dir.List()
	out := make([]ActorInfo, 0, len(entries))
	for _, e := range entries {
		info := ActorInfo{
			Path:        e.PID.Id,
			Kind:        string(e.Kind),
			Parent:      actors.Parent(e.PID.Id),
			Labels:      e.Labels,
			Restarts:    e.Restarts(),
			LastFailure: e.LastFailure(),
		}
		if m := e.Mailbox; m != nil {
			cfg := m.Config()
			info.MailboxDepth = m.UserMessageCount()
			info.MailboxBytes = m.Bytes()
			info.PeakBytes = m.PeakBytes()
			info.Capacity = cfg.Capacity
			info.MaxBytes = cfg.MaxBytes
			info.Policy = cfg.Policy.String()
			info.Dropped = m.Dropped()
			info.ByteDropped = m.ByteDropped()
			info.Evicted = m.Evicted()
		}
		out = append(out, info)
	}
	return out
}

// KillRequest asks the chaos route to crash or stop actors.
type KillRequest struct {
	Path  string `json:"path,omitempty"`
	Kind  string `json:"kind,omitempty"`
	Count int    `json:"count,omitempty"` // with Kind: how many, at random (default 1)
	Mode  string `json:"mode,omitempty"`  // panic (default) or stop
}

// KillResult names what was killed.
type KillResult struct {
	Killed []string `json:"killed"`
	Mode   string   `json:"mode"`
}

// Errors of the chaos routes.
var (
	ErrChaosOff       = errors.New("broker: chaos is off; start the broker with --chaos to enable the chaos routes")
	ErrNoSuchActor    = errors.New("broker: no such actor")
	ErrNotKillable    = errors.New("broker: supervisors cannot be killed (a restart stops every child); kill their children")
	ErrBadKillRequest = errors.New("broker: bad kill request")
)

// killableKinds are the data-path kinds chaos may crash.
var killableKinds = map[string]actors.Kind{
	string(actors.KindShard): actors.KindShard, string(actors.KindFeeder): actors.KindFeeder,
	string(actors.KindLane): actors.KindLane, string(actors.KindConnWriter): actors.KindConnWriter,
	string(actors.KindGroup): actors.KindGroup,
}

// Kill crashes (mode panic: the actor panics inside its own Receive and its
// supervisor restarts it) or stops (mode stop: removed for good) actors
// chosen by path, or count of them at random by kind. It refuses unless the
// broker was started with chaos enabled.
func (b *Broker) Kill(req KillRequest) (KillResult, error) {
	if !b.cfg.Chaos {
		return KillResult{}, ErrChaosOff
	}
	mode := req.Mode
	if mode == "" {
		mode = "panic"
	}
	if mode != "panic" && mode != "stop" {
		return KillResult{}, fmt.Errorf("%w: mode %q (want panic or stop)", ErrBadKillRequest, req.Mode)
	}
	var targets []*actors.Entry
	switch {
	case req.Path != "" && req.Kind != "":
		return KillResult{}, fmt.Errorf("%w: give a path or a kind, not both", ErrBadKillRequest)
	case req.Path != "":
		e, ok := b.dir.Lookup(req.Path)
		if !ok {
			return KillResult{}, fmt.Errorf("%w: %q (list them with felix tree)", ErrNoSuchActor, req.Path)
		}
		if _, ok := killableKinds[string(e.Kind)]; !ok {
			return KillResult{}, ErrNotKillable
		}
		targets = []*actors.Entry{e}
	case req.Kind != "":
		kind, ok := killableKinds[req.Kind]
		if !ok {
			return KillResult{}, fmt.Errorf("%w: kind %q (want shard, feeder, lane, connection_writer or group)", ErrBadKillRequest, req.Kind)
		}
		var all []*actors.Entry
		for _, e := range b.dir.List() {
			if e.Kind == kind {
				all = append(all, e)
			}
		}
		rand.Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })
		targets = all[:min(len(all), max(1, req.Count))]
	default:
		return KillResult{}, fmt.Errorf("%w: give a path or a kind", ErrBadKillRequest)
	}
	res := KillResult{Mode: mode, Killed: []string{}}
	for _, e := range targets {
		if mode == "panic" {
			b.system.Root.Send(e.PID, &actors.ChaosPanic{Reason: "killed by chaos request"})
		} else {
			b.system.Root.Stop(e.PID)
		}
		res.Killed = append(res.Killed, e.PID.Id)
	}
	b.log.Warn().Strs("actors", res.Killed).Str("mode", mode).Msg("chaos kill")
	return res, nil
}

func (b *Broker) handleActors(w http.ResponseWriter, r *http.Request) {
	list := b.Actors()
	if kind := r.URL.Query().Get("kind"); kind != "" {
		filtered := list[:0]
		for _, a := range list {
			if a.Kind == kind {
				filtered = append(filtered, a)
			}
		}
		list = filtered
	}
	writeJSON(w, http.StatusOK, map[string]any{"actors": list})
}

func (b *Broker) handleKill(w http.ResponseWriter, r *http.Request) {
	var req KillRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<16)).Decode(&req); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "body must be JSON {path|kind, count, mode}: " + err.Error()})
		return
	}
	res, err := b.Kill(req)
	if err != nil {
		status := http.StatusBadRequest
		switch {
		case errors.Is(err, ErrChaosOff):
			status = http.StatusForbidden
		case errors.Is(err, ErrNoSuchActor):
			status = http.StatusNotFound
		}
		writeJSON(w, status, map[string]string{"error": strings.TrimPrefix(err.Error(), "broker: ")})
		return
	}
	writeJSON(w, http.StatusOK, res)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
