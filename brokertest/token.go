package brokertest

import (
	"testing"
	"time"

	"github.com/getfelix/felix-go/auth"
	"github.com/getfelix/felix-go/config"
)

// Token mints a token for tenant with the broker's local key (in
// cfg.DataDir, made when the broker started), valid for an hour. With no
// grants it has every right on the tenant.
func Token(tb testing.TB, cfg config.Config, tenant string, grants ...string) string {
	tb.Helper()
	return TokenFor(tb, cfg, tenant, time.Hour, grants...)
}

// TokenFor is Token with its time to live.
func TokenFor(tb testing.TB, cfg config.Config, tenant string, ttl time.Duration, grants ...string) string {
	tb.Helper()
	if cfg.Auth == "none" {
		return ""
	}
	signer, err := auth.LocalSigner(cfg.DataDir)
	if err != nil {
		tb.Fatalf("the broker's local key: %v", err)
	}
	claims := auth.Claims{Tenant: tenant, Grants: auth.AdminGrants()}
	if len(grants) > 0 {
		claims.Grants = nil
		for _, g := range grants {
			claims.Grants = append(claims.Grants, auth.MustParseGrant(g))
		}
	}
	token, _, err := signer.Mint(claims, ttl)
	if err != nil {
		tb.Fatalf("mint a token for %s: %v", tenant, err)
	}
	return token
}
