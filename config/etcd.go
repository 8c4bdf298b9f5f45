package config

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/url"
	"os"
	"slices"
	"strings"
)

// The member's etcd client knobs (cluster_etcd, cluster_etcd_tls_*,
// cluster_etcd_user, cluster_etcd_password_file,
// cluster_etcd_allow_plaintext): checked by Validate for their shape, and
// by EtcdTLS and EtcdPassword, which read the files, for what they hold.
// Whoever writes to etcd decides which member owns a shard and what a
// stream's definition is, so plaintext to another machine is refused
// unless asked for.

// maxEtcdPasswordBytes bounds what EtcdPassword reads: a password file is
// one line, and a path mistyped to a large file must not be read whole.
const maxEtcdPasswordBytes = 4096

// validateEtcd checks the etcd client's knobs without reading files.
func (c Config) validateEtcd(ck *checker) {
	set := map[string]string{
		"cluster_etcd_tls_ca": c.ClusterEtcdTLSCA, "cluster_etcd_tls_cert": c.ClusterEtcdTLSCert, "cluster_etcd_tls_key": c.ClusterEtcdTLSKey,
		"cluster_etcd_user": c.ClusterEtcdUser, "cluster_etcd_password_file": c.ClusterEtcdPasswordFile,
	}
	if c.ClusterEtcdAllowPlaintext {
		set["cluster_etcd_allow_plaintext"] = "true"
	}
	if c.ClusterEtcd == "" {
		for _, key := range slices.Sorted(maps.Keys(set)) {
			if set[key] != "" {
				ck.bad(key, "is set but cluster_etcd is not: only a cluster member talks to etcd; drop it or set cluster_etcd")
			}
		}
		return
	}
	if (c.ClusterEtcdTLSCert == "") != (c.ClusterEtcdTLSKey == "") {
		ck.bad("cluster_etcd_tls_cert", "and cluster_etcd_tls_key go together: set both, or neither")
	}
	if (c.ClusterEtcdUser == "") != (c.ClusterEtcdPasswordFile == "") {
		ck.bad("cluster_etcd_user", "and cluster_etcd_password_file go together: set both, or neither")
	}
	c.validateEtcdEndpoints(ck)
}

// validateEtcdEndpoints checks each cluster_etcd URL. etcd's client takes
// TLS from the scheme: it drops a configured TLS for an http:// endpoint,
// and dials every endpoint as the first one's scheme says, so a mix or
// http:// with TLS knobs would reach etcd in plaintext without a word.
func (c Config) validateEtcdEndpoints(ck *checker) {
	tlsSet := c.ClusterEtcdTLSCA != "" || c.ClusterEtcdTLSCert != ""
	schemes := map[string]bool{}
	errsBefore := len(ck.errs)
	for _, ep := range strings.Split(c.ClusterEtcd, ",") {
		if ep = strings.TrimSpace(ep); ep == "" {
			continue // as the broker splits the list
		}
		u, err := url.Parse(ep)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") {
			ck.bad("cluster_etcd", "%q is not an etcd client URL: write http://host:port or https://host:port", ep)
			continue
		}
		host, _, err := net.SplitHostPort(u.Host)
		if err != nil || host == "" {
			ck.bad("cluster_etcd", "%q has no host:port: write %s://host:port", ep, u.Scheme)
			continue
		}
		schemes[u.Scheme] = true
		switch {
		case u.Scheme == "http" && tlsSet:
			ck.bad("cluster_etcd", "%s is http:// but cluster_etcd_tls_* are set: etcd's client would drop TLS for it; write https://", ep)
		case u.Scheme == "http" && !loopbackHost(host) && !c.ClusterEtcdAllowPlaintext:
			ck.bad("cluster_etcd", "%s is plaintext to a host other than loopback: anyone on the path reads and rewrites the cluster's state (owners, definitions, leases); "+
				"serve etcd over TLS and set https:// with cluster_etcd_tls_ca (and cluster_etcd_tls_cert/_key for client certificates), "+
				"or set cluster_etcd_allow_plaintext to accept it", ep)
		}
	}
	if len(schemes) == 0 && len(ck.errs) == errsBefore {
		ck.bad("cluster_etcd", "%q names no endpoint: write etcd's client URLs, comma-separated", c.ClusterEtcd)
	}
	if len(schemes) > 1 {
		ck.bad("cluster_etcd", "mixes http:// and https:// endpoints: etcd's client dials them all as the first one's scheme says; use one scheme")
	}
}

// loopbackHost says whether host (a name or an address, no port) is this
// machine's loopback: localhost, 127.0.0.0/8 or ::1. Any other name is
// treated as remote, as it may resolve anywhere.
func loopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// EtcdTLSSet says whether the member's etcd client speaks TLS: an
// https:// cluster_etcd (Validate refuses mixed schemes).
func (c Config) EtcdTLSSet() bool {
	return strings.HasPrefix(strings.TrimSpace(c.ClusterEtcd), "https://")
}

// ErrEtcdClient is an etcd client file (certificate, CA, password) the
// member cannot use.
var ErrEtcdClient = errors.New("config: etcd client")

// EtcdTLS is the etcd client's TLS configuration, nil for http://
// endpoints: the CA etcd's certificate must chain to (the system's roots
// without cluster_etcd_tls_ca) and the client certificate, which must
// carry the clientAuth extended key usage etcd checks for.
func (c Config) EtcdTLS() (*tls.Config, error) {
	if !c.EtcdTLSSet() {
		return nil, nil
	}
	conf := &tls.Config{MinVersion: tls.VersionTLS12}
	if c.ClusterEtcdTLSCA != "" {
		pem, err := os.ReadFile(c.ClusterEtcdTLSCA)
		if err != nil {
			return nil, fmt.Errorf("%w: cluster_etcd_tls_ca: %w", ErrEtcdClient, err)
		}
		conf.RootCAs = x509.NewCertPool()
		if !conf.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%w: cluster_etcd_tls_ca %s holds no PEM certificate", ErrEtcdClient, c.ClusterEtcdTLSCA)
		}
	}
	if c.ClusterEtcdTLSCert == "" {
		return conf, nil
	}
	pair, err := tls.LoadX509KeyPair(c.ClusterEtcdTLSCert, c.ClusterEtcdTLSKey)
	if err != nil {
		return nil, fmt.Errorf("%w: cluster_etcd_tls_cert %s with cluster_etcd_tls_key %s: %w", ErrEtcdClient, c.ClusterEtcdTLSCert, c.ClusterEtcdTLSKey, err)
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return nil, fmt.Errorf("%w: cluster_etcd_tls_cert %s: %w", ErrEtcdClient, c.ClusterEtcdTLSCert, err)
	}
	if len(leaf.ExtKeyUsage) > 0 && !slices.Contains(leaf.ExtKeyUsage, x509.ExtKeyUsageClientAuth) && !slices.Contains(leaf.ExtKeyUsage, x509.ExtKeyUsageAny) {
		return nil, fmt.Errorf("%w: cluster_etcd_tls_cert %s lacks the clientAuth extended key usage, so etcd refuses it (felix cluster certs makes member certificates with it)", ErrEtcdClient, c.ClusterEtcdTLSCert)
	}
	pair.Leaf = leaf
	conf.Certificates = []tls.Certificate{pair}
	return conf, nil
}

// EtcdPassword reads cluster_etcd_password_file's first line ("" when
// the knob is unset); a trailing newline or carriage return is not part of
// it.
func (c Config) EtcdPassword() (string, error) {
	if c.ClusterEtcdPasswordFile == "" {
		return "", nil
	}
	f, err := os.Open(c.ClusterEtcdPasswordFile)
	if err != nil {
		return "", fmt.Errorf("%w: cluster_etcd_password_file: %w", ErrEtcdClient, err)
	}
	defer f.Close()
	line, err := bufio.NewReaderSize(io.LimitReader(f, maxEtcdPasswordBytes+1), maxEtcdPasswordBytes+1).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return "", fmt.Errorf("%w: cluster_etcd_password_file %s: %w", ErrEtcdClient, c.ClusterEtcdPasswordFile, err)
	}
	if len(line) > maxEtcdPasswordBytes {
		return "", fmt.Errorf("%w: cluster_etcd_password_file %s: the first line is longer than %d bytes; the file holds the password alone", ErrEtcdClient, c.ClusterEtcdPasswordFile, maxEtcdPasswordBytes)
	}
	password := strings.TrimRight(line, "\r\n")
	if password == "" {
		return "", fmt.Errorf("%w: cluster_etcd_password_file %s: the first line is empty; write the password of cluster_etcd_user there", ErrEtcdClient, c.ClusterEtcdPasswordFile)
	}
	return password, nil
}
