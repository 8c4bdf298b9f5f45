package admin

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/getfelix/felix-go/wire"
)

// serveShardView answers a page's document for one stream or cache, named
// by ?tenant=T&ns=N&<kind>=NAME, from shard ?from= on: the two pages read
// the same query and map the same errors, and only the gathering differs.
func serveShardView[V any](w http.ResponseWriter, r *http.Request, kind string, view func(context.Context, wire.Scope, uint32) (V, error)) {
	q := r.URL.Query()
	scope := wire.Scope{Tenant: q.Get("tenant"), Namespace: q.Get("ns"), Stream: q.Get(kind)}
	if scope.Namespace == "" {
		scope.Namespace = "default"
	}
	if err := scope.Validate(); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "name the " + kind + ": ?tenant=T&ns=N&" + kind + "=" + strings.ToUpper(kind[:1]) + " (" + err.Error() + ")"})
		return
	}
	var from uint64
	if s := q.Get("from"); s != "" {
		var err error
		if from, err = strconv.ParseUint(s, 10, 32); err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": "from must be a shard number"})
			return
		}
	}
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	v, err := view(ctx, scope, uint32(from))
	if err != nil {
		status := http.StatusServiceUnavailable
		switch {
		case errors.Is(err, wire.ErrNotFound):
			status = http.StatusNotFound
		case errors.Is(err, wire.ErrInvalidRequest):
			status = http.StatusBadRequest
		}
		writeJSON(w, status, map[string]string{"error": err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, v)
}
