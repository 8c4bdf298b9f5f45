package auth

import (
	"fmt"
	"strings"

	"github.com/getfelix/felix-go/wire"
)

// A cache action's grant may name keys as a third segment,
// NAMESPACE/CACHE/KEYS: an exact key, or a prefix ending in '*' (the only
// wildcard there, and only last). KEYS is 1 to MaxGrantKeyLen bytes of
// printable ASCII other than space; it may hold '/' (keys often do).
//
//	cache.read:config/flags/web.*        keys of cache flags starting "web."
//	cache.write:config/flags/dark-mode   one key
//
// Such a grant allows only what names keys it covers: a get, put or delete
// of one, a commit or state_get whose every key it covers, a list whose
// prefix it covers. Describing or creating a cache needs a grant without
// keys.

// MaxGrantKeyLen bounds a grant's key pattern.
const MaxGrantKeyLen = 256

// isCacheAction reports whether a's grants may name keys.
func (a Action) isCacheAction() bool {
	return a == ActionCacheRead || a == ActionCacheWrite || a == ActionCacheManage
}

// splitKeys cuts a resource into its NAMESPACE/STREAM part and its key
// pattern ("" when it has none).
func splitKeys(resource string) (scope, keys string) {
	ns, rest, _ := strings.Cut(resource, "/")
	stream, keys, _ := strings.Cut(rest, "/")
	return ns + "/" + stream, keys
}

// checkKeyPattern checks a grant's key pattern.
func checkKeyPattern(v string) (detail string, err error) {
	switch {
	case v == "":
		return "key pattern is empty (drop the third segment for every key)", ErrPatternEmptySegment
	case len(v) > MaxGrantKeyLen:
		return fmt.Sprintf("key pattern is %d bytes, at most %d", len(v), MaxGrantKeyLen), ErrGrantTooLong
	}
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c <= ' ' || c > '~' || (c == '*' && i != len(v)-1) {
			return fmt.Sprintf("key pattern %q has %q at byte %d; use printable ASCII, '*' only last", v, c, i), ErrPatternCharacter
		}
	}
	return "", nil
}

// keysCover reports whether pattern covers key (exact, or by its prefix
// before a final '*'); every pattern of a grant without keys is "".
func keysCover(pattern, key string) bool {
	if pattern == "" {
		return true
	}
	if p, ok := strings.CutSuffix(pattern, "*"); ok {
		return strings.HasPrefix(key, p)
	}
	return key == pattern
}

// AllowsKeys reports whether g allows action on cache namespace/stream for
// every one of keys; a grant without keys allows them all. With prefix
// set, keys are prefixes of what will be read (a list): a grant's prefix
// pattern covers a list's prefix that starts with it; an exact key
// covers no list.
func (g Grant) AllowsKeys(action Action, namespace, stream string, prefix bool, keys ...string) bool {
	if !action.isCacheAction() {
		return false
	}
	scope, pattern := splitKeys(g.Resource)
	if !(Grant{Action: g.Action, Resource: scope}).Allows(action, namespace, stream) {
		return false
	}
	if prefix && pattern != "" && !strings.HasSuffix(pattern, "*") {
		return false
	}
	for _, k := range keys {
		if !keysCover(pattern, k) {
			return false
		}
	}
	return true
}

// CheckKeys is Check for a cache action on keys of a cache (see
// Grant.AllowsKeys): some one grant must cover them all.
func (p *Principal) CheckKeys(action Action, scope wire.Scope, prefix bool, keys ...string) error {
	if p != nil && scope.Tenant == p.Tenant {
		for _, g := range p.Grants {
			if g.AllowsKeys(action, scope.Namespace, scope.Stream, prefix, keys...) {
				return nil
			}
		}
	}
	return wire.WrapError(wire.CodeForbidden, ErrNotPermitted, "%s on %s (keys %q)", action, scope, keys)
}
