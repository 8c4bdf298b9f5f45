package broker_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"testing"
	"time"

	xscram "github.com/xdg-go/scram"

	"github.com/getfelix/felix-go/admin"
	"github.com/getfelix/felix-go/auth"
	"github.com/getfelix/felix-go/brokertest"
	"github.com/getfelix/felix-go/service"
	"github.com/getfelix/felix-go/wire"
)

// FuzzSCRAMStep: whatever bytes a client sends as the two messages of a
// SCRAM exchange, under either mechanism, the broker's step never panics,
// never opens a session (no fixed final message can carry the proof for
// a fresh server nonce), and refuses with a *wire.Error that is
// unauthenticated.
func FuzzSCRAMStep(f *testing.F) {
	cfg := brokertest.Config(f)
	cfg.Admin = "127.0.0.1:0"
	cfg.AuthFailureBurst = 0 // off: the fuzzer's refusals must not throttle it
	b := brokertest.Start(f, cfg)
	for _, mech := range []string{service.MechanismSCRAMSHA256, service.MechanismSCRAMSHA512} {
		u, err := admin.NewKafkaUser("default", "alice", mech, "pw", admin.KafkaUserDefaultIterations, []auth.Grant{auth.MustParseGrant("stream.subscribe:*/*")})
		if err != nil {
			f.Fatal(err)
		}
		body, _ := json.Marshal(u)
		req, _ := http.NewRequest(http.MethodPost, brokertest.AdminURL(f, b, "/debug/kafka/users?tenant=default"), bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+brokertest.AdminToken(f, cfg))
		resp, err := http.DefaultClient.Do(req)
		if err != nil || resp.StatusCode != http.StatusOK {
			f.Fatalf("add alice: %v %v", resp, err)
		}
		resp.Body.Close()
	}
	// A real client's messages for the right password: its final one is
	// for the nonce of the exchange it was made in, not the fuzzer's.
	cl, _ := xscram.SHA256.NewClient("default/alice", "pw", "")
	conv := cl.NewConversation()
	first, _ := conv.Step("")
	f.Add([]byte(first), []byte("c=biws,r=x,p=AAAA"))
	f.Add([]byte("n,,n=default/mallory,r=abc"), []byte("c=biws,r=abcdef,p=dGVzdA=="))
	f.Add([]byte("n,a=other,n=default/alice,r=abc"), []byte(""))
	f.Add([]byte("p=tls-unique,,n=default/alice,r=abc"), []byte("c=cD10bHMtdW5pcXVlLCw=,r=abc,p=AA=="))
	f.Add([]byte("y,,n=default=2Calice,r=\x00"), []byte("\xff\xfe"))
	f.Add([]byte(""), []byte(""))
	client := service.Client{ID: 1, Remote: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1}, Frontend: service.FrontendKafka}
	f.Fuzz(func(t *testing.T, first, final []byte) {
		ctx := brokertest.Context(t, 10*time.Second)
		for _, mech := range []string{service.MechanismSCRAMSHA256, service.MechanismSCRAMSHA512} {
			login, err := b.StartSCRAM(client, mech)
			if err != nil {
				t.Fatalf("StartSCRAM %s: %v", mech, err)
			}
			msg := first
			for step := range 2 {
				got, err := login.Step(ctx, msg)
				if err != nil {
					var we *wire.Error
					if !errors.As(err, &we) || we.Code != wire.CodeUnauthenticated {
						t.Fatalf("%s step %d of %q: %T %v; want an unauthenticated *wire.Error", mech, step, msg, err, err)
					}
					break
				}
				if got.Session != nil {
					got.Session.Close()
					t.Fatalf("%s: %q then %q opened a session", mech, first, final)
				}
				if step == 1 {
					t.Fatalf("%s: the final message %q was taken without a session", mech, final)
				}
				msg = final
			}
		}
	})
}
