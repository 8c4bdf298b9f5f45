package cluster

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
)

// etcdLoginTimeout bounds one login; requests wait for it, so it is short
// of every request timeout of the node's while leaving etcd's password
// hash (bcrypt) room on a loaded machine.
const etcdLoginTimeout = 5 * time.Second

// etcdLoginRetry is how long a refused password is answered from memory:
// each login costs etcd a password hash, and a member with the wrong one
// must not make it hash at the rate of the member's requests.
const etcdLoginRetry = time.Second

// etcdLogin logs the member's etcd clients in as EtcdUser when a request
// first needs a token, not when a client is made. etcd's client, given a
// user, logs in inside clientv3.New and fails it when etcd does not
// answer; a member must start while etcd is down, say it is not in the
// cluster yet, and join once etcd answers. It logs in through the node's
// client, whose requests it serves. A token etcd no longer takes (expired,
// older than an auth change, lost in an etcd restart) is dropped, so the
// next request logs in again.
type etcdLogin struct {
	user, password string
	// authenticate asks etcd for a token (bind sets it to the node's
	// client before the node starts); the login request itself carries
	// loginCall, so it asks for no token.
	authenticate func(ctx context.Context, user, password string) (string, error)

	mu struct {
		sync.Mutex
		token string
		// off: etcd has auth disabled, so requests go without a token
		// until one is refused for lacking it.
		off bool
		// refused and until keep a refused login's error for etcdLoginRetry.
		refused error
		until   time.Time
	}
}

// loginCall marks the context of the login request.
type loginCall struct{}

// newEtcdLogin is nil when c names no user.
func newEtcdLogin(c Config) *etcdLogin {
	if c.EtcdUser == "" {
		return nil
	}
	return &etcdLogin{user: c.EtcdUser, password: c.EtcdPassword}
}

// bind logs in through cli, the node's client.
func (l *etcdLogin) bind(cli *clientv3.Client) {
	l.authenticate = func(ctx context.Context, user, password string) (string, error) {
		res, err := cli.Authenticate(ctx, user, password)
		if err != nil {
			return "", err
		}
		return res.Token, nil
	}
}

// dialOptions give a client the token on every request and watch its
// answers for a token etcd refused.
func (l *etcdLogin) dialOptions() []grpc.DialOption {
	if l == nil {
		return nil
	}
	return []grpc.DialOption{
		grpc.WithPerRPCCredentials(l),
		grpc.WithChainUnaryInterceptor(l.unary),
		grpc.WithChainStreamInterceptor(l.stream),
	}
}

// GetRequestMetadata is grpc's hook for a request's credentials: the
// token, logging in first when there is none.
func (l *etcdLogin) GetRequestMetadata(ctx context.Context, _ ...string) (map[string]string, error) {
	if ctx.Value(loginCall{}) != nil {
		return nil, nil
	}
	token, err := l.token(ctx)
	if err != nil || token == "" {
		return nil, err
	}
	return map[string]string{rpctypes.TokenFieldNameGRPC: token}, nil
}

// RequireTransportSecurity is false: config decides where plaintext is
// allowed (loopback, or cluster_etcd_allow_plaintext).
func (l *etcdLogin) RequireTransportSecurity() bool { return false }

func (l *etcdLogin) token(ctx context.Context) (string, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.mu.token != "" || l.mu.off:
		return l.mu.token, nil
	case l.mu.refused != nil && time.Now().Before(l.mu.until):
		return "", l.mu.refused
	}
	lctx, cancel := context.WithTimeout(context.WithValue(ctx, loginCall{}, true), etcdLoginTimeout)
	defer cancel()
	token, err := l.authenticate(lctx, l.user, l.password)
	switch {
	case errors.Is(err, rpctypes.ErrAuthNotEnabled):
		l.mu.off = true
		return "", nil
	case errors.Is(err, rpctypes.ErrAuthFailed):
		l.mu.refused = fmt.Errorf("cluster: etcd refused user %s's password (cluster_etcd_user, cluster_etcd_password_file): %w", l.user, err)
		l.mu.until = time.Now().Add(etcdLoginRetry)
		return "", l.mu.refused
	case err != nil:
		return "", fmt.Errorf("cluster: etcd login as %s: %w", l.user, err)
	}
	l.mu.token, l.mu.refused = token, nil
	return token, nil
}

// drop forgets the token when err says etcd refused it, or wanted one
// while auth was thought off.
func (l *etcdLogin) drop(err error) {
	err = rpctypes.Error(err)
	if !errors.Is(err, rpctypes.ErrInvalidAuthToken) && !errors.Is(err, rpctypes.ErrAuthOldRevision) && !errors.Is(err, rpctypes.ErrUserEmpty) {
		return
	}
	l.mu.Lock()
	l.mu.token, l.mu.off = "", false
	l.mu.Unlock()
}

// unary runs inside etcd's retrying interceptor, which retries a request
// refused for its token: the retry then logs in again. The login request
// runs under token's lock, so its answer is not looked at.
func (l *etcdLogin) unary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	err := invoker(ctx, method, req, reply, cc, opts...)
	if err != nil && ctx.Value(loginCall{}) == nil {
		l.drop(err)
	}
	return err
}

func (l *etcdLogin) stream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	s, err := streamer(ctx, desc, cc, method, opts...)
	if err != nil {
		l.drop(err)
		return nil, err
	}
	return &loginStream{ClientStream: s, login: l}, nil
}

// loginStream watches a stream's answers. etcd refuses a watch whose
// token it does not take as permission denied, in the answer rather than
// as an error, so that drops the token too: a real denial costs one more
// login per watch.
type loginStream struct {
	grpc.ClientStream
	login *etcdLogin
}

func (s *loginStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if err != nil {
		s.login.drop(err)
		return err
	}
	if w, ok := m.(*pb.WatchResponse); ok && w.Canceled && w.CancelReason == rpctypes.ErrGRPCPermissionDenied.Error() {
		s.login.drop(rpctypes.ErrGRPCInvalidAuthToken)
	}
	return nil
}
