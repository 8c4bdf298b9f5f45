package cluster

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// etcdReadyTimeout bounds StartEtcd's wait for the member to serve. A
// single member elects itself in about a second; much longer means its
// data dir or the machine is in trouble, and waiting on hides that.
const etcdReadyTimeout = 30 * time.Second

// EtcdLogFile is the file in StartEtcd's dir that receives etcd's own
// errors; nothing of etcd goes to the process's stderr.
const EtcdLogFile = "etcd.log"

// Etcd is a single-member etcd run inside this process, on 127.0.0.1:
// what `felix dev cluster` and the cluster tests give their brokers. It is
// not for production, where etcd runs as its own replicated service.
type Etcd struct {
	e         *embed.Etcd
	log       *os.File
	logLevel  zap.AtomicLevel
	endpoint  string
	closeOnce sync.Once
}

// EtcdOption changes how StartEtcd runs etcd.
type EtcdOption func(*etcdOptions)

type etcdOptions struct {
	host string
	tls  *EtcdTLS
	// bcryptCost is etcd's password hashing cost; 0 keeps etcd's default.
	bcryptCost uint
	// maxTxnOps is etcd's --max-txn-ops; 0 keeps etcd's default (128).
	maxTxnOps uint
}

// withBcryptCost sets etcd's password hashing cost: the tests that make
// etcd users lower it, as the race detector makes a default-cost hash
// take seconds.
func withBcryptCost(cost uint) EtcdOption { return func(o *etcdOptions) { o.bcryptCost = cost } }

// withMaxTxnOps lowers how many operations etcd takes in one transaction,
// so a test sees batched writes split to fit.
func withMaxTxnOps(ops uint) EtcdOption { return func(o *etcdOptions) { o.maxTxnOps = ops } }

// EtcdTLS are the PEM files of an embedded etcd serving mutual TLS: the
// CA every client's certificate must chain to, and etcd's certificate
// (serverAuth and clientAuth, the listen host as a SAN) and key.
type EtcdTLS struct{ CA, Cert, Key string }

// WithEtcdHost listens on host instead of 127.0.0.1 (port 0 picks one),
// for a test whose members live in network namespaces and reach etcd over
// a bridge.
func WithEtcdHost(host string) EtcdOption { return func(o *etcdOptions) { o.host = host } }

// WithEtcdTLS serves clients, and the member's peer port, over TLS, and
// refuses a client without a certificate the CA signed: the Endpoint is
// then https://. A client that reaches etcd can rewrite owners and
// definitions, so a dev cluster's etcd is no more open than a real one
// should be.
func WithEtcdTLS(files EtcdTLS) EtcdOption { return func(o *etcdOptions) { o.tls = &files } }

// StartEtcd starts a single-member etcd keeping its data in dir (created
// when missing; a dir from an earlier run is reopened with its keys). It
// listens for clients and peers on free 127.0.0.1 ports and returns once
// the member serves, or fails after 30 s.
func StartEtcd(dir string, opts ...EtcdOption) (*Etcd, error) {
	o := etcdOptions{host: "127.0.0.1"}
	for _, opt := range opts {
		opt(&o)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("cluster: etcd dir %s: %w (choose a writable folder)", dir, err)
	}
	log, err := os.OpenFile(filepath.Join(dir, EtcdLogFile), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("cluster: etcd log: %w", err)
	}
	level := zap.NewAtomicLevelAt(zapcore.ErrorLevel)
	e, err := embed.StartEtcd(etcdConfig(filepath.Join(dir, "data"), o, log, level))
	if err != nil {
		log.Close()
		return nil, fmt.Errorf("cluster: start etcd in %s: %w (see %s)", dir, err, log.Name())
	}
	scheme := "http://"
	if o.tls != nil {
		scheme = "https://"
	}
	ec := &Etcd{e: e, log: log, logLevel: level, endpoint: scheme + e.Clients[0].Addr().String()}
	if err := ec.waitReady(); err != nil {
		ec.Close()
		return nil, err
	}
	return ec, nil
}

// etcdConfig binds client and peer to port 0 on the host: embed listens
// before it builds the server and reports the bound listeners in
// Etcd.Clients, so no port has to be guessed free and then raced for. The
// URLs etcd records then name port 0: a single member never dials its
// peer URL, but a client must not take its endpoints from the member list
// (clientv3's AutoSyncInterval); neither ours nor protoactor's etcd
// provider does.
func etcdConfig(dataDir string, o etcdOptions, log *os.File, level zap.AtomicLevel) *embed.Config {
	cfg := embed.NewConfig()
	cfg.Dir = dataDir
	anyPort := url.URL{Scheme: "http", Host: net.JoinHostPort(o.host, "0")}
	if o.tls != nil {
		anyPort.Scheme = "https"
		info := transport.TLSInfo{CertFile: o.tls.Cert, KeyFile: o.tls.Key, TrustedCAFile: o.tls.CA, ClientCertAuth: true}
		cfg.ClientTLSInfo, cfg.PeerTLSInfo = info, info
	}
	if o.bcryptCost != 0 {
		cfg.BcryptCost = o.bcryptCost
	}
	if o.maxTxnOps != 0 {
		cfg.MaxTxnOps = o.maxTxnOps
	}
	cfg.ListenClientUrls = []url.URL{anyPort}
	cfg.AdvertiseClientUrls = []url.URL{anyPort}
	cfg.ListenPeerUrls = []url.URL{anyPort}
	cfg.AdvertisePeerUrls = []url.URL{anyPort}
	cfg.InitialCluster = cfg.Name + "=" + anyPort.String()
	// Our own logger rather than LogOutputs: zap's file sinks are process
	// globals that Close could not close.
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.New(zapcore.NewCore(
		zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), zapcore.AddSync(log), level)))
	return cfg
}

func (ec *Etcd) waitReady() error {
	timer := time.NewTimer(etcdReadyTimeout)
	defer timer.Stop()
	select {
	case <-ec.e.Server.ReadyNotify():
		return nil
	case err := <-ec.e.Err():
		return fmt.Errorf("cluster: etcd stopped while starting: %w (see %s)", err, ec.log.Name())
	case <-timer.C:
		return fmt.Errorf("cluster: etcd not ready after %s (see %s; is the machine overloaded or the disk slow?)",
			etcdReadyTimeout, ec.log.Name())
	}
}

// Endpoint is the client URL, http://127.0.0.1:PORT (https:// under
// WithEtcdTLS), for --cluster-etcd.
func (ec *Etcd) Endpoint() string { return ec.endpoint }

// Err delivers an error when etcd stops serving on its own; Close closes
// the channel.
func (ec *Etcd) Err() <-chan error { return ec.e.Err() }

// Close stops etcd and waits for it: its listeners are closed and its
// data flushed when Close returns. Clients still connected see their
// requests fail. Closing again does nothing, so a test may stop etcd
// early and still leave Close to its cleanup.
func (ec *Etcd) Close() {
	ec.closeOnce.Do(func() {
		// etcd logs each listener it closes as a serving error; on a
		// close we asked for they are noise in the file that is read
		// for real failures.
		ec.logLevel.SetLevel(zapcore.FatalLevel)
		ec.e.Close()
		ec.log.Close()
	})
}
