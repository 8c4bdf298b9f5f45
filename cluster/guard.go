package cluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
	"github.com/rs/zerolog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/getfelix/felix-go/actors"
)

// The actor remote's guard. protoactor's remote hands whatever arrives to
// the actor system: a system message (actor.Stop) to any actor, a user
// message to any PID, even one on another address (it forwards it), and
// its unimplemented methods panic, which in a gRPC handler ends the
// process. So the server takes only mutual TLS with the cluster's CA, and
// behind it only protoactor's one stream method, each message of which is
// checked before protoactor reads it: a tree request to this member's
// node actor, and answers to this member's own requests. Anything else
// ends the stream with PermissionDenied; a panic left in protoactor's
// reader ends the stream, not the member.

// ErrRemoteRefused is a message from another member's actor system that
// the guard refuses.
var ErrRemoteRefused = errors.New("cluster: actor remote message refused")

// replyPrefix starts the id of every actors.Request's reply process (the
// registry's sequence part begins with "$"): Trees asks through it.
const replyPrefix = actors.ReplyIDPrefix + "$"

// receiveMethod is protoactor's one stream, every member's messages to
// this one (its generated code names it in a literal only).
const receiveMethod = "/remote.Remoting/Receive"

// remoteHandshakeTimeout bounds a connection's TLS handshake, so a caller
// that never finishes one holds no descriptor for long (gRPC's default is
// 120 s).
const remoteHandshakeTimeout = 5 * time.Second

// The message types the guard lets through, by target.
var (
	treeRequestType  = string(proto.MessageName(&wrapperspb.StringValue{}))
	treeAnswerType   = string(proto.MessageName(&wrapperspb.BytesValue{}))
	deadLetterAnswer = string(proto.MessageName(&actor.DeadLetterResponse{}))
)

// guard checks what reaches the remote's server; self is this member's
// remote address, read per stream (it is set once the remote listens).
type guard struct {
	self func() string
	log  zerolog.Logger
}

// serverOptions are the remote server's: mutual TLS against the cluster
// CA, the handshake bound, and the guard's interceptors.
func (g *guard) serverOptions(t TLS) []grpc.ServerOption {
	conf := &tls.Config{
		Certificates: []tls.Certificate{t.Cert},
		ClientCAs:    t.CAs,
		ClientAuth:   tls.RequireAndVerifyClientCert,
		MinVersion:   tls.VersionTLS13,
	}
	return []grpc.ServerOption{
		grpc.Creds(credentials.NewTLS(conf)),
		grpc.ConnectionTimeout(remoteHandshakeTimeout),
		grpc.UnaryInterceptor(g.unary),
		grpc.StreamInterceptor(g.stream),
	}
}

// dialOptions present the member's certificate and verify the other's
// chain against the cluster CA. Members are known by their CA, not their
// host names (an address may be an IP the certificate does not name), so
// the chain is verified without the name check, as the peer link does.
func dialOptions(t TLS) []grpc.DialOption {
	conf := &tls.Config{
		Certificates:          []tls.Certificate{t.Cert},
		MinVersion:            tls.VersionTLS13,
		InsecureSkipVerify:    true, // the chain is verified below, without the host name
		VerifyPeerCertificate: verifyChain(t.CAs),
	}
	return []grpc.DialOption{grpc.WithTransportCredentials(credentials.NewTLS(conf))}
}

func verifyChain(cas *x509.CertPool) func([][]byte, [][]*x509.Certificate) error {
	return func(raw [][]byte, _ [][]*x509.Certificate) error {
		if len(raw) == 0 {
			return errors.New("cluster: the actor remote presented no certificate")
		}
		inter := x509.NewCertPool()
		var leaf *x509.Certificate
		for i, r := range raw {
			c, err := x509.ParseCertificate(r)
			if err != nil {
				return fmt.Errorf("cluster: actor remote certificate: %w", err)
			}
			if i == 0 {
				leaf = c
			} else {
				inter.AddCert(c)
			}
		}
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: cas, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
			return fmt.Errorf("cluster: actor remote certificate not signed by the cluster's CA: %w", err)
		}
		return nil
	}
}

// unary refuses every unary method: protoactor implements none of them
// (ListProcesses and GetProcessDiagnostics panic).
func (g *guard) unary(_ context.Context, _ any, info *grpc.UnaryServerInfo, _ grpc.UnaryHandler) (any, error) {
	return nil, status.Errorf(codes.Unimplemented, "%s is not served", info.FullMethod)
}

// stream serves only protoactor's Receive, each message checked, and
// turns a panic in protoactor's reader into the stream's end.
func (g *guard) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) (err error) {
	if info.FullMethod != receiveMethod {
		return status.Errorf(codes.Unimplemented, "%s is not served", info.FullMethod)
	}
	defer func() {
		if p := recover(); p != nil {
			g.log.Error().Interface("panic", p).Msg("actor remote: protoactor's reader panicked; the stream is closed")
			err = status.Error(codes.Internal, "refused")
		}
	}()
	return handler(srv, &guardedStream{ServerStream: ss, g: g, self: g.self()})
}

// guardedStream checks each message as protoactor's reader receives it.
type guardedStream struct {
	grpc.ServerStream
	g    *guard
	self string
}

func (s *guardedStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	msg, ok := m.(*remote.RemoteMessage)
	if !ok {
		return status.Error(codes.PermissionDenied, ErrRemoteRefused.Error())
	}
	if err := checkRemoteMessage(msg, s.self); err != nil {
		s.g.log.Warn().Err(err).Msg("actor remote: a member sent what the guard refuses; its stream is closed")
		return status.Error(codes.PermissionDenied, err.Error())
	}
	return nil
}

// checkRemoteMessage accepts a connect request, and a batch whose every
// envelope checkEnvelope accepts; self is this member's remote address.
func checkRemoteMessage(m *remote.RemoteMessage, self string) error {
	switch t := m.GetMessageType().(type) {
	case *remote.RemoteMessage_ConnectRequest:
		if t.ConnectRequest.GetServerConnection() == nil {
			return fmt.Errorf("%w: a connect request that is not a member's", ErrRemoteRefused)
		}
		return nil
	case *remote.RemoteMessage_MessageBatch:
		b := t.MessageBatch
		for i, e := range b.GetEnvelopes() {
			if err := checkEnvelope(b, e, self); err != nil {
				return fmt.Errorf("%w: envelope %d: %w", ErrRemoteRefused, i, err)
			}
		}
		return nil
	default:
		return fmt.Errorf("%w: message of kind %T", ErrRemoteRefused, t)
	}
}

// checkEnvelope accepts a protobuf message to a local actor the guard
// lets through: a tree request, with a sender to answer, to the node
// actor; a tree answer or a dead letter to one of this member's requests.
// Its indexes must be in the batch's tables (protoactor indexes them
// unchecked).
func checkEnvelope(b *remote.MessageBatch, e *remote.MessageEnvelope, self string) error {
	switch {
	case e.GetTarget() < 0 || int(e.GetTarget()) >= len(b.GetTargets()) || b.GetTargets()[e.GetTarget()] == nil:
		return fmt.Errorf("target %d not in the batch's %d", e.GetTarget(), len(b.GetTargets()))
	case e.GetSender() < 0 || int(e.GetSender()) > len(b.GetSenders()) || (e.GetSender() > 0 && b.GetSenders()[e.GetSender()-1] == nil):
		return fmt.Errorf("sender %d not in the batch's %d", e.GetSender(), len(b.GetSenders()))
	case e.GetTypeId() < 0 || int(e.GetTypeId()) >= len(b.GetTypeNames()):
		return fmt.Errorf("type %d not in the batch's %d", e.GetTypeId(), len(b.GetTypeNames()))
	case e.GetSerializerId() != 0:
		return fmt.Errorf("serializer %d (only protobuf, 0, is taken)", e.GetSerializerId())
	}
	target, typ := b.GetTargets()[e.GetTarget()], b.GetTypeNames()[e.GetTypeId()]
	if target.GetAddress() != self {
		return fmt.Errorf("target %s on %q, not this member (%s)", target.GetId(), target.GetAddress(), self)
	}
	switch id := target.GetId(); {
	case id == nodeActorName && typ == treeRequestType && e.GetSender() > 0:
		return nil
	case strings.HasPrefix(id, replyPrefix) && (typ == treeAnswerType || typ == deadLetterAnswer):
		return nil
	default:
		return fmt.Errorf("%s to %s", typ, id)
	}
}
