package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/spf13/pflag"

	"github.com/getfelix/felix-go/client"
	"github.com/getfelix/felix-go/wire"
)

// closeTimeout bounds a client's goodbye: outstanding acks, unsubscribe.
const closeTimeout = 10 * time.Second

// connOpts are the flags every client command shares.
type connOpts struct {
	broker         string
	tenant         string
	namespace      string
	stream         string
	caFile         string
	insecure       bool
	token          string
	connectTimeout time.Duration
	timeout        time.Duration // --timeout (registerTimeout): the whole command's bound
	publishWindow  int           // pub's --inflight: client.Options.PublishWindow
	// contextName is --context; ctxToken the chosen context's token and
	// ctxFrom where it came from (applyContext).
	contextName, ctxToken, ctxFrom string
	flags                          *pflag.FlagSet
}

func (o *connOpts) register(fs *pflag.FlagSet) {
	o.flags = fs
	fs.StringVar(&o.broker, "broker", "127.0.0.1:5000", "broker address, host:port; or a comma-separated list of a cluster's brokers: "+
		"pub and sub send to each shard's owner, group and consume to the member serving the group's shard (following it when it moves), other commands use the first broker that answers")
	fs.StringVar(&o.tenant, "tenant", "default", "tenant")
	fs.StringVar(&o.namespace, "namespace", "default", "namespace")
	fs.StringVar(&o.stream, "stream", "", "stream name (required)")
	fs.StringVar(&o.caFile, "ca", "", "trust the broker certificate(s) in this PEM file (a broker's DATA_DIR/cert.pem); "+
		"with neither --ca nor --insecure, ./"+client.DefaultCAFile+" is trusted when it exists")
	fs.BoolVar(&o.insecure, "insecure", false, "do not verify the broker's certificate")
	registerToken(fs, &o.token)
	fs.DurationVar(&o.connectTimeout, "connect-timeout", 10*time.Second, "give up connecting after this long")
	registerContext(fs, &o.contextName)
}

// check reports flag mistakes before anything connects.
func (o *connOpts) check() error {
	switch {
	case o.stream == "":
		return usagef("--stream is required")
	case len(o.brokers()) == 0:
		return usagef("--broker needs a host:port, or a comma-separated list of them")
	case o.tenant == "" || o.namespace == "":
		return usagef("--tenant and --namespace must not be empty")
	case o.caFile != "" && o.insecure:
		return usagef("--ca and --insecure contradict each other: give one")
	case o.connectTimeout <= 0:
		return usagef("--connect-timeout must be positive, got %s", o.connectTimeout)
	}
	return nil
}

func (o *connOpts) streamRef() client.Stream {
	return client.Stream{Tenant: o.tenant, Namespace: o.namespace, Name: o.stream}
}

// scope is the stream's full name as messages print it: tenant/namespace/stream.
func (o *connOpts) scope() string {
	return o.tenant + "/" + o.namespace + "/" + o.stream
}

// brokers is --broker's list of addresses.
func (o *connOpts) brokers() []string {
	var out []string
	for _, addr := range strings.Split(o.broker, ",") {
		if addr = strings.TrimSpace(addr); addr != "" {
			out = append(out, addr)
		}
	}
	return out
}

// dial connects to the first broker of --broker that answers, each within
// --connect-timeout.
func (o *connOpts) dial(ctx context.Context) (*client.Client, error) {
	var err error
	for _, addr := range o.brokers() {
		var c *client.Client
		c, err = o.dialOne(ctx, addr)
		if err == nil || ctx.Err() != nil || !isUnreachable(err) {
			return c, err
		}
	}
	return nil, err
}

func (o *connOpts) dialOne(ctx context.Context, addr string) (*client.Client, error) {
	dctx, cancel := context.WithTimeout(ctx, o.connectTimeout)
	defer cancel()
	c, err := client.Dial(dctx, addr, o.clientOptions())
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("interrupted while connecting to %s", addr)
		}
		return nil, o.explainDialError(addr, err)
	}
	return c, nil
}

// dialCluster connects a ClusterClient to --broker's brokers: the first
// that answers, each within --connect-timeout; the others as the shards
// they own are needed.
func (o *connOpts) dialCluster(ctx context.Context) (*client.ClusterClient, error) {
	seeds := o.brokers()
	dctx, cancel := context.WithTimeout(ctx, o.connectTimeout*time.Duration(len(seeds)))
	defer cancel()
	opts := o.clientOptions()
	opts.DialTimeout = o.connectTimeout
	cc, err := client.DialCluster(dctx, seeds, opts)
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("interrupted while connecting to %s", o.broker)
		}
		return nil, o.explainDialError(o.broker, err)
	}
	return cc, nil
}

// clientOptions are the client's options from the flags. A token from
// neither --token nor FELIX_TOKEN is left empty, so the client takes
// ./felix-data/admin.token when it exists.
func (o *connOpts) clientOptions() client.Options {
	token, src := flagOrEnvToken(o.token)
	if src == "" {
		token = o.ctxToken
	}
	opts := client.Options{Tenant: o.tenant, Token: token, CAFile: o.caFile, Insecure: o.insecure, PublishWindow: o.publishWindow}
	o.noticeWaits(&opts)
	return opts
}

// tokenEnv names the variable client commands read a token from.
const tokenEnv = "FELIX_TOKEN"

func registerToken(fs *pflag.FlagSet, dst *string) {
	fs.StringVar(dst, "token", "", "the token to authenticate with (felix token create mints one on the broker's machine); "+
		"default $"+tokenEnv+", else the felix context's, else ./"+client.DefaultTokenFile+" when it exists")
}

// flagOrEnvToken is --token, else $FELIX_TOKEN, and where it came from
// ("" for neither).
func flagOrEnvToken(flag string) (token, source string) {
	switch {
	case flag != "":
		return flag, "--token"
	case os.Getenv(tokenEnv) != "":
		return os.Getenv(tokenEnv), tokenEnv
	}
	return "", ""
}

// tokenSource says which token a command sent, for its error messages:
// --token's, $FELIX_TOKEN's, a context's (ctxFrom names it) or the
// default file's.
func tokenSource(flag, ctxFrom string) string {
	if _, src := flagOrEnvToken(flag); src != "" {
		return "the token from " + src
	}
	if ctxFrom != "" {
		return "the token of " + ctxFrom
	}
	if fileExists(client.DefaultTokenFile) {
		return "the token in ./" + client.DefaultTokenFile + " (found in this folder: is it another broker's?)"
	}
	return "no token (no --token, no " + tokenEnv + ", no ./" + client.DefaultTokenFile + " in this folder)"
}

// howToGetToken is the end of every "refused: unauthenticated" message.
var howToGetToken = "Pass --token TOKEN or set " + tokenEnv + "; on the broker's machine " +
	"`felix token create --data-dir DATA_DIR --tenant TENANT --grant ACTION:NAMESPACE/STREAM` mints one " +
	"(DATA_DIR is the broker's --data-dir, ./felix-data by default), or run the client from the broker's folder, " +
	"where ./" + client.DefaultTokenFile + " is used with no flag"

// explainDialError turns the usual ways a first connection fails into what
// to do about them, keeping the cause in parentheses.
func (o *connOpts) explainDialError(addr string, err error) error {
	switch {
	case isCertError(err):
		trusted := "the system's roots"
		switch {
		case o.caFile != "":
			trusted = o.caFile
		case fileExists(client.DefaultCAFile):
			trusted = "./" + client.DefaultCAFile + " (found in this folder: is it another broker's?)"
		}
		return fmt.Errorf("the broker at %s presented a certificate this client does not trust; it trusted %s. "+
			"Pass --ca FILE with the broker's certificate (DATA_DIR/cert.pem of its --data-dir, ./felix-data/cert.pem by default), "+
			"or --insecure to skip verification (%w)", addr, trusted, err)
	case errors.Is(err, wire.ErrUnauthenticated):
		return fmt.Errorf("the broker at %s refused the connection as tenant %s; this client sent %s. %s (%w)",
			addr, o.tenant, tokenSource(o.token, o.ctxFrom), howToGetToken, err)
	case isUnreachable(err):
		return fmt.Errorf("cannot reach broker at %s: is `felix broker` running? (%w)", addr, err)
	case strings.Contains(err.Error(), "read CA file"):
		return fmt.Errorf("cannot read the --ca file: %w", err)
	}
	return err
}

func isCertError(err error) bool {
	var (
		unknownAuthority x509.UnknownAuthorityError
		hostname         x509.HostnameError
		invalid          x509.CertificateInvalidError
		verification     *tls.CertificateVerificationError
	)
	if errors.As(err, &unknownAuthority) || errors.As(err, &hostname) ||
		errors.As(err, &invalid) || errors.As(err, &verification) {
		return true
	}
	// quic-go reports a TLS alert as a TransportError whose message is the
	// crypto/tls error's text, without that error in its chain.
	msg := err.Error()
	return strings.Contains(msg, "x509:") || strings.Contains(msg, "certificate")
}

func isUnreachable(err error) bool {
	var (
		idle      *quic.IdleTimeoutError
		handshake *quic.HandshakeTimeoutError
	)
	return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EHOSTUNREACH) ||
		errors.Is(err, syscall.ENETUNREACH) || errors.Is(err, context.DeadlineExceeded) ||
		errors.As(err, &idle) || errors.As(err, &handshake)
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// closeCluster says goodbye on every connection within closeTimeout, even
// after ctx ended.
func closeCluster(cc *client.ClusterClient) {
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	_ = cc.Close(ctx)
}

// closeClient says goodbye within closeTimeout, even after ctx ended.
func closeClient(c *client.Client) {
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	_ = c.Close(ctx)
}
