package auth

import (
	"errors"
	"strings"
	"testing"

	"github.com/getfelix/felix-go/wire"
)

func TestCacheGrantKeys(t *testing.T) {
	p := &Principal{Tenant: "t", Grants: []Grant{
		MustParseGrant("cache.read:config/flags/web.*"),
		MustParseGrant("cache.write:config/flags/dark-mode"),
		MustParseGrant("cache.write:config/all"),
	}}
	flags := wire.Scope{Tenant: "t", Namespace: "config", Stream: "flags"}
	all := wire.Scope{Tenant: "t", Namespace: "config", Stream: "all"}
	tests := []struct {
		name   string
		action Action
		scope  wire.Scope
		prefix bool
		keys   []string
		want   bool
	}{
		{"a key under the prefix", ActionCacheRead, flags, false, []string{"web.theme"}, true},
		{"the prefix itself", ActionCacheRead, flags, false, []string{"web."}, true},
		{"a key outside it", ActionCacheRead, flags, false, []string{"api.theme"}, false},
		{"every key of a state_get covered", ActionCacheRead, flags, false, []string{"web.a", "web.b"}, true},
		{"one key of a state_get outside", ActionCacheRead, flags, false, []string{"web.a", "api.b"}, false},
		{"a list within the prefix", ActionCacheRead, flags, true, []string{"web.th"}, true},
		{"a list wider than the prefix", ActionCacheRead, flags, true, []string{"we"}, false},
		{"the exact key", ActionCacheWrite, flags, false, []string{"dark-mode"}, true},
		{"a longer key than the exact one", ActionCacheWrite, flags, false, []string{"dark-mode2"}, false},
		{"a list under an exact key", ActionCacheWrite, flags, true, []string{"dark-mode"}, false},
		{"a grant without keys covers any", ActionCacheWrite, all, false, []string{"anything/at/all"}, true},
		{"the wrong action", ActionCacheWrite, flags, false, []string{"web.theme"}, false},
		{"another tenant", ActionCacheRead, wire.Scope{Tenant: "u", Namespace: "config", Stream: "flags"}, false, []string{"web.x"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := p.CheckKeys(tt.action, tt.scope, tt.prefix, tt.keys...)
			if got := err == nil; got != tt.want {
				t.Fatalf("CheckKeys(%s, %s, prefix %v, %q) = %v; want allowed %v", tt.action, tt.scope, tt.prefix, tt.keys, err, tt.want)
			}
			if err != nil && !errors.Is(err, wire.ErrForbidden) {
				t.Fatalf("refusal %v is not forbidden", err)
			}
		})
	}
	// A grant naming keys is no right on the cache as a whole.
	if p.Allows(ActionCacheRead, "config", "flags") || !p.Allows(ActionCacheWrite, "config", "all") {
		t.Fatal("Allows: a key-scoped grant allowed the whole cache, or a whole-cache grant did not")
	}
}

func TestParseCacheGrantKeys(t *testing.T) {
	for _, give := range []string{"cache.read:ns/c/a/b/c*", "cache.write:ns/*/k", "cache.manage:ns/c"} {
		g, err := ParseGrant(give)
		if err != nil || g.String() != give {
			t.Errorf("ParseGrant(%q) = %v, %v; want it read back as itself", give, g, err)
		}
	}
	for _, tt := range []struct {
		give string
		want error
	}{
		{"cache.read:ns/c/", ErrPatternEmptySegment},
		{"cache.read:ns/c/a*b", ErrPatternCharacter},
		{"cache.read:ns/c/a b", ErrPatternCharacter},
		{"cache.read:ns/c/" + strings.Repeat("k", MaxGrantKeyLen+1), ErrGrantTooLong},
		{"stream.publish:ns/s/k", ErrPatternMalformed},
	} {
		if _, err := ParseGrant(tt.give); !errors.Is(err, tt.want) {
			t.Errorf("ParseGrant(%.40q) = %v; want %v", tt.give, err, tt.want)
		}
	}
}
