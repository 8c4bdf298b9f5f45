package kafka

import (
	"errors"
	"strings"
	"testing"
)

// TestParseOAuthBearer: the tenant comes from the authorization id, else
// the tenant extension; the token from auth=Bearer; anything RFC 7628
// does not allow, or without a tenant or a token, is ErrBadOAuthBearer.
func TestParseOAuthBearer(t *testing.T) {
	tests := []struct {
		name, give    string
		tenant, token string
		wantMalformed bool
	}{
		{"authzid", "n,a=acme,\x01auth=Bearer tok\x01\x01", "acme", "tok", false},
		{"extension", "n,,\x01auth=Bearer tok\x01tenant=acme\x01\x01", "acme", "tok", false},
		{"authzid over the extension", "y,a=acme,\x01tenant=other\x01auth=bearer tok\x01\x01", "acme", "tok", false},
		{"escaped authzid", "n,a=a=2Cb=3Dc,\x01auth=Bearer tok\x01\x01", "a,b=c", "tok", false},
		{"no tenant", "n,,\x01auth=Bearer tok\x01\x01", "", "", true},
		{"no token", "n,a=acme,\x01\x01", "", "", true},
		{"two tokens", "n,a=acme,\x01auth=Bearer a\x01auth=Bearer b\x01\x01", "", "", true},
		{"not Bearer", "n,a=acme,\x01auth=Basic tok\x01\x01", "", "", true},
		{"channel binding", "p=tls-unique,,\x01auth=Bearer tok\x01\x01", "", "", true},
		{"unclosed", "n,a=acme,\x01auth=Bearer tok\x01", "", "", true},
		{"bad key", "n,a=acme,\x01au-th=x\x01auth=Bearer tok\x01\x01", "", "", true},
		{"bad escape", "n,a=a=2D,\x01auth=Bearer tok\x01\x01", "", "", true},
		{"no pairs", "n,a=acme,", "", "", true},
		{"too many pairs", "n,a=acme,\x01auth=Bearer tok\x01" + strings.Repeat("x=y\x01", 70) + "\x01", "", "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tenant, token, err := parseOAuthBearer([]byte(tt.give))
			if tt.wantMalformed {
				if !errors.Is(err, ErrBadOAuthBearer) {
					t.Fatalf("parseOAuthBearer(%q) = %q, %q, %v; want ErrBadOAuthBearer", tt.give, tenant, token, err)
				}
				return
			}
			if err != nil || tenant != tt.tenant || token != tt.token {
				t.Fatalf("parseOAuthBearer(%q) = %q, %q, %v; want %q, %q", tt.give, tenant, token, err, tt.tenant, tt.token)
			}
		})
	}
}

// FuzzOAuthBearer: parseOAuthBearer never panics; what it accepts has a
// tenant and a token, and anything it refuses is ErrBadOAuthBearer.
func FuzzOAuthBearer(f *testing.F) {
	f.Add([]byte("n,a=acme,\x01auth=Bearer tok\x01\x01"))
	f.Add([]byte("n,,\x01auth=Bearer tok\x01tenant=acme\x01\x01"))
	f.Add([]byte("y,a=a=2Cb,\x01host=x\x01port=9\x01auth=Bearer t\x01\x01"))
	f.Add([]byte("n,a=,\x01\x01"))
	f.Fuzz(func(t *testing.T, msg []byte) {
		tenant, token, err := parseOAuthBearer(msg)
		if err != nil {
			if !errors.Is(err, ErrBadOAuthBearer) {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		if tenant == "" || token == "" {
			t.Fatalf("accepted %q with tenant %q token %q", msg, tenant, token)
		}
	})
}
