package auth

import (
	"errors"
	"fmt"
	"strings"

	"github.com/getfelix/felix-go/wire"
)

// A grant's text is ACTION:RESOURCE. For a stream or group action the
// resource is a NAMESPACE/STREAM pattern; for a node action it is "*".
// Within a segment, '*' matches any run (possibly empty) of the characters
// a Felix name may hold, [A-Za-z0-9._-]; it never matches across the '/'.
//
//	stream.publish:orders/eu        one stream
//	stream.subscribe:orders/*       every stream in namespace orders
//	stream.subscribe:orders/eu-*    streams of orders whose names start "eu-"
//	stream.manage:*/*               every stream of the tenant
//	cache.read:config/flags         one cache (NAMESPACE/CACHE)
//	cache.read:config/flags/web.*   its keys starting "web." (cachegrant.go)
//	node.view:*                     the node
//
// Patterns are always inside the token's tenant: a grant can name no other.

// Errors a grant is refused with; ParseGrant returns them inside a
// *GrantError, so errors.Is tells which.
var (
	// ErrUnknownAction is returned for an action name that is not one of Actions.
	ErrUnknownAction = errors.New("auth: unknown action")
	// ErrPatternMalformed is returned for a grant without ':', a resource
	// without exactly one '/', a node action's resource other than "*", or
	// a segment that is a reserved name ("." or "..").
	ErrPatternMalformed = errors.New("auth: malformed resource pattern")
	// ErrPatternEmptySegment is returned for a resource with an empty
	// namespace or stream segment ("orders/", "/x").
	ErrPatternEmptySegment = errors.New("auth: empty segment in resource pattern")
	// ErrPatternCharacter is returned for a resource holding a character
	// outside [A-Za-z0-9._-*].
	ErrPatternCharacter = errors.New("auth: character not allowed in resource pattern")
	// ErrGrantTooLong is returned for a grant longer than MaxGrantLen or a
	// segment longer than wire.MaxNameLen.
	ErrGrantTooLong = errors.New("auth: grant too long")
)

// MaxGrantLen bounds a grant's text: the longest action, ':', two
// segments of wire.MaxNameLen joined by '/', and a cache grant's '/' and
// key pattern (cachegrant.go).
const MaxGrantLen = len("stream.subscribe") + 1 + 2*wire.MaxNameLen + 1 + 1 + MaxGrantKeyLen

// nodeResource is the only resource a node action takes.
const nodeResource = "*"

// GrantError is a grant ParseGrant refused: the text, and what is wrong
// with it. Err is one of the ErrUnknownAction, ErrPattern* and
// ErrGrantTooLong sentinels.
type GrantError struct {
	Grant  string // the text given (cut to MaxGrantLen bytes)
	Err    error  // which rule it broke
	Detail string // where, e.g. `namespace segment "ord ers" has ' ' at byte 3`
}

func (e *GrantError) Error() string {
	return fmt.Sprintf("grant %q: %v: %s", e.Grant, e.Err, e.Detail)
}

// Unwrap returns Err.
func (e *GrantError) Unwrap() error { return e.Err }

// Grant allows one action on the resources its pattern matches. The zero
// Grant allows nothing. Build grants with ParseGrant; a literal whose
// Resource is not a valid pattern for its Action matches nothing useful and
// is refused by Signer.Mint.
type Grant struct {
	Action Action
	// Resource is a NAMESPACE/STREAM pattern, or "*" for a node action.
	Resource string
}

// ParseGrant reads ACTION:RESOURCE strictly: a known action, a resource of
// the form its action takes, each segment 1 to wire.MaxNameLen bytes of
// [A-Za-z0-9._-*] and not "." or "..". The error is a *GrantError saying
// which rule the text broke.
func ParseGrant(s string) (Grant, error) {
	fail := func(err error, format string, args ...any) (Grant, error) {
		text := s
		if len(text) > MaxGrantLen {
			text = text[:MaxGrantLen] + "…"
		}
		return Grant{}, &GrantError{Grant: text, Err: err, Detail: fmt.Sprintf(format, args...)}
	}
	if len(s) > MaxGrantLen {
		return fail(ErrGrantTooLong, "%d bytes, at most %d", len(s), MaxGrantLen)
	}
	name, resource, ok := strings.Cut(s, ":")
	if !ok {
		return fail(ErrPatternMalformed, "no ':' between action and resource (want ACTION:NAMESPACE/STREAM)")
	}
	action, err := ParseAction(name)
	if err != nil {
		return fail(ErrUnknownAction, "%q is not one of %s", name, strings.Join(actionNames[1:], ", "))
	}
	if action.IsNode() {
		if resource != nodeResource {
			return fail(ErrPatternMalformed, "%s takes resource %q, got %q", action, nodeResource, resource)
		}
		return Grant{Action: action, Resource: resource}, nil
	}
	scope := resource
	if action.isCacheAction() && strings.Count(resource, "/") >= 2 {
		var keys string
		scope, keys = splitKeys(resource)
		if detail, err := checkKeyPattern(keys); err != nil {
			return fail(err, "%s", detail)
		}
	}
	ns, stream, ok := strings.Cut(scope, "/")
	if !ok || strings.Contains(stream, "/") {
		return fail(ErrPatternMalformed, "resource %q must be NAMESPACE/STREAM, one '/'", resource)
	}
	for _, seg := range [...]struct{ what, v string }{{"namespace", ns}, {"stream", stream}} {
		if detail, err := checkSegment(seg.what, seg.v); err != nil {
			return fail(err, "%s", detail)
		}
	}
	return Grant{Action: action, Resource: resource}, nil
}

// checkSegment checks one segment of a resource pattern.
func checkSegment(what, v string) (detail string, err error) {
	switch {
	case v == "":
		return what + " segment is empty (use * for any)", ErrPatternEmptySegment
	case len(v) > wire.MaxNameLen:
		return fmt.Sprintf("%s segment is %d bytes, at most %d", what, len(v), wire.MaxNameLen), ErrGrantTooLong
	case v == "." || v == "..":
		return fmt.Sprintf("%s segment %q is a reserved name", what, v), ErrPatternMalformed
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; c != '*' && !nameChar(c) {
			return fmt.Sprintf("%s segment %q has %q at byte %d; use letters, digits, '.', '_', '-' or '*'", what, v, c, i), ErrPatternCharacter
		}
	}
	return "", nil
}

// MustParseGrant is ParseGrant for grants written in code; it panics on a
// bad one.
func MustParseGrant(s string) Grant {
	g, err := ParseGrant(s)
	if err != nil {
		panic(err)
	}
	return g
}

// String returns the grant's text, ACTION:RESOURCE, which ParseGrant reads
// back to the same Grant.
func (g Grant) String() string { return g.Action.String() + ":" + g.Resource }

// MarshalText writes the grant's text; a grant ParseGrant would refuse is
// an error.
func (g Grant) MarshalText() ([]byte, error) {
	if err := g.validate(); err != nil {
		return nil, err
	}
	return []byte(g.String()), nil
}

// UnmarshalText reads a grant's text, as ParseGrant.
func (g *Grant) UnmarshalText(b []byte) error {
	v, err := ParseGrant(string(b))
	if err != nil {
		return err
	}
	*g = v
	return nil
}

// validate checks a Grant built as a literal.
func (g Grant) validate() error {
	_, err := ParseGrant(g.String())
	return err
}

// Allows reports whether g allows action on stream namespace/stream. A node
// action is never allowed here (see AllowsNode), nor is a name that is
// empty or holds characters no Felix name may.
//
// A cache grant naming keys allows nothing here: only what names the
// keys it covers (AllowsKeys).
func (g Grant) Allows(action Action, namespace, stream string) bool {
	if action != g.Action || action.IsNode() || !action.Valid() {
		return false
	}
	if _, keys := splitKeys(g.Resource); action.isCacheAction() && keys != "" {
		return false
	}
	nsPat, streamPat, ok := strings.Cut(g.Resource, "/")
	return ok && matchSegment(nsPat, namespace) && matchSegment(streamPat, stream)
}

// AllowsNode reports whether g allows the node action.
func (g Grant) AllowsNode(action Action) bool {
	return action == g.Action && action.IsNode() && g.Resource == nodeResource
}

// matchSegment matches one name against one segment pattern, where '*'
// matches any run of name characters. The name must be non-empty and made
// of name characters only; a pattern with '/' matches nothing.
//
// It is the usual greedy glob with one backtrack point (the last '*'):
// O(len(pattern)·len(name)) at worst, and both are at most MaxNameLen.
func matchSegment(pattern, name string) bool {
	if name == "" || len(name) > wire.MaxNameLen {
		return false
	}
	for i := 0; i < len(name); i++ {
		if !nameChar(name[i]) {
			return false
		}
	}
	p, n := 0, 0
	star, starN := -1, 0
	for n < len(name) {
		switch {
		case p < len(pattern) && pattern[p] == '*':
			star, starN = p, n
			p++
		case p < len(pattern) && pattern[p] == name[n]:
			p++
			n++
		case star >= 0:
			starN++
			p, n = star+1, starN
		default:
			return false
		}
	}
	for p < len(pattern) && pattern[p] == '*' {
		p++
	}
	return p == len(pattern)
}

// nameChar reports whether c may appear in a Felix name (wire.ValidateName).
func nameChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-'
}
