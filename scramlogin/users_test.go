package scramlogin

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/xdg-go/scram"

	"github.com/getfelix/felix-go/admin"
	"github.com/getfelix/felix-go/auth"
	"github.com/getfelix/felix-go/metadata"
	"github.com/getfelix/felix-go/service"
	"github.com/getfelix/felix-go/wire"
)

func openUsers(t *testing.T) *KafkaUsers {
	t.Helper()
	store, err := metadata.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	k, err := OpenKafkaUsers(store)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// loginAs runs a whole exchange through k as a client with password.
func loginAs(t *testing.T, k *KafkaUsers, name, password string) (*Login, error) {
	t.Helper()
	c, err := scram.SHA256.NewClient(name, password, "")
	if err != nil {
		t.Fatal(err)
	}
	conv := c.NewConversation()
	l, err := k.Start(service.MechanismSCRAMSHA256)
	if err != nil {
		return nil, err
	}
	var in string
	for {
		out, err := conv.Step(in)
		if err != nil || conv.Done() {
			return l, err
		}
		if in, err = l.Step([]byte(out)); err != nil {
			return l, err
		}
	}
}

// TestKafkaUsersLifecycle: a user added logs in with its password and its
// grants; the listing names it without its salt or keys; removed, it no
// longer logs in, and a second removal finds nothing.
func TestKafkaUsersLifecycle(t *testing.T) {
	k := openUsers(t)
	if got := k.Mechanisms(); len(got) != 2 {
		t.Errorf("Mechanisms = %v, want both SCRAM mechanisms", got)
	}
	grants := []auth.Grant{auth.MustParseGrant("stream.publish:ns/*")}
	u, err := admin.NewKafkaUser("t", "ann", service.MechanismSCRAMSHA256, "secret", admin.KafkaUserDefaultIterations, grants)
	if err != nil {
		t.Fatal(err)
	}
	if err := k.PutKafkaUser(u); err != nil {
		t.Fatal(err)
	}
	l, err := loginAs(t, k, "t/ann", "secret")
	if err != nil {
		t.Fatalf("login with the password: %v", err)
	}
	p, err := l.Principal(time.Now().Add(time.Hour))
	if err != nil || p.Tenant != "t" || p.Check(auth.ActionStreamPublish, wire.Scope{Tenant: "t", Namespace: "ns", Stream: "s"}) != nil {
		t.Fatalf("the login's principal = %+v, %v; want tenant t, allowed to publish to ns/s", p, err)
	}
	listed, err := k.KafkaUsers("t")
	if err != nil || len(listed) != 1 {
		t.Fatalf("KafkaUsers(t) = %+v, %v; want ann", listed, err)
	}
	if got := listed[0]; got.User != "ann" || got.Salt != nil || got.StoredKey != nil || got.ServerKey != nil || len(got.Grants) != 1 || got.Grants[0] != grants[0] {
		t.Errorf("listed %+v; want ann with her grant and no salt or keys", got)
	}
	if deleted, err := k.DeleteKafkaUser("t", "ann"); !deleted || err != nil {
		t.Fatalf("DeleteKafkaUser = %v, %v; want true", deleted, err)
	}
	if _, err := loginAs(t, k, "t/ann", "secret"); !errors.Is(err, ErrRefused) {
		t.Errorf("login after removal: %v; want ErrRefused", err)
	}
	if deleted, err := k.DeleteKafkaUser("t", "ann"); deleted || err != nil {
		t.Errorf("a second DeleteKafkaUser = %v, %v; want false", deleted, err)
	}
}

// TestPutKafkaUserChecks: a credential that Check refuses (here: no
// grants, too few iterations) is not stored and is invalid_request.
func TestPutKafkaUserChecks(t *testing.T) {
	k := openUsers(t)
	good, err := admin.NewKafkaUser("t", "ann", service.MechanismSCRAMSHA256, "secret", admin.KafkaUserDefaultIterations, []auth.Grant{auth.MustParseGrant("stream.publish:ns/*")})
	if err != nil {
		t.Fatal(err)
	}
	noGrants, fewIterations := good, good
	noGrants.Grants = nil
	fewIterations.Iterations = MinIterations - 1
	for name, u := range map[string]admin.KafkaUser{"no grants": noGrants, "few iterations": fewIterations} {
		if err := k.PutKafkaUser(u); !errors.Is(err, wire.ErrInvalidRequest) {
			t.Errorf("%s: PutKafkaUser = %v; want invalid_request", name, err)
		}
	}
	if listed, _ := k.KafkaUsers(""); len(listed) != 0 {
		t.Errorf("refused credentials were stored: %+v", listed)
	}
}

// TestNoKafkaUsers: a broker that keeps no users offers no mechanism,
// refuses a login unauthenticated and each user call with
// admin.ErrNoKafkaUsers, each saying why; a name that is no mechanism is
// still invalid_request.
func TestNoKafkaUsers(t *testing.T) {
	k := NoKafkaUsers("no users here")
	if got := k.Mechanisms(); got != nil {
		t.Errorf("Mechanisms = %v, want none", got)
	}
	if _, err := k.Start(service.MechanismSCRAMSHA256); !errors.Is(err, wire.ErrUnauthenticated) || !strings.Contains(err.Error(), "no users here") {
		t.Errorf("Start = %v; want unauthenticated saying why", err)
	}
	if _, err := k.Start("PLAIN"); !errors.Is(err, wire.ErrInvalidRequest) {
		t.Errorf("Start(PLAIN) = %v; want invalid_request", err)
	}
	_, listErr := k.KafkaUsers("")
	_, delErr := k.DeleteKafkaUser("t", "u")
	for name, err := range map[string]error{"PutKafkaUser": k.PutKafkaUser(admin.KafkaUser{}), "KafkaUsers": listErr, "DeleteKafkaUser": delErr} {
		if !errors.Is(err, admin.ErrNoKafkaUsers) || !strings.Contains(err.Error(), "no users here") {
			t.Errorf("%s = %v; want ErrNoKafkaUsers saying why", name, err)
		}
	}
}
