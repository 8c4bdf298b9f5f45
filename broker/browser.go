package broker

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strconv"

	"github.com/getfelix/felix-go/internal/quicconf"
	"github.com/getfelix/felix-go/webfront"
)

// listenBrowser starts the browser front end (browser_listen) in front of
// the same service as felix/1; nothing when it is not set. It starts after
// the admin endpoint, whose own pages' origin it lets through.
func (b *Broker) listenBrowser() error {
	if b.cfg.BrowserListen == "" {
		return nil
	}
	cfg := webfront.Config{
		Addr:        b.cfg.BrowserListen,
		AllowOrigin: b.browserOriginAllowed,
		// The felix/1 limits hold for browsers too: one connection count,
		// one per-IP count, one handshake deadline and frame caps.
		MaxFrameBytes:        b.cfg.MaxFrameBytes,
		PreAuthMaxFrameBytes: b.cfg.PreAuthMaxFrameBytes,
		AuthTimeout:          b.cfg.AuthTimeout,
		Admit:                b.admitConnection,
		Log:                  b.log,
	}
	if b.cfg.BrowserTLS {
		tlsConf, err := b.serverTLS()
		if err != nil {
			return err
		}
		cfg.TLS = tlsConf
	}
	var shortLived *quicconf.ShortLived
	if b.cfg.BrowserWebTransportListen != "" {
		var err error
		if cfg.WebTransportTLS, shortLived, err = b.webTransportTLS(); err != nil {
			return err
		}
		cfg.WebTransportAddr = b.cfg.BrowserWebTransportListen
	}
	srv, err := webfront.Listen(b, cfg)
	if err != nil {
		return err
	}
	b.browser = srv
	b.browserPort.Store(int64(srv.Addr().(*net.TCPAddr).Port))
	ev := b.log.Info().Str("browser", srv.Addr().String())
	if a := srv.WebTransportAddr(); a != nil {
		b.browserWT.Store(&browserWebTransport{port: a.(*net.UDPAddr).Port, cert: shortLived})
		ev = ev.Str("webtransport", a.String()).Bool("short_lived_certificate", shortLived != nil)
	}
	ev.Msg("browser front end started")
	return nil
}

// browserWebTransport is what the admin pages learn of WebTransport.
type browserWebTransport struct {
	port int
	cert *quicconf.ShortLived // nil: a real certificate, no hash needed
}

// webTransportTLS is WebTransport's TLS: the broker's certificate when
// tls_cert is set, else a short-lived one, since a browser takes a
// self-signed certificate over WebTransport only by a hash of one valid
// for under 14 days (which the 5-year self-signed default is not).
func (b *Broker) webTransportTLS() (*tls.Config, *quicconf.ShortLived, error) {
	if b.cfg.TLSCert != "" || b.cfg.TLSKey != "" {
		tc, err := b.serverTLS()
		return tc, nil, err
	}
	sl, err := quicconf.NewShortLived(nil)
	if err != nil {
		return nil, nil, fmt.Errorf("broker: WebTransport certificate: %w", err)
	}
	return sl.ServerConfig(), sl, nil
}

// browserWebTransport is the WebTransport port and, with the short-lived
// certificate, the SHA-256 of the one in force, for the live page's
// serverCertificateHashes (nil with a real certificate); port 0: off.
func (b *Broker) browserWebTransport() (port int, certHash []byte) {
	wt := b.browserWT.Load()
	if wt == nil {
		return 0, nil
	}
	if wt.cert == nil {
		return wt.port, nil
	}
	h, err := wt.cert.Hash()
	if err != nil {
		return 0, nil // no certificate to offer: the page falls back to WebSocket
	}
	return wt.port, h[:]
}

// BrowserWebTransportAddr is WebTransport's bound UDP address, or nil when
// it is off.
func (b *Broker) BrowserWebTransportAddr() net.Addr {
	if b.browser == nil {
		return nil
	}
	return b.browser.WebTransportAddr()
}

// browserOriginAllowed lets through the origins of browser_allowed_origins
// and the admin endpoint's own: http on its port, under a name it answers
// to (localhost, an IP address, admin_allowed_hosts).
func (b *Broker) browserOriginAllowed(origin string) bool {
	if slices.Contains(b.cfg.BrowserOrigins(), origin) {
		return true
	}
	if b.admin == nil {
		return false
	}
	u, err := url.Parse(origin)
	if err != nil || u.Scheme != "http" || u.Port() != strconv.Itoa(b.admin.Addr().(*net.TCPAddr).Port) {
		return false
	}
	host := u.Hostname()
	if host == "localhost" || net.ParseIP(host) != nil {
		return true
	}
	return slices.Contains(b.cfg.AdminHosts(), host)
}

// BrowserAddr is the browser front end's bound address, or nil when it is off.
func (b *Broker) BrowserAddr() net.Addr {
	if b.browser == nil {
		return nil
	}
	return b.browser.Addr()
}

// closeBrowser stops the browser front end, so its sessions end before the
// actors they use.
func (b *Broker) closeBrowser(ctx context.Context) error {
	if b.browser == nil {
		return nil
	}
	return b.browser.Close(ctx)
}
