package kafka

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/getfelix/felix-go/service"
)

// Authentication. Before a session is open only ApiVersions,
// SASLHandshake and SASLAuthenticate are served. SASL/PLAIN's username is
// the tenant and its password a Felix token; service.Open verifies them,
// exactly as for a felix/1 client. Without SASL a client is served as
// Config.AnonymousTenant when that is set, and refused (the connection
// closed) otherwise.

// errNotAuthenticated closes a connection that sent a request before
// authenticating, on a listener without an anonymous tenant.
var errNotAuthenticated = errors.New("kafka: SASL/PLAIN authentication required")

const mechanismPlain = "PLAIN"

func (c *conn) handleHandshake(h header, r *kmsg.SASLHandshakeRequest) (*pending, error) {
	resp := r.ResponseKind().(*kmsg.SASLHandshakeResponse)
	resp.SupportedMechanisms = []string{mechanismPlain}
	switch {
	case c.sess != nil:
		resp.ErrorCode = kerr.IllegalSaslState.Code
	case r.Mechanism != mechanismPlain:
		resp.ErrorCode = kerr.UnsupportedSaslMechanism.Code
	default:
		c.handshook = true
		c.rawSASL = r.Version == 0
	}
	c.count(h.key, resp.ErrorCode)
	return answered(h.correlation, resp), nil
}

// rawAuthenticate takes the bare PLAIN token that follows a v0 handshake
// (no Kafka header: only its size). Success is answered with an empty
// frame; a refusal closes the connection without an answer, as Kafka does.
func (c *conn) rawAuthenticate(token []byte) (*pending, error) {
	c.rawSASL = false
	p := newPending()
	tenant, pass, ok := parsePlain(token)
	err := errors.New("kafka: malformed SASL/PLAIN message")
	if ok {
		err = c.open(tenant, pass)
	}
	if err != nil {
		c.l.cfg.Hooks.Request("SASLHandshake", "closed")
		p.finish(nil, true)
		return p, err
	}
	p.finish([]byte{0, 0, 0, 0}, false)
	return p, nil
}

// handleAuthenticate opens the session. A refusal is answered, then the
// connection closes: Kafka gives a client one attempt per connection.
func (c *conn) handleAuthenticate(h header, r *kmsg.SASLAuthenticateRequest) (*pending, error) {
	resp := r.ResponseKind().(*kmsg.SASLAuthenticateResponse)
	var err error
	switch {
	case !c.handshook || c.sess != nil:
		resp.ErrorCode = kerr.IllegalSaslState.Code
		err = fmt.Errorf("kafka: SASLAuthenticate out of order")
	default:
		tenant, token, ok := parsePlain(r.SASLAuthBytes)
		if !ok {
			resp.ErrorCode = kerr.SaslAuthenticationFailed.Code
			err = errors.New("kafka: malformed SASL/PLAIN message")
			break
		}
		err = c.open(tenant, token)
		if err != nil {
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
		return errNotAuthenticated
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
	sess, err := c.l.svc.Open(c.ctx, service.Client{ID: c.id, Remote: c.nc.RemoteAddr(), Tenant: tenant, Token: token})
	if err != nil {
		return err
	}
	c.sess, c.tenant = sess, tenant
	return nil
}
