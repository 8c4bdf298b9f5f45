package config

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"slices"
)

// The peer link's knobs (cluster_peer_*, cluster_tls_*): checked by
// Validate for their shape, and by PeerTLS, which reads the files, for
// what they hold. Both name the knob to fix.

// validatePeer checks the peer link's knobs without reading files.
func (c Config) validatePeer(ck *checker) {
	set := map[string]string{
		"cluster_peer_listen": c.ClusterPeerListen, "cluster_peer_advertise": c.ClusterPeerAdvertise,
		"cluster_tls_ca": c.ClusterTLSCA, "cluster_tls_cert": c.ClusterTLSCert, "cluster_tls_key": c.ClusterTLSKey,
	}
	if c.ClusterEtcd == "" {
		for _, key := range slices.Sorted(maps.Keys(set)) {
			if set[key] != "" {
				ck.bad(key, "is set but cluster_etcd is not: only a cluster member has a peer link; drop it or set cluster_etcd")
			}
		}
		return
	}
	n := 0
	for _, v := range []string{c.ClusterTLSCA, c.ClusterTLSCert, c.ClusterTLSKey} {
		if v != "" {
			n++
		}
	}
	if n != 0 && n != 3 {
		ck.bad("cluster_tls_ca", "cluster_tls_ca, cluster_tls_cert and cluster_tls_key go together (felix cluster certs makes all three); %d of 3 are set", n)
	}
	if n == 0 && (c.ClusterPeerListen != "" || c.ClusterPeerAdvertise != "") {
		ck.bad("cluster_peer_listen", "and cluster_peer_advertise need cluster_tls_ca, cluster_tls_cert and cluster_tls_key: without them the peer link does not start")
	}
	if c.ClusterPeerListen != "" {
		if _, _, err := net.SplitHostPort(c.ClusterPeerListen); err != nil {
			ck.bad("cluster_peer_listen", "is not host:port: %v", err)
		}
	}
	if c.ClusterPeerAdvertise != "" {
		if host, port, err := net.SplitHostPort(c.ClusterPeerAdvertise); err != nil || host == "" || port == "0" {
			ck.bad("cluster_peer_advertise", "must be host:port with a host and a port other members can dial, got %q", c.ClusterPeerAdvertise)
		}
	}
}

// PeerTLSSet says whether the peer link's certificate knobs are set (the
// link starts only then).
func (c Config) PeerTLSSet() bool {
	return c.ClusterTLSCA != "" && c.ClusterTLSCert != "" && c.ClusterTLSKey != ""
}

// PeerListen is the peer link's listen address: cluster_peer_listen, or
// listen's host with port 0.
func (c Config) PeerListen() string {
	if c.ClusterPeerListen != "" {
		return c.ClusterPeerListen
	}
	host, _, err := net.SplitHostPort(c.Listen)
	if err != nil {
		host = ""
	}
	return net.JoinHostPort(host, "0")
}

// ErrPeerTLS is a peer link certificate the member cannot use.
var ErrPeerTLS = errors.New("config: peer link certificate")

// PeerTLS loads the peer link's certificate and CA and checks what the
// link needs of them: the key matches the certificate, the certificate
// chains to the CA, and it carries both the serverAuth and the clientAuth
// extended key usages (every member both dials and is dialled). A peer
// would refuse a certificate failing any of these, on every connection;
// refusing it at startup says which file to fix.
func (c Config) PeerTLS() (tls.Certificate, *x509.CertPool, error) {
	pem, err := os.ReadFile(c.ClusterTLSCA)
	if err != nil {
		return tls.Certificate{}, nil, fmt.Errorf("%w: cluster_tls_ca: %w", ErrPeerTLS, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return tls.Certificate{}, nil, fmt.Errorf("%w: cluster_tls_ca %s holds no PEM certificate", ErrPeerTLS, c.ClusterTLSCA)
	}
	pair, err := tls.LoadX509KeyPair(c.ClusterTLSCert, c.ClusterTLSKey)
	if err != nil {
		return tls.Certificate{}, nil, fmt.Errorf("%w: cluster_tls_cert %s with cluster_tls_key %s: %w", ErrPeerTLS, c.ClusterTLSCert, c.ClusterTLSKey, err)
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return tls.Certificate{}, nil, fmt.Errorf("%w: cluster_tls_cert %s: %w", ErrPeerTLS, c.ClusterTLSCert, err)
	}
	pair.Leaf = leaf
	inter := x509.NewCertPool()
	for _, der := range pair.Certificate[1:] {
		if ic, err := x509.ParseCertificate(der); err == nil {
			inter.AddCert(ic)
		}
	}
	for _, u := range []struct {
		usage x509.ExtKeyUsage
		name  string
	}{{x509.ExtKeyUsageServerAuth, "serverAuth"}, {x509.ExtKeyUsageClientAuth, "clientAuth"}} {
		if !slices.Contains(leaf.ExtKeyUsage, u.usage) && !slices.Contains(leaf.ExtKeyUsage, x509.ExtKeyUsageAny) {
			return tls.Certificate{}, nil, fmt.Errorf("%w: cluster_tls_cert %s lacks the %s extended key usage: a member's certificate needs serverAuth and clientAuth (felix cluster certs makes such certificates)", ErrPeerTLS, c.ClusterTLSCert, u.name)
		}
		_, err := leaf.Verify(x509.VerifyOptions{Roots: pool, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{u.usage}})
		if err != nil {
			return tls.Certificate{}, nil, fmt.Errorf("%w: cluster_tls_cert %s does not chain to cluster_tls_ca %s (use the CA that signed it, or a certificate that CA signed): %w", ErrPeerTLS, c.ClusterTLSCert, c.ClusterTLSCA, err)
		}
	}
	return pair, pool, nil
}

// ValidNodeID says whether id is usable as cluster_node_id (letters,
// digits, '-', '_' and '.', at most 64): the CLI checks node ids it names
// files after with it.
func ValidNodeID(id string) bool { return validNodeID(id) }
