package kafka

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
)

// SASL/OAUTHBEARER (RFC 7628) carrying a Felix token as its bearer token:
// the client's initial response is a GS2 header and key-value pairs,
//
//	gs2-header  "n," or "y,", then "a=" authzid or nothing, then ","
//	kvsep       0x01
//	pairs       key "=" value, each followed by 0x01; auth=Bearer <token>
//	            is required, any other key an extension
//	kvsep       0x01
//
// The tenant is the authorization id (kgo's oauth.Auth Zid) or, without
// one, the extension tenant=T (librdkafka's and the Java client's
// sasl.oauthbearer.extensions); service.Open checks the token against it
// as PLAIN's password is checked. A refusal is answered
// SASL_AUTHENTICATION_FAILED and closes the connection, as PLAIN's does,
// without RFC 7628's error challenge: Kafka clients report the code.

const mechanismOAuthBearer = "OAUTHBEARER"

// ErrBadOAuthBearer is an OAUTHBEARER initial response that does not
// parse, or names no tenant.
var ErrBadOAuthBearer = errors.New("kafka: malformed SASL/OAUTHBEARER message")

// maxOAuthPairs bounds the key-value pairs read, whatever the message's
// length (a request is at most kafka_max_request_bytes).
const maxOAuthPairs = 64

// parseOAuthBearer reads an OAUTHBEARER initial response into the tenant
// and the bearer token.
func parseOAuthBearer(msg []byte) (tenant, token string, err error) {
	gs2, rest, ok := bytes.Cut(msg, []byte{1})
	if !ok {
		return "", "", fmt.Errorf("%w: no key-value pairs", ErrBadOAuthBearer)
	}
	if tenant, err = gs2Authzid(string(gs2)); err != nil {
		return "", "", err
	}
	for n := 0; ; n++ {
		if len(rest) == 1 && rest[0] == 1 {
			break // the closing kvsep
		}
		var pair []byte
		if pair, rest, ok = bytes.Cut(rest, []byte{1}); !ok || len(pair) == 0 || n == maxOAuthPairs {
			return "", "", fmt.Errorf("%w: key-value pairs not closed by 0x01 0x01 (or more than %d)", ErrBadOAuthBearer, maxOAuthPairs)
		}
		key, value, ok := strings.Cut(string(pair), "=")
		if !ok || !validOAuthKey(key) {
			return "", "", fmt.Errorf("%w: key-value pair %d", ErrBadOAuthBearer, n)
		}
		switch key {
		case "auth":
			scheme, bearer, ok := strings.Cut(value, " ")
			if !ok || !strings.EqualFold(scheme, "Bearer") || bearer == "" || token != "" {
				return "", "", fmt.Errorf("%w: auth is not one \"Bearer <token>\"", ErrBadOAuthBearer)
			}
			token = bearer
		case "tenant":
			if tenant == "" {
				tenant = value
			}
		}
	}
	switch {
	case token == "":
		return "", "", fmt.Errorf("%w: no auth=Bearer <token>", ErrBadOAuthBearer)
	case tenant == "":
		return "", "", fmt.Errorf("%w: no tenant: name it as the authorization id (a=) or the extension tenant=", ErrBadOAuthBearer)
	}
	return tenant, token, nil
}

// gs2Authzid checks a GS2 header without channel binding and returns its
// authorization id, unescaped (RFC 5801: "=2C" is ",", "=3D" is "=").
func gs2Authzid(h string) (string, error) {
	if !strings.HasPrefix(h, "n,") && !strings.HasPrefix(h, "y,") {
		return "", fmt.Errorf("%w: GS2 header %q (channel binding is not offered)", ErrBadOAuthBearer, h)
	}
	authz, ok := strings.CutSuffix(h[2:], ",")
	if !ok || strings.Contains(authz, ",") {
		return "", fmt.Errorf("%w: GS2 header %q", ErrBadOAuthBearer, h)
	}
	if authz == "" {
		return "", nil
	}
	name, ok := strings.CutPrefix(authz, "a=")
	if !ok {
		return "", fmt.Errorf("%w: GS2 authorization id %q", ErrBadOAuthBearer, authz)
	}
	var b strings.Builder
	for i := 0; i < len(name); i++ {
		if name[i] != '=' {
			b.WriteByte(name[i])
			continue
		}
		switch {
		case strings.HasPrefix(name[i:], "=2C"):
			b.WriteByte(',')
		case strings.HasPrefix(name[i:], "=3D"):
			b.WriteByte('=')
		default:
			return "", fmt.Errorf("%w: bad escape in the authorization id", ErrBadOAuthBearer)
		}
		i += 2
	}
	return b.String(), nil
}

// validOAuthKey is RFC 7628's key: one or more ASCII letters.
func validOAuthKey(k string) bool {
	if k == "" {
		return false
	}
	for i := range len(k) {
		if c := k[i] | 0x20; c < 'a' || c > 'z' {
			return false
		}
	}
	return true
}
