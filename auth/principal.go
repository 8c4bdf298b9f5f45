package auth

import (
	"time"

	"github.com/getfelix/felix-go/wire"
)

// Principal is who a verified token speaks for: one tenant, the subject
// inside it, and what it may do there until it expires. The zero Principal
// (and a nil one) allows nothing.
//
// Allows and AllowsNode do not look at the clock: the caller refuses
// operations once Expires has passed (and ends what the token opened), so
// that a check on the hot path costs no time.Now.
type Principal struct {
	Tenant  string    // the only tenant the principal may touch
	Subject string    // the token's "sub"; "" when it had none
	Grants  []Grant   // what it may do inside Tenant
	Expires time.Time // the token's "exp"
}

// Allows reports whether some grant allows action on stream
// namespace/stream of p.Tenant. Comparing the operation's tenant with
// p.Tenant is the caller's: a principal never reaches another tenant.
func (p *Principal) Allows(action Action, namespace, stream string) bool {
	if p == nil {
		return false
	}
	for _, g := range p.Grants {
		if g.Allows(action, namespace, stream) {
			return true
		}
	}
	return false
}

// AllowsNode reports whether some grant allows the node action
// (ActionNodeView, ActionNodeManage).
func (p *Principal) AllowsNode(action Action) bool {
	if p == nil {
		return false
	}
	for _, g := range p.Grants {
		if g.AllowsNode(action) {
			return true
		}
	}
	return false
}

// Expired reports whether p's rights have ended at now (no leeway: the
// leeway covers clock skew at Verify, not the life of a connection).
func (p *Principal) Expired(now time.Time) bool {
	return p == nil || !now.Before(p.Expires)
}

// AdminGrants returns full rights: every stream and group action on */*,
// and both node actions.
func AdminGrants() []Grant {
	var out []Grant
	for _, a := range Actions() {
		r := "*/*"
		if a.IsNode() {
			r = nodeResource
		}
		out = append(out, Grant{Action: a, Resource: r})
	}
	return out
}

// Check is the permission check for an operation on a stream: nil when p's
// tenant is scope's and a grant allows action on its namespace and stream,
// else a forbidden *wire.Error wrapping ErrNotPermitted. The message names
// the action and the scope the caller asked for, nothing more: it says the
// same whether or not another tenant's stream exists. Check does not look
// at the clock (see Expired).
func (p *Principal) Check(action Action, scope wire.Scope) error {
	if p != nil && scope.Tenant == p.Tenant && p.Allows(action, scope.Namespace, scope.Stream) {
		return nil
	}
	return wire.WrapError(wire.CodeForbidden, ErrNotPermitted, "%s on %s", action, scope)
}

// CheckNode is Check for a node action.
func (p *Principal) CheckNode(action Action) error {
	if p.AllowsNode(action) {
		return nil
	}
	return wire.WrapError(wire.CodeForbidden, ErrNotPermitted, "%s", action)
}
