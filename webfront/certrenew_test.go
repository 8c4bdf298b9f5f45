package webfront_test

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"net/http"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/webtransport-go"

	"github.com/getfelix/felix-go/brokertest"
	"github.com/getfelix/felix-go/internal/quicconf"
	"github.com/getfelix/felix-go/webfront"
)

// TestWebTransportCertificateRenewal: once the short-lived certificate is
// renewed, a session made with the old one goes on, and a new session
// gets the new certificate (a page with the old hash is refused by its
// browser, one with the new hash connects).
func TestWebTransportCertificateRenewal(t *testing.T) {
	cfg := brokertest.Config(t)
	b := brokertest.Start(t, cfg)
	ctx := brokertest.Context(t, 30*time.Second)
	var mu sync.Mutex
	now := time.Now()
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	certs, err := quicconf.NewShortLived(clock)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := webfront.Listen(b, webfront.Config{
		Addr:                 "127.0.0.1:0",
		WebTransportAddr:     "127.0.0.1:0",
		WebTransportTLS:      certs.ServerConfig(),
		MaxFrameBytes:        1 << 20,
		PreAuthMaxFrameBytes: 64 << 10,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close(context.Background()) })
	addr := srv.WebTransportAddr().String()
	token := brokertest.Token(t, cfg, "default")
	old, err := certs.Hash()
	if err != nil {
		t.Fatal(err)
	}
	first, err := dialWTAddr(t, ctx, addr, "", old[:])
	if err != nil {
		t.Fatal(err)
	}
	first.mustCall(ctx, &webfront.Request{Op: webfront.OpAuth, Tenant: "default", Token: token})

	mu.Lock()
	now = now.Add(6 * 24 * time.Hour) // past the renewal, within the old one's validity
	mu.Unlock()
	renewed, err := certs.Hash()
	if err != nil || renewed == old {
		t.Fatalf("the hash after 6 days: %x, %v; want a new certificate's", renewed, err)
	}
	if _, err := dialWTAddr(t, ctx, addr, "", old[:]); err == nil {
		t.Fatal("a session with the old hash was made after the renewal; want the new certificate served")
	}
	second, err := dialWTAddr(t, ctx, addr, "", renewed[:])
	if err != nil {
		t.Fatalf("a session with the new hash: %v", err)
	}
	second.mustCall(ctx, &webfront.Request{Op: webfront.OpAuth, Tenant: "default", Token: token})
	// The first session, made with the old certificate, still answers.
	if rep := first.call(ctx, &webfront.Request{Op: webfront.OpRead, Namespace: "default", Stream: "s", Max: 1}); rep.Error == nil || rep.Error.Name != "not_found" {
		t.Fatalf("the session made before the renewal answered %+v, want an answer (not_found)", rep)
	}
}

// TestWebTransportConfiguredCertificate: with tls_cert set, WebTransport
// serves that certificate, verified as any TLS server's is, and /ui/config
// gives no hash.
func TestWebTransportConfiguredCertificate(t *testing.T) {
	dir := t.TempDir()
	if _, err := quicconf.ServerTLS("", "", dir); err != nil { // writes a certificate pair to dir
		t.Fatal(err)
	}
	cfg := brokertest.Config(t)
	cfg.TLSCert, cfg.TLSKey = filepath.Join(dir, quicconf.CertFile), filepath.Join(dir, quicconf.KeyFile)
	cfg.BrowserListen, cfg.BrowserWebTransportListen, cfg.Admin = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	b := brokertest.Start(t, cfg)
	ctx := brokertest.Context(t, 30*time.Second)

	resp, err := http.Get(brokertest.AdminURL(t, b, "/ui/config"))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var ui map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&ui); err != nil {
		t.Fatal(err)
	}
	if ui["webtransport_port"] == nil || ui["webtransport_cert_sha256"] != nil {
		t.Fatalf("/ui/config = %v, want webtransport_port and no hash", ui)
	}
	roots, err := quicconf.ClientTLS(cfg.TLSCert, false)
	if err != nil {
		t.Fatal(err)
	}
	tr := &webtransport.Transport{
		TLSClientConfig: &tls.Config{RootCAs: roots.RootCAs},
		QUICConfig:      &quic.Config{EnableDatagrams: true, EnableStreamResetPartialDelivery: true},
	}
	t.Cleanup(func() { _ = tr.Close() })
	_, sess, err := tr.Dial(ctx, "https://"+b.BrowserWebTransportAddr().String()+"/", nil)
	if err != nil {
		t.Fatalf("a session verifying tls_cert: %v", err)
	}
	_ = sess.CloseWithError(0, "")
}
