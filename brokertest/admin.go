package brokertest

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/getfelix/felix-go/actors"
	"github.com/getfelix/felix-go/auth"
	"github.com/getfelix/felix-go/broker"
	"github.com/getfelix/felix-go/config"
)

// AdminURL is b's admin endpoint with path appended; the test fails when
// b has none (cfg.Admin empty).
func AdminURL(tb testing.TB, b *broker.Broker, path string) string {
	tb.Helper()
	addr := b.AdminAddr()
	if addr == nil {
		tb.Fatal("the broker has no admin endpoint; set cfg.Admin")
	}
	return "http://" + addr.String() + path
}

// AdminToken is the token the broker of cfg wrote to its data directory
// (every right on tenant default), or "" under auth none.
func AdminToken(tb testing.TB, cfg config.Config) string {
	tb.Helper()
	data, err := os.ReadFile(filepath.Join(cfg.DataDir, auth.AdminTokenFile))
	if errors.Is(err, fs.ErrNotExist) {
		return ""
	}
	if err != nil {
		tb.Fatal(err)
	}
	return strings.TrimSpace(string(data))
}

// DebugActors is GET /debug/actors (?kind=kind unless empty) with the
// admin token of cfg's broker b; the test fails unless it answers 200 with
// JSON.
func DebugActors(tb testing.TB, ctx context.Context, b *broker.Broker, cfg config.Config, kind string) []actors.Info {
	tb.Helper()
	path := "/debug/actors"
	if kind != "" {
		path += "?kind=" + kind
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, AdminURL(tb, b, path), nil)
	if err != nil {
		tb.Fatal(err)
	}
	if token := AdminToken(tb, cfg); token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		tb.Fatalf("GET %s: %v", path, err)
	}
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/json" {
		tb.Fatalf("GET %s: %s (%s): %s", path, resp.Status, resp.Header.Get("Content-Type"), data)
	}
	var res struct {
		Actors []actors.Info `json:"actors"`
	}
	if err := json.Unmarshal(data, &res); err != nil {
		tb.Fatalf("GET %s: %v in %s", path, err, data)
	}
	return res.Actors
}

// ActorAt is the live actor at path in b's tree.
func ActorAt(b *broker.Broker, path string) (actors.Info, bool) {
	for _, a := range b.Actors() {
		if a.Path == path {
			return a, true
		}
	}
	return actors.Info{}, false
}

// Get fetches url with hc and returns the status code and body.
func Get(ctx context.Context, hc *http.Client, url string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, "", err
	}
	res, err := hc.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	return res.StatusCode, string(body), err
}
