package cluster

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cockroachdb/datadriven"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestEtcdLoginTrace runs testdata/etcdlogin_*.txt against an etcdLogin
// whose etcd is a fake, in a synctest bubble whose clock moves only by
// wait. Each command prints how many logins etcd was asked for since the
// last one, and what it did; then the login's state. Regenerate with
// -rewrite; only commit the changes if you understand what caused them.
//
//	etcd auth=on|off|wrong-password|down   how the fake answers a login
//	request                                a request's credentials
//	login-request                          the login request's own
//	refused err=invalid-token|old-revision|user-empty|permission-denied|unavailable
//	watch-cancelled reason=permission-denied|compacted
//	wait D                                 time passes
func TestEtcdLoginTrace(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		if !strings.Contains(path, "etcdlogin_") {
			t.Skip()
		}
		synctest.Test(t, func(t *testing.T) {
			tr := &loginTrace{auth: "on"}
			tr.l = newEtcdLogin(Config{EtcdUser: "felix", EtcdPassword: "pw"})
			tr.l.authenticate = tr.authenticate
			datadriven.RunTest(t, path, tr.run)
		})
	})
}

type loginTrace struct {
	l      *etcdLogin
	auth   string
	logins int // logins asked for since the last command
	issued int // tokens the fake has issued
}

func (tr *loginTrace) authenticate(_ context.Context, user, password string) (string, error) {
	tr.logins++
	switch tr.auth {
	case "off":
		return "", rpctypes.ErrAuthNotEnabled
	case "wrong-password":
		return "", rpctypes.ErrAuthFailed
	case "down":
		return "", status.Error(codes.Unavailable, "connection refused")
	}
	if user != "felix" || password != "pw" {
		return "", rpctypes.ErrAuthFailed
	}
	tr.issued++
	return fmt.Sprintf("token-%d", tr.issued), nil
}

var traceRefusals = map[string]error{
	"invalid-token":     rpctypes.ErrGRPCInvalidAuthToken,
	"old-revision":      rpctypes.ErrGRPCAuthOldRevision,
	"user-empty":        rpctypes.ErrGRPCUserEmpty,
	"permission-denied": rpctypes.ErrGRPCPermissionDenied,
	"unavailable":       status.Error(codes.Unavailable, "connection refused"),
}

func (tr *loginTrace) run(t *testing.T, d *datadriven.TestData) string {
	var b strings.Builder
	tr.logins = 0
	switch d.Cmd {
	case "etcd":
		d.ScanArgs(t, "auth", &tr.auth)
	case "request", "login-request":
		ctx := context.Background()
		if d.Cmd == "login-request" {
			ctx = context.WithValue(ctx, loginCall{}, true)
		}
		md, err := tr.l.GetRequestMetadata(ctx)
		switch {
		case err != nil:
			fmt.Fprintf(&b, "refused: %v\n", err)
		case md[rpctypes.TokenFieldNameGRPC] == "":
			b.WriteString("sent without a token\n")
		default:
			fmt.Fprintf(&b, "sent %s\n", md[rpctypes.TokenFieldNameGRPC])
		}
	case "refused":
		var name string
		d.ScanArgs(t, "err", &name)
		err, ok := traceRefusals[name]
		if !ok {
			t.Fatalf("unknown refusal %q", name)
		}
		tr.l.drop(err)
	case "watch-cancelled":
		var reason string
		d.ScanArgs(t, "reason", &reason)
		w := &pb.WatchResponse{Canceled: true, CancelReason: map[string]string{
			"permission-denied": rpctypes.ErrGRPCPermissionDenied.Error(), "compacted": "etcdserver: mvcc: required revision has been compacted",
		}[reason]}
		s := &loginStream{ClientStream: &cancelledWatch{w: w}, login: tr.l}
		if err := s.RecvMsg(&pb.WatchResponse{}); err != nil {
			t.Fatal(err)
		}
	case "wait":
		dur, err := time.ParseDuration(d.CmdArgs[0].Key)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(dur)
	default:
		t.Fatalf("unknown command %q", d.Cmd)
	}
	if tr.logins > 0 {
		fmt.Fprintf(&b, "etcd asked for %d login(s)\n", tr.logins)
	}
	b.WriteString(tr.state())
	return b.String()
}

func (tr *loginTrace) state() string {
	l := tr.l
	l.mu.Lock()
	defer l.mu.Unlock()
	var parts []string
	switch {
	case l.mu.token != "":
		parts = append(parts, "token "+l.mu.token)
	case l.mu.off:
		parts = append(parts, "auth off")
	default:
		parts = append(parts, "no token")
	}
	if l.mu.refused != nil && time.Now().Before(l.mu.until) {
		parts = append(parts, fmt.Sprintf("refusal kept %s", time.Until(l.mu.until)))
	}
	return "state: " + strings.Join(parts, ", ") + "\n"
}

// cancelledWatch is a watch stream whose next answer is w.
type cancelledWatch struct {
	grpc.ClientStream
	w *pb.WatchResponse
}

func (c *cancelledWatch) RecvMsg(m any) error {
	r := m.(*pb.WatchResponse)
	r.Canceled, r.CancelReason = c.w.Canceled, c.w.CancelReason
	return nil
}
