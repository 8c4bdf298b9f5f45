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
	// TenantKey is set when the key that signed the token is restricted
	// to tenants (a JWKS key's felix_tenants). Such a key speaks for its
	// tenants, not for the operator: its node grants never hold for the
	// node as a whole (AllowsNode is false), only node.view on Tenant's
	// own streams (CheckNodeTenant). Otherwise whoever holds a tenant's
	// key could stop another tenant's shards or read their streams.
	TenantKey bool
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
// (ActionNodeView, ActionNodeManage) on the node as a whole: never for a
// principal whose key is restricted to tenants (TenantKey).
func (p *Principal) AllowsNode(action Action) bool {
	if p == nil || p.TenantKey {
		return false
	}
	return p.hasNodeGrant(action)
}

// hasNodeGrant reports whether some grant names the node action, whoever
// signed it.
func (p *Principal) hasNodeGrant(action Action) bool {
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

// CheckNode is Check for a node action on the node as a whole. A
// principal whose key is restricted to tenants is refused with
// ErrNodeTenantKey, whatever it was granted.
func (p *Principal) CheckNode(action Action) error {
	if p.AllowsNode(action) {
		return nil
	}
	if p != nil && p.TenantKey && p.hasNodeGrant(action) {
		return wire.WrapError(wire.CodeForbidden, ErrNodeTenantKey, "%s", action)
	}
	return wire.WrapError(wire.CodeForbidden, ErrNotPermitted, "%s", action)
}

// CheckNodeTenant is CheckNode for a node action on one of tenant's
// streams only (the admin routes that show a stream). A principal whose
// key is not restricted passes with the node grant for any tenant: the
// operator's token sees every stream. One whose key is restricted to
// tenants passes only for node.view on its own tenant: reading its own
// streams' internals touches no one else, while every change the admin
// routes make (a kill, a failing disk, a drain, a replica move) lands on
// a member that serves every tenant.
func (p *Principal) CheckNodeTenant(action Action, tenant string) error {
	if p == nil || !p.TenantKey {
		return p.CheckNode(action)
	}
	if action == ActionNodeView && tenant == p.Tenant && p.hasNodeGrant(action) {
		return nil
	}
	if tenant != p.Tenant {
		// The same answer whether or not the tenant or its stream exists.
		return wire.WrapError(wire.CodeForbidden, ErrNodeOtherTenant, "%s on tenant %q: the token is for tenant %q", action, tenant, p.Tenant)
	}
	return p.CheckNode(action)
}
