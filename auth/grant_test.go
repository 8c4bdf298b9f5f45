package auth

import (
	"errors"
	"strings"
	"testing"

	"github.com/getfelix/felix-go/wire"
)

func TestParseAction(t *testing.T) {
	for _, a := range Actions() {
		got, err := ParseAction(a.String())
		if err != nil || got != a {
			t.Errorf("ParseAction(%q) = %v, %v; want %v", a.String(), got, err, a)
		}
	}
	for _, give := range []string{"", "stream", "stream.*", "Stream.publish", "cache.*", "Cache.read", "node.view "} {
		if a, err := ParseAction(give); !errors.Is(err, ErrUnknownAction) {
			t.Errorf("ParseAction(%q) = %v, %v; want ErrUnknownAction", give, a, err)
		}
	}
	if got := len(Actions()); got != 10 {
		t.Errorf("len(Actions()) = %d, want 10", got)
	}
	for _, a := range []Action{ActionCacheRead, ActionCacheWrite, ActionCacheManage} {
		if a.IsNode() {
			t.Errorf("%s is a node action; want one on caches in a namespace", a)
		}
	}
	if Action(0).Valid() || Action(0).IsNode() || Action(99).IsNode() {
		t.Error("the zero or an undeclared action is valid or a node action")
	}
}

func TestParseGrant(t *testing.T) {
	long := strings.Repeat("a", wire.MaxNameLen+1)
	tests := []struct {
		give    string
		wantErr error // nil: it parses and round-trips
	}{
		{"stream.publish:orders/eu", nil},
		{"stream.subscribe:orders/*", nil},
		{"stream.subscribe:orders/eu-*", nil},
		{"stream.manage:*/*", nil},
		{"group.consume:ns/*.events", nil},
		{"group.manage:a*b*c/x", nil},
		{"node.view:*", nil},
		{"node.manage:*", nil},
		{"stream.publish:" + strings.Repeat("n", wire.MaxNameLen) + "/" + strings.Repeat("s", wire.MaxNameLen), nil},

		{"", ErrPatternMalformed},
		{"stream.publish", ErrPatternMalformed},
		{"stream.publish:orders", ErrPatternMalformed},
		{"stream.publish:a/b/c", ErrPatternMalformed},
		{"stream.publish:./x", ErrPatternMalformed},
		{"stream.publish:x/..", ErrPatternMalformed},
		{"node.view:*/*", ErrPatternMalformed},
		{"node.manage:", ErrPatternMalformed},
		{"stream.publish:orders/", ErrPatternEmptySegment},
		{"stream.publish:/x", ErrPatternEmptySegment},
		{"stream.publish:/", ErrPatternEmptySegment},
		{"stream.publish:ord ers/x", ErrPatternCharacter},
		{"stream.publish:orders/x?", ErrPatternCharacter},
		{"stream.publish:orders/é", ErrPatternCharacter},
		{"stream.publish:orders/x\x00", ErrPatternCharacter},
		{"stream.publish:a/b:c", ErrPatternCharacter},
		{"stream.push:a/b", ErrUnknownAction},
		{"stream.*:a/b", ErrUnknownAction},
		{":a/b", ErrUnknownAction},
		{"stream.publish:" + long + "/x", ErrGrantTooLong},
		{"stream.publish:x/" + long, ErrGrantTooLong},
		{strings.Repeat("x", MaxGrantLen+1), ErrGrantTooLong},
	}
	for _, tt := range tests {
		g, err := ParseGrant(tt.give)
		if tt.wantErr == nil {
			if err != nil {
				t.Errorf("ParseGrant(%.40q): %v, want success", tt.give, err)
			} else if g.String() != tt.give {
				t.Errorf("ParseGrant(%.40q).String() = %q, want the input back", tt.give, g)
			}
			continue
		}
		var ge *GrantError
		if !errors.Is(err, tt.wantErr) || !errors.As(err, &ge) {
			t.Errorf("ParseGrant(%.40q) = %v, %v; want a *GrantError wrapping %v", tt.give, g, err, tt.wantErr)
		}
	}
}

func TestGrantErrorSaysWhat(t *testing.T) {
	_, err := ParseGrant("stream.publish:ord ers/x")
	if want := `grant "stream.publish:ord ers/x": auth: character not allowed in resource pattern: namespace segment "ord ers" has ' ' at byte 3`; err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("error = %v, want it to start %q", err, want)
	}
}

func TestGrantAllows(t *testing.T) {
	tests := []struct {
		grant     string
		action    Action
		ns, strm  string
		wantAllow bool
	}{
		{"stream.publish:orders/eu", ActionStreamPublish, "orders", "eu", true},
		{"stream.publish:orders/eu", ActionStreamPublish, "orders", "eu2", false},
		{"stream.publish:orders/eu", ActionStreamSubscribe, "orders", "eu", false},
		{"stream.publish:orders/eu", ActionStreamPublish, "Orders", "eu", false},
		{"stream.subscribe:orders/*", ActionStreamSubscribe, "orders", "anything.at_all-1", true},
		{"stream.subscribe:orders/*", ActionStreamSubscribe, "orders2", "x", false},
		{"stream.subscribe:orders/*", ActionStreamSubscribe, "orders", "", false},
		{"stream.subscribe:orders/*", ActionStreamSubscribe, "orders", "a/b", false},
		{"stream.subscribe:orders/*", ActionStreamSubscribe, "orders", "a b", false},
		{"stream.subscribe:orders/eu-*", ActionStreamSubscribe, "orders", "eu-", true},
		{"stream.subscribe:orders/eu-*", ActionStreamSubscribe, "orders", "eu-west", true},
		{"stream.subscribe:orders/eu-*", ActionStreamSubscribe, "orders", "us-west", false},
		{"stream.subscribe:orders/*-west", ActionStreamSubscribe, "orders", "eu-west", true},
		{"stream.subscribe:orders/*-west", ActionStreamSubscribe, "orders", "eu-west-2", false},
		{"group.manage:a*b*c/x", ActionGroupManage, "aXXbYYbc", "x", true},
		{"group.manage:a*b*c/x", ActionGroupManage, "abc", "x", true},
		{"group.manage:a*b*c/x", ActionGroupManage, "acb", "x", false},
		{"stream.manage:*/*", ActionStreamManage, "any", "thing", true},
		{"stream.manage:*/*", ActionStreamManage, "any", "", false},
		{"node.view:*", ActionNodeView, "", "", false}, // node actions only through AllowsNode
		{"stream.manage:*/*", ActionNodeView, "any", "thing", false},
	}
	for _, tt := range tests {
		g := MustParseGrant(tt.grant)
		if got := g.Allows(tt.action, tt.ns, tt.strm); got != tt.wantAllow {
			t.Errorf("%s.Allows(%s, %q, %q) = %v, want %v", tt.grant, tt.action, tt.ns, tt.strm, got, tt.wantAllow)
		}
	}
	if !MustParseGrant("node.view:*").AllowsNode(ActionNodeView) || MustParseGrant("node.view:*").AllowsNode(ActionNodeManage) {
		t.Error("node.view:* must allow node.view and only it")
	}
	if MustParseGrant("stream.manage:*/*").AllowsNode(ActionStreamManage) {
		t.Error("a stream grant allowed a node check")
	}
	if (Grant{}).Allows(0, "a", "b") || (Grant{}).AllowsNode(0) {
		t.Error("the zero Grant allows something")
	}
}

func TestPrincipal(t *testing.T) {
	p := &Principal{Tenant: "acme", Grants: []Grant{MustParseGrant("stream.publish:orders/*"), MustParseGrant("node.view:*")}}
	if !p.Allows(ActionStreamPublish, "orders", "eu") || p.Allows(ActionStreamSubscribe, "orders", "eu") {
		t.Error("Allows does not follow the grants")
	}
	if !p.AllowsNode(ActionNodeView) || p.AllowsNode(ActionNodeManage) {
		t.Error("AllowsNode does not follow the grants")
	}
	if err := p.Check(ActionStreamPublish, wire.Scope{Tenant: "acme", Namespace: "orders", Stream: "eu"}); err != nil {
		t.Errorf("Check on own tenant: %v", err)
	}
	for _, scope := range []wire.Scope{{Tenant: "other", Namespace: "orders", Stream: "eu"}, {Tenant: "acme", Namespace: "billing", Stream: "eu"}} {
		err := p.Check(ActionStreamPublish, scope)
		if !errors.Is(err, ErrNotPermitted) || !errors.Is(err, &wire.Error{Code: wire.CodeForbidden}) {
			t.Errorf("Check(%s) = %v, want forbidden wrapping ErrNotPermitted", scope, err)
		}
	}
	if err := p.CheckNode(ActionNodeManage); !errors.Is(err, ErrNotPermitted) {
		t.Errorf("CheckNode(node.manage) = %v, want ErrNotPermitted", err)
	}
	var nilP *Principal
	if nilP.Allows(ActionStreamPublish, "a", "b") || nilP.AllowsNode(ActionNodeView) || !nilP.Expired(p.Expires) {
		t.Error("a nil Principal allows something or has not expired")
	}
	admin := &Principal{Tenant: DefaultTenant, Grants: AdminGrants()}
	for _, a := range Actions() {
		if a.IsNode() && !admin.AllowsNode(a) || !a.IsNode() && !admin.Allows(a, "any", "stream") {
			t.Errorf("AdminGrants do not allow %s", a)
		}
	}
}
