package kafka

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/getfelix/felix-go/service"
)

// Authentication. Before a session is open only ApiVersions,
// SASLHandshake and SASLAuthenticate are served. SASL/PLAIN's username is
// the tenant and its password a Felix token; SASL/OAUTHBEARER carries the
// token as its bearer token and names the tenant (oauthbearer.go);
// service.Open verifies them, exactly as for a felix/1 client.
// SCRAM-SHA-256 and SCRAM-SHA-512, where the broker keeps users, take two
// messages each way, which this package only carries: the exchange runs
// behind the boundary (service.SCRAMLogin). Every refused login, whatever
// its mechanism and framing, goes through loginFailed. Without SASL a
// client is served as Config.AnonymousTenant when that is set, and
// refused (the connection closed) otherwise.

const mechanismPlain = "PLAIN"

// mechanisms are the SASL mechanisms the handshake offers.
func (l *Listener) mechanisms() []string {
	return append([]string{mechanismPlain, mechanismOAuthBearer}, l.cfg.SCRAMMechanisms...)
}

// errNotAuthenticated closes a connection that sent a request before
// logging in, on a listener without an anonymous tenant. It names every
// mechanism offered, so the log says what the client could use.
func (l *Listener) errNotAuthenticated() error {
	return fmt.Errorf("kafka: SASL authentication required (%s)", strings.Join(l.mechanisms(), " or "))
}

func (c *conn) handleHandshake(h header, r *kmsg.SASLHandshakeRequest) (*pending, error) {
	resp := r.ResponseKind().(*kmsg.SASLHandshakeResponse)
	resp.SupportedMechanisms = c.l.mechanisms()
	switch {
	case c.sess != nil:
		resp.ErrorCode = kerr.IllegalSaslState.Code
	case !slices.Contains(c.l.mechanisms(), r.Mechanism):
		resp.ErrorCode = kerr.UnsupportedSaslMechanism.Code
	default:
		c.handshook = true
		c.mechanism = r.Mechanism
		c.scram = nil // a new handshake starts over
		c.rawSASL = r.Version == 0
	}
	c.count(h.key, resp.ErrorCode)
	return answered(h.correlation, resp), nil
}

// rawAuthenticate takes a bare SASL message that follows a v0 handshake
// (no Kafka header: only its size), and answers with a bare one: empty
// on PLAIN's and OAUTHBEARER's success, SCRAM's next message otherwise.
// A refusal closes the connection without an answer, as Kafka does.
func (c *conn) rawAuthenticate(msg []byte) (*pending, error) {
	p := newPending()
	reply, err := c.login(msg)
	if err != nil {
		c.rawSASL = false
		c.l.cfg.Hooks.Request("SASLHandshake", "closed")
		p.finish(nil, true)
		return p, err
	}
	if c.sess != nil {
		c.rawSASL = false
	}
	p.finish(append(binary.BigEndian.AppendUint32(nil, uint32(len(reply))), reply...), false)
	return p, nil
}

// handleAuthenticate carries one SASL message: it opens the session (a
// SCRAM exchange's first message is answered and waits for the second). A
// refusal is answered, then the connection closes: Kafka gives a client
// one attempt per connection.
func (c *conn) handleAuthenticate(h header, r *kmsg.SASLAuthenticateRequest) (*pending, error) {
	resp := r.ResponseKind().(*kmsg.SASLAuthenticateResponse)
	var err error
	switch {
	case !c.handshook || c.sess != nil:
		resp.ErrorCode = kerr.IllegalSaslState.Code
		err = fmt.Errorf("kafka: SASLAuthenticate out of order")
	default:
		if resp.SASLAuthBytes, err = c.login(r.SASLAuthBytes); err != nil {
			resp.ErrorCode = kerr.SaslAuthenticationFailed.Code
		}
	}
	c.count(h.key, resp.ErrorCode)
	if err != nil {
		msg := err.Error()
		resp.ErrorMessage = &msg
		p := newPending()
		p.finish(appendResponse(nil, h.correlation, resp), true)
		return p, nil
	}
	return answered(h.correlation, resp), nil
}

// login takes msg, a message of the handshake's mechanism, and returns
// the server's answer to it; the session is open once c.sess is set.
func (c *conn) login(msg []byte) ([]byte, error) {
	var reply []byte
	var tenant, token string
	var err error
	switch c.mechanism {
	case mechanismOAuthBearer:
		if tenant, token, err = parseOAuthBearer(msg); err == nil {
			err = c.open(tenant, token)
		}
	case mechanismPlain:
		var ok bool
		if tenant, token, ok = parsePlain(msg); !ok {
			err = errors.New("kafka: malformed SASL/PLAIN message")
		} else {
			err = c.open(tenant, token)
		}
	default:
		reply, err = c.scramStep(msg)
	}
	if err != nil {
		c.loginFailed(err)
		return nil, err
	}
	return reply, nil
}

// scramStep carries one message of a SCRAM exchange, starting it on the
// first.
func (c *conn) scramStep(msg []byte) ([]byte, error) {
	if c.scram == nil {
		svc, ok := c.l.svc.(service.SCRAMService)
		if !ok {
			return nil, fmt.Errorf("kafka: the service runs no SCRAM logins")
		}
		l, err := svc.StartSCRAM(service.Client{ID: c.id, Remote: c.nc.RemoteAddr(), Frontend: service.FrontendKafka}, c.mechanism)
		if err != nil {
			return nil, err
		}
		c.scram = l
	}
	step, err := c.scram.Step(c.ctx, msg)
	if err != nil {
		c.scram = nil
		return nil, err
	}
	if step.Session != nil {
		c.scram = nil
		c.sess, c.tenant = step.Session, step.Tenant
	}
	return step.Reply, nil
}

// loginFailed is where every refused SASL login passes, once, before its
// answer: a message that does not parse, a token service.Open refuses,
// under any mechanism, after a v0 or v1 handshake. A limit on failed
// logins per source address belongs here.
func (c *conn) loginFailed(err error) {
	c.l.cfg.Log.Debug().Err(err).Uint64("conn", c.id).Str("remote", c.nc.RemoteAddr().String()).Str("mechanism", c.mechanism).Msg("kafka: SASL login refused")
}

// parsePlain splits a SASL/PLAIN message (RFC 4616: authzid NUL authcid
// NUL passwd). An authorization id, when given, must be the user.
func parsePlain(b []byte) (user, pass string, ok bool) {
	parts := bytes.Split(b, []byte{0})
	if len(parts) != 3 || len(parts[1]) == 0 {
		return "", "", false
	}
	if len(parts[0]) > 0 && !bytes.Equal(parts[0], parts[1]) {
		return "", "", false
	}
	return string(parts[1]), string(parts[2]), true
}

// openAnonymous opens a session as the anonymous tenant, if there is one.
func (c *conn) openAnonymous() error {
	if c.l.cfg.AnonymousTenant == "" {
		return c.l.errNotAuthenticated()
	}
	token := ""
	if c.l.cfg.AnonymousToken != nil {
		var err error
		if token, err = c.l.cfg.AnonymousToken(); err != nil {
			return fmt.Errorf("kafka: anonymous token: %w", err)
		}
	}
	return c.open(c.l.cfg.AnonymousTenant, token)
}

// open authenticates through the service and keeps the session.
func (c *conn) open(tenant, token string) error {
	sess, err := c.l.svc.Open(c.ctx, service.Client{ID: c.id, Remote: c.nc.RemoteAddr(), Tenant: tenant, Token: token, Frontend: service.FrontendKafka})
	if err != nil {
		return err
	}
	c.sess, c.tenant = sess, tenant
	return nil
}
