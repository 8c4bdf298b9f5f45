// Package auth decides who a client is and what it may do: it verifies
// Felix tokens (signed JWTs) against a set of public keys, turns them into a
// Principal (a tenant, a subject and grants), and mints tokens with a local
// signing key.
//
// It is self-contained: it knows no broker, transport, stream or actor, and
// imports only wire (for the unauthenticated error code and name
// validation). The broker calls it in two places, both at the service
// boundary: Verifier.Verify when a connection authenticates (or
// re-authenticates), and Principal.Allows / Principal.AllowsNode before each
// operation. Node grants are the operator's: they hold for the node as a
// whole only in a token whose key is not restricted to tenants
// (Principal.TenantKey, Principal.CheckNodeTenant). Expiry is the caller's to enforce over time: Verify checks the
// token at the instant it is given, and Principal.Expires says when its
// rights end.
//
// A token is a JWS in compact form signed with EdDSA (Ed25519), ES256
// (ECDSA P-256) or RS256 (RSA of at least 2048 bits); nothing else is
// accepted, so "alg": "none" and HMAC (including HS256 keyed with a public
// key, the classic algorithm-confusion attack) are refused before any key is
// touched. Its claims:
//
//	tenant  required; a valid Felix name (wire.ValidateName)
//	grants  an array of grant strings, ACTION:RESOURCE (see ParseGrant)
//	exp     required
//	aud     must contain the verifier's audience (DefaultAudience, "felix")
//	nbf     honoured when present
//	iat     when present, not in the future
//	iss     carried, not checked
//	sub     becomes Principal.Subject
//
// Times are compared with DefaultLeeway (30 s) of tolerance for clock skew.
//
// Parsing and signature verification are github.com/go-jose/go-jose/v4's;
// this package holds no cryptography of its own.
package auth
