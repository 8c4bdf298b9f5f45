package auth

import (
	"errors"
	"fmt"

	"github.com/getfelix/felix-go/wire"
)

// Why Verify refused a token. Verify returns each wrapped in a *wire.Error
// with code unauthenticated, so both errors.Is(err, ErrTokenExpired) and
// errors.Is(err, wire.ErrUnauthenticated) hold, and the message a client
// sees says which.
var (
	// ErrTokenMissing is returned for an empty token.
	ErrTokenMissing = errors.New("auth: no token")
	// ErrTooLarge is returned for a token longer than MaxTokenLen, before
	// anything of it is parsed.
	ErrTooLarge = errors.New("auth: token too large")
	// ErrTokenMalformed is returned for a token that is not a compact JWS
	// whose header and claims decode.
	ErrTokenMalformed = errors.New("auth: token malformed")
	// ErrAlgorithm is returned for a token signed with an algorithm other
	// than EdDSA, ES256 or RS256: "none" and HMAC among them.
	ErrAlgorithm = errors.New("auth: token algorithm not allowed")
	// ErrBadSignature is returned when no loaded key verifies the token's
	// signature.
	ErrBadSignature = errors.New("auth: token signature not valid")
	// ErrClaimInvalid is returned for a properly signed token whose claims
	// Felix cannot use: no exp, no tenant, a tenant that is not a valid
	// name, or a grant ParseGrant refuses.
	ErrClaimInvalid = errors.New("auth: token claim invalid")
	// ErrTenantNotAllowed is returned when the key that signed the token is
	// restricted to tenants that do not include the token's.
	ErrTenantNotAllowed = errors.New("auth: key may not sign for this tenant")
	// ErrTokenExpired is returned for a token whose exp is more than the
	// leeway in the past.
	ErrTokenExpired = errors.New("auth: token expired")
	// ErrTokenNotYetValid is returned for a token whose nbf (or iat) is
	// more than the leeway in the future.
	ErrTokenNotYetValid = errors.New("auth: token not yet valid")
	// ErrAudience is returned for a token whose aud does not contain the
	// verifier's audience.
	ErrAudience = errors.New("auth: token audience mismatch")
)

// ErrNotPermitted is what Principal.Check and CheckNode wrap in a forbidden
// *wire.Error.
var ErrNotPermitted = errors.New("auth: not permitted")

// ErrNodeTenantKey is what CheckNode wraps in a forbidden *wire.Error for a
// node grant in a token whose key is restricted to tenants: node rights
// hold only from a key that is not (Principal.TenantKey). It wraps
// ErrNotPermitted.
var ErrNodeTenantKey = fmt.Errorf("%w: node rights need a signing key not restricted to tenants", ErrNotPermitted)

// refuse builds Verify's error: sentinel, with detail, inside an
// unauthenticated wire error.
func refuse(sentinel error, format string, args ...any) error {
	cause := sentinel
	if format != "" {
		cause = fmt.Errorf("%w: %s", sentinel, fmt.Sprintf(format, args...))
	}
	return wire.WrapError(wire.CodeUnauthenticated, cause, "token refused")
}

// ErrNodeOtherTenant is what CheckNodeTenant wraps in a forbidden
// *wire.Error when a principal whose key is restricted to tenants asks
// about another tenant's stream. It wraps ErrNotPermitted.
var ErrNodeOtherTenant = fmt.Errorf("%w: another tenant's stream", ErrNotPermitted)
