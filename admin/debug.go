package admin

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"

	"github.com/getfelix/felix-go/actors"
)

// The tree and chaos routes: GET /debug/actors (node.view), POST
// /debug/chaos/kill and POST /debug/chaos/disk (node.manage, and the
// broker started with --chaos).

// DiskRequest asks POST /debug/chaos/disk to make the durable logs' disk
// fail (Fail true) or work again.
type DiskRequest struct {
	Fail bool `json:"fail"`
}

// ErrChaosOff is returned by Member.Kill and Member.FailDisk when the
// broker was started without --chaos; the chaos routes answer it with 403.
// Its text begins "broker: " because it is the broker that refuses (the
// broker's own API returns this same value, broker.ErrChaosOff). Kill's
// other errors are actors.Kill's: ErrNoSuchActor (404), ErrNotKillable and
// ErrBadKillRequest (400). This one is not among them because whether
// chaos is on is the broker's configuration, not the actor kit's.
var ErrChaosOff = errors.New("broker: chaos is off; start the broker with --chaos to enable the chaos routes")

func (rt *routes) handleActors(w http.ResponseWriter, r *http.Request) {
	list := rt.m.Actors()
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

func (rt *routes) handleKill(w http.ResponseWriter, r *http.Request) {
	var req actors.KillRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<16)).Decode(&req); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "body must be JSON {path|kind, count, mode}: " + err.Error()})
		return
	}
	res, err := rt.m.Kill(req)
	if err != nil {
		status := http.StatusBadRequest
		switch {
		case errors.Is(err, ErrChaosOff):
			status = http.StatusForbidden
		case errors.Is(err, actors.ErrNoSuchActor):
			status = http.StatusNotFound
		}
		writeJSON(w, status, map[string]string{"error": strings.TrimPrefix(err.Error(), "broker: ")})
		return
	}
	writeJSON(w, http.StatusOK, res)
}

func (rt *routes) handleDisk(w http.ResponseWriter, r *http.Request) {
	var req DiskRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<10)).Decode(&req); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": `body must be JSON {"fail": true|false}: ` + err.Error()})
		return
	}
	if err := rt.m.FailDisk(req.Fail); err != nil {
		writeJSON(w, http.StatusForbidden, map[string]string{"error": err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, req)
}
