// Package clustercerts mints the certificates members of a cluster present
// to each other on the peer link (peerlink, mutual TLS) and to etcd: a
// cluster CA, one leaf per member, usable both as server and as client,
// and etcd's server certificate. `felix cluster
// certs` writes them for operators, `felix dev cluster` and the test
// harnesses for their members. Standard library only.
package clustercerts

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Validity is how long minted certificates last: long enough not to
// surprise a test cluster, short enough that an operator plans a rotation.
const Validity = 365 * 24 * time.Hour

// The files in a certificate directory.
const (
	CAFile    = "ca.pem"
	CAKeyFile = "ca-key.pem"
)

// CertFile and KeyFile are a member's certificate and key in a directory.
func CertFile(node string) string { return node + ".pem" }
func KeyFile(node string) string  { return node + "-key.pem" }

// Files are a certificate's paths with its CA's: for a member, the three
// knobs it sets (cluster_tls_ca, cluster_tls_cert, cluster_tls_key).
type Files struct{ CA, Cert, Key string }

// EtcdName names etcd's server certificate in a directory (EtcdName.pem,
// EtcdName-key.pem). A member's node id may not be it.
const EtcdName = "etcd"

// CA is a cluster certificate authority.
type CA struct {
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
	Pool *x509.CertPool // holds Cert: what a member verifies peers against
}

// NewCA makes a CA in memory, valid from an hour ago (clocks of members
// differ a little) for Validity.
func NewCA(name string) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(Validity),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return newCA(cert, key), nil
}

func newCA(cert *x509.Certificate, key *ecdsa.PrivateKey) *CA {
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &CA{Cert: cert, Key: key, Pool: pool}
}

// LeafOption changes a leaf before it is signed (tests make broken ones).
type LeafOption func(*x509.Certificate)

// WithUsages replaces the leaf's extended key usages.
func WithUsages(u ...x509.ExtKeyUsage) LeafOption {
	return func(c *x509.Certificate) { c.ExtKeyUsage = u }
}

// WithHosts replaces the leaf's subject alternative names with hosts:
// IP addresses as IP SANs, anything else as a DNS name. A client that
// checks names (etcd's does) accepts the leaf only on these.
func WithHosts(hosts ...string) LeafOption {
	return func(c *x509.Certificate) {
		c.IPAddresses, c.DNSNames = nil, nil
		for _, h := range hosts {
			if ip := net.ParseIP(h); ip != nil {
				c.IPAddresses = append(c.IPAddresses, ip)
			} else {
				c.DNSNames = append(c.DNSNames, h)
			}
		}
	}
}

// Leaf issues a member certificate named name with both the ServerAuth and
// ClientAuth usages (each member dials and is dialled on the peer link),
// name (the member's node id) as Common Name and DNS SAN, and 127.0.0.1 as
// IP SAN. peerlink checks the chain and the node id, not host names: the
// IP SAN is for tools that do.
func (c *CA) Leaf(name string, opts ...LeafOption) (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(Validity),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		DNSNames:    []string{name},
	}
	for _, o := range opts {
		o(tmpl)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.Cert, &key.PublicKey, c.Key)
	if err != nil {
		return tls.Certificate{}, err
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, nil
}

// serial is a random 128-bit serial number, as RFC 5280 advises: two
// leaves minted in the same nanosecond must still differ.
func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return big.NewInt(time.Now().UnixNano())
	}
	return n
}

// Ensure makes sure dir holds the CA and a certificate for each node,
// minting what is missing and keeping what is there (a second run, or
// more nodes, reuses the CA), and returns each node's files.
func Ensure(dir string, nodes []string) (map[string]Files, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("clustercerts: make %s: %w", dir, err)
	}
	ca, err := ensureCA(dir)
	if err != nil {
		return nil, err
	}
	out := make(map[string]Files, len(nodes))
	for _, node := range nodes {
		f := Files{CA: filepath.Join(dir, CAFile), Cert: filepath.Join(dir, CertFile(node)), Key: filepath.Join(dir, KeyFile(node))}
		if err := ensureLeaf(ca, node, f); err != nil {
			return nil, err
		}
		out[node] = f
	}
	return out, nil
}

// EnsureEtcd makes sure dir holds the CA and etcd's server certificate
// (EtcdName.pem), valid for each of hosts (the names and addresses
// members dial etcd at), minting what is missing, and returns its files.
// The certificate carries serverAuth and clientAuth, so an etcd cluster's
// members may present it to each other too. One already there that does
// not name every host is refused rather than replaced: etcd may be
// serving it.
func EnsureEtcd(dir string, hosts []string) (Files, error) {
	if len(hosts) == 0 {
		return Files{}, errors.New("clustercerts: etcd's certificate needs the hosts members dial it at")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return Files{}, fmt.Errorf("clustercerts: make %s: %w", dir, err)
	}
	ca, err := ensureCA(dir)
	if err != nil {
		return Files{}, err
	}
	f := Files{CA: filepath.Join(dir, CAFile), Cert: filepath.Join(dir, CertFile(EtcdName)), Key: filepath.Join(dir, KeyFile(EtcdName))}
	if exists(f.Cert) && exists(f.Key) {
		return f, checkHosts(f, hosts)
	}
	leaf, err := ca.Leaf(EtcdName, WithHosts(hosts...))
	if err != nil {
		return Files{}, err
	}
	return f, WritePair(f.Cert, f.Key, leaf)
}

// checkHosts says which of hosts f's certificate is not valid for.
func checkHosts(f Files, hosts []string) error {
	path := f.Cert
	pair, err := tls.LoadX509KeyPair(f.Cert, f.Key)
	if err != nil {
		return fmt.Errorf("clustercerts: %s: %w", path, err)
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return fmt.Errorf("clustercerts: %s: %w", path, err)
	}
	for _, h := range hosts {
		if leaf.VerifyHostname(h) != nil {
			return fmt.Errorf("clustercerts: %s is not valid for %s (it names %s): remove it and its key to mint one for the hosts given",
				path, h, strings.Join(append(leaf.DNSNames, ipStrings(leaf.IPAddresses)...), ", "))
		}
	}
	return nil
}

func ipStrings(ips []net.IP) []string {
	out := make([]string, len(ips))
	for i, ip := range ips {
		out[i] = ip.String()
	}
	return out
}

// LoadCA loads dir's CA (CAFile and CAKeyFile).
func LoadCA(dir string) (*CA, error) {
	certPath, keyPath := filepath.Join(dir, CAFile), filepath.Join(dir, CAKeyFile)
	pair, err := tls.LoadX509KeyPair(certPath, keyPath)
	if err != nil {
		return nil, fmt.Errorf("clustercerts: load the CA (%s, %s): %w", certPath, keyPath, err)
	}
	key, ok := pair.PrivateKey.(*ecdsa.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("clustercerts: %s is not an ECDSA key", keyPath)
	}
	cert, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return nil, fmt.Errorf("clustercerts: %s: %w", certPath, err)
	}
	return newCA(cert, key), nil
}

// ensureCA loads dir's CA, or mints and writes one when there is none.
func ensureCA(dir string) (*CA, error) {
	certPath, keyPath := filepath.Join(dir, CAFile), filepath.Join(dir, CAKeyFile)
	if exists(certPath) || exists(keyPath) {
		ca, err := LoadCA(dir)
		if err != nil {
			return nil, fmt.Errorf("%w; remove both to mint a new CA (and new member certificates with it)", err)
		}
		return ca, nil
	}
	ca, err := NewCA("felix cluster CA")
	if err != nil {
		return nil, err
	}
	// The key first: a CA certificate without its key would stop the next
	// run from minting members.
	return ca, WritePair(certPath, keyPath, tls.Certificate{Certificate: [][]byte{ca.Cert.Raw}, PrivateKey: ca.Key})
}

// ensureLeaf writes node's certificate and key unless both are there.
func ensureLeaf(ca *CA, node string, f Files) error {
	if exists(f.Cert) && exists(f.Key) {
		return nil
	}
	leaf, err := ca.Leaf(node)
	if err != nil {
		return err
	}
	return WritePair(f.Cert, f.Key, leaf)
}

// WritePair writes an ECDSA certificate and its key as PEM, the key first
// (0600) and the certificate (0644) second.
func WritePair(certPath, keyPath string, c tls.Certificate) error {
	key, ok := c.PrivateKey.(*ecdsa.PrivateKey)
	if !ok {
		return errors.New("clustercerts: only ECDSA keys are written")
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	if err := writePEM(keyPath, "EC PRIVATE KEY", keyDER, 0o600); err != nil {
		return err
	}
	return writePEM(certPath, "CERTIFICATE", c.Certificate[0], 0o644)
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// writePEM writes one PEM block by rename, so a reader never sees half a
// file.
func writePEM(path, kind string, der []byte, mode os.FileMode) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), mode); err != nil {
		return fmt.Errorf("clustercerts: write %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("clustercerts: write %s: %w", path, err)
	}
	return nil
}
