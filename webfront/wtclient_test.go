package webfront_test

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"testing"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/webtransport-go"

	"github.com/getfelix/felix-go/broker"
	"github.com/getfelix/felix-go/brokertest"
	"github.com/getfelix/felix-go/webfront"
)

// wtClient is a test's side of a WebTransport session, as a page would
// hold it: requests and replies on the control stream, and each
// subscription's events from its own stream.
type wtClient struct {
	tb     testing.TB
	sess   *webtransport.Session
	ctrl   *webtransport.Stream
	nextID uint64
	ended  []*webfront.Reply // ended frames call passed over

	mu      sync.Mutex
	streams map[uint64]*webtransport.ReceiveStream // by subscription id
	wake    chan struct{}
}

// webTransportHash is the certificate hash the admin endpoint gives pages.
func webTransportHash(tb testing.TB, b *broker.Broker) []byte {
	tb.Helper()
	resp, err := http.Get(brokertest.AdminURL(tb, b, "/ui/config"))
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	var cfg struct {
		Port int    `json:"webtransport_port"`
		Hash string `json:"webtransport_cert_sha256"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&cfg); err != nil {
		tb.Fatal(err)
	}
	h, err := hex.DecodeString(cfg.Hash)
	if err != nil || len(h) != sha256.Size || cfg.Port == 0 {
		tb.Fatalf("/ui/config WebTransport port %d, hash %q: want a port and a SHA-256", cfg.Port, cfg.Hash)
	}
	return h
}

// dialWT opens a session as a browser given serverCertificateHashes
// would: the certificate is trusted by its hash alone.
func dialWT(tb testing.TB, ctx context.Context, b *broker.Broker, origin string, certHash []byte) (*wtClient, error) {
	tb.Helper()
	return dialWTAddr(tb, ctx, b.BrowserWebTransportAddr().String(), origin, certHash)
}

func dialWTAddr(tb testing.TB, ctx context.Context, addr, origin string, certHash []byte) (*wtClient, error) {
	tb.Helper()
	verify := func(raw [][]byte, _ [][]*x509.Certificate) error {
		if len(raw) == 0 {
			return errors.New("no certificate")
		}
		if h := sha256.Sum256(raw[0]); string(h[:]) != string(certHash) {
			return fmt.Errorf("certificate hash %x, want %x", h, certHash)
		}
		return nil
	}
	tr := &webtransport.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true, VerifyPeerCertificate: verify},
		QUICConfig:      &quic.Config{EnableDatagrams: true, EnableStreamResetPartialDelivery: true, MaxIncomingUniStreams: 64},
	}
	tb.Cleanup(func() { _ = tr.Close() })
	h := http.Header{}
	if origin != "" {
		h.Set("Origin", origin)
	}
	_, sess, err := tr.Dial(ctx, "https://"+addr+"/", h)
	if err != nil {
		return nil, err
	}
	tb.Cleanup(func() { _ = sess.CloseWithError(0, "") })
	ctrl, err := sess.OpenStreamSync(ctx)
	if err != nil {
		return nil, err
	}
	c := &wtClient{tb: tb, sess: sess, ctrl: ctrl, streams: map[uint64]*webtransport.ReceiveStream{}, wake: make(chan struct{}, 1)}
	go c.acceptStreams()
	return c, nil
}

// acceptStreams files each events stream under the subscription id it
// starts with.
func (c *wtClient) acceptStreams() {
	for {
		str, err := c.sess.AcceptUniStream(context.Background())
		if err != nil {
			return
		}
		var id [8]byte
		if _, err := io.ReadFull(str, id[:]); err != nil {
			continue
		}
		c.mu.Lock()
		c.streams[binary.BigEndian.Uint64(id[:])] = str
		c.mu.Unlock()
		select {
		case c.wake <- struct{}{}:
		default:
		}
	}
}

// events is subscription sub's stream, once it arrived.
func (c *wtClient) events(ctx context.Context, sub uint64) (*webtransport.ReceiveStream, error) {
	for {
		c.mu.Lock()
		str := c.streams[sub]
		c.mu.Unlock()
		if str != nil {
			return str, nil
		}
		select {
		case <-c.wake:
		case <-ctx.Done():
			return nil, fmt.Errorf("no events stream for subscription %d: %w", sub, ctx.Err())
		}
	}
}

// nextEvents reads one events frame of subscription sub.
func (c *wtClient) nextEvents(ctx context.Context, sub uint64) (*webfront.Events, error) {
	str, err := c.events(ctx, sub)
	if err != nil {
		return nil, err
	}
	stop := context.AfterFunc(ctx, func() { str.CancelRead(0) })
	defer stop()
	b, err := webfront.ReadStreamFrame(str, 64<<20)
	if err != nil {
		return nil, err
	}
	return webfront.DecodeEvents(b)
}

func (c *wtClient) sendRaw(frame []byte) error {
	_, err := c.ctrl.Write(webfront.AppendStreamFrame(nil, frame))
	return err
}

func (c *wtClient) send(r *webfront.Request) uint64 {
	c.tb.Helper()
	c.nextID++
	r.ID = c.nextID
	b, err := webfront.AppendRequest(nil, r)
	if err != nil {
		c.tb.Fatal(err)
	}
	if err := c.sendRaw(b); err != nil {
		c.tb.Fatalf("write %s: %v", r.Op, err)
	}
	return r.ID
}

// next reads one control frame.
func (c *wtClient) next(ctx context.Context) (*webfront.Reply, error) {
	stop := context.AfterFunc(ctx, func() { c.ctrl.CancelRead(0) })
	defer stop()
	b, err := webfront.ReadStreamFrame(c.ctrl, 64<<20)
	if err != nil {
		return nil, err
	}
	return webfront.DecodeReply(b)
}

// call sends r and returns its reply (ended frames before it are kept in
// c.ended).
func (c *wtClient) call(ctx context.Context, r *webfront.Request) *webfront.Reply {
	c.tb.Helper()
	id := c.send(r)
	for {
		rep, err := c.next(ctx)
		if err != nil {
			c.tb.Fatalf("waiting for the reply to %s: %v", r.Op, err)
		}
		if rep.Op == webfront.OpReply && rep.ID == id {
			return rep
		}
		if rep.Op == webfront.OpEnded {
			c.ended = append(c.ended, rep)
		}
	}
}

// nextEnded is the next ended frame.
func (c *wtClient) nextEnded(ctx context.Context) (*webfront.Reply, error) {
	for len(c.ended) == 0 {
		rep, err := c.next(ctx)
		if err != nil {
			return nil, err
		}
		if rep.Op == webfront.OpEnded {
			c.ended = append(c.ended, rep)
		}
	}
	rep := c.ended[0]
	c.ended = c.ended[1:]
	return rep, nil
}

func (c *wtClient) mustCall(ctx context.Context, r *webfront.Request) *webfront.Reply {
	c.tb.Helper()
	rep := c.call(ctx, r)
	if rep.Error != nil {
		c.tb.Fatalf("%s refused: %+v", r.Op, *rep.Error)
	}
	return rep
}

// closedWith reads the control stream until the session ends and returns
// how the broker closed it.
func (c *wtClient) closedWith(ctx context.Context) *webtransport.SessionError {
	c.tb.Helper()
	for {
		_, err := c.next(ctx)
		if errors.Is(err, io.EOF) {
			// The broker finished the control stream before it closed the
			// session; the session's close is what AcceptStream returns.
			_, err = c.sess.AcceptStream(ctx)
		}
		if err != nil {
			var se *webtransport.SessionError
			if !errors.As(err, &se) {
				c.tb.Fatalf("session ended with %v, want the broker's close", err)
			}
			return se
		}
	}
}
