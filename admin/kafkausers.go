package admin

import (
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/xdg-go/scram"

	"github.com/getfelix/felix-go/auth"
	"github.com/getfelix/felix-go/service"
	"github.com/getfelix/felix-go/wire"
)

// The Kafka user routes: felix kafka user add, ls and rm. Each names its
// tenant in ?tenant=, so a token whose key is restricted to tenants
// manages its own tenant's users only; adding and removing need
// node.manage, listing node.view (on every tenant when ?tenant= is
// absent). The password never reaches the endpoint: the CLI derives the
// credential (salt, iterations, StoredKey, ServerKey) and sends that.

// ErrNoKafkaUsers is wrapped by the user calls of a broker that keeps no
// Kafka users (a cluster member, or auth none).
var ErrNoKafkaUsers = errors.New("admin: this broker keeps no Kafka users")

// The shape of a credential felix kafka user add makes, and of the
// decoy an unknown user is answered with, which must look the same:
// 4096 iterations (RFC 7677's minimum, Kafka's default) and a 32-byte
// salt.
const (
	KafkaUserDefaultIterations = 4096
	KafkaUserSaltLen           = 32
)

// maxKafkaUserBody bounds a user's JSON: a credential and its grants.
const maxKafkaUserBody = 64 << 10

// KafkaUser is a Kafka SCRAM user's credential for one mechanism as the
// routes carry it. A listing leaves Salt, StoredKey and ServerKey out:
// with them a password can be guessed offline.
type KafkaUser struct {
	Tenant     string       `json:"tenant"`
	User       string       `json:"user"`
	Mechanism  string       `json:"mechanism"`
	Salt       []byte       `json:"salt,omitempty"`
	Iterations int          `json:"iterations"`
	StoredKey  []byte       `json:"stored_key,omitempty"`
	ServerKey  []byte       `json:"server_key,omitempty"`
	Grants     []auth.Grant `json:"grants"`
	CreatedAt  time.Time    `json:"created_at,omitzero"`
}

// NewKafkaUser derives user's credential for mechanism (SCRAM-SHA-256 or
// SCRAM-SHA-512) from password, with a random salt of KafkaUserSaltLen
// bytes: what felix kafka user add sends, computed where the password is
// so that it never travels. The password is SASLprepped (RFC 4013), as
// clients prepare theirs.
func NewKafkaUser(tenant, user, mechanism, password string, iterations int, grants []auth.Grant) (KafkaUser, error) {
	var hashFn scram.HashGeneratorFcn
	switch mechanism {
	case service.MechanismSCRAMSHA256:
		hashFn = scram.SHA256
	case service.MechanismSCRAMSHA512:
		hashFn = scram.SHA512
	default:
		return KafkaUser{}, fmt.Errorf("admin: no SCRAM mechanism %q: use %s or %s", mechanism, service.MechanismSCRAMSHA256, service.MechanismSCRAMSHA512)
	}
	cl, err := hashFn.NewClient(tenant+"/"+user, password, "")
	if err != nil {
		return KafkaUser{}, fmt.Errorf("admin: the password: %w", err)
	}
	salt := make([]byte, KafkaUserSaltLen)
	if _, err := rand.Read(salt); err != nil {
		return KafkaUser{}, err
	}
	creds, err := cl.GetStoredCredentialsWithError(scram.KeyFactors{Salt: string(salt), Iters: iterations})
	if err != nil {
		return KafkaUser{}, fmt.Errorf("admin: derive the credential: %w", err)
	}
	return KafkaUser{Tenant: tenant, User: user, Mechanism: mechanism, Salt: salt, Iterations: iterations,
		StoredKey: creds.StoredKey, ServerKey: creds.ServerKey, Grants: grants}, nil
}

func (rt *routes) kafkaUserRoutes(mux *http.ServeMux) {
	mux.HandleFunc("POST /debug/kafka/users", rt.requireStream(auth.ActionNodeManage, queryTenant, rt.handlePutKafkaUser))
	mux.HandleFunc("GET /debug/kafka/users", rt.requireStream(auth.ActionNodeView, queryTenant, rt.handleKafkaUsers))
	mux.HandleFunc("DELETE /debug/kafka/users", rt.requireStream(auth.ActionNodeManage, queryTenant, rt.handleDeleteKafkaUser))
}

func (rt *routes) handlePutKafkaUser(w http.ResponseWriter, r *http.Request) {
	tenant := queryTenant(r)
	if tenant == "" {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "name the user's tenant: ?tenant=T"})
		return
	}
	var u KafkaUser
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxKafkaUserBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&u); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "kafka user: " + err.Error()})
		return
	}
	u.Tenant = tenant
	if err := rt.m.PutKafkaUser(u); err != nil {
		writeKafkaUserError(w, err)
		return
	}
	rt.cfg.Log.Info().Str("tenant", u.Tenant).Str("user", u.User).Str("mechanism", u.Mechanism).Msg("kafka user added")
	writeJSON(w, http.StatusOK, map[string]string{"tenant": u.Tenant, "user": u.User, "mechanism": u.Mechanism})
}

func (rt *routes) handleKafkaUsers(w http.ResponseWriter, r *http.Request) {
	users, err := rt.m.KafkaUsers(queryTenant(r))
	if err != nil {
		writeKafkaUserError(w, err)
		return
	}
	if users == nil {
		users = []KafkaUser{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"users": users})
}

func (rt *routes) handleDeleteKafkaUser(w http.ResponseWriter, r *http.Request) {
	tenant, user := queryTenant(r), r.URL.Query().Get("user")
	if tenant == "" || user == "" {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "name the user: ?tenant=T&user=U"})
		return
	}
	deleted, err := rt.m.DeleteKafkaUser(tenant, user)
	if err != nil {
		writeKafkaUserError(w, err)
		return
	}
	if !deleted {
		writeJSON(w, http.StatusNotFound, map[string]string{"error": "tenant " + tenant + " has no Kafka user " + user})
		return
	}
	rt.cfg.Log.Info().Str("tenant", tenant).Str("user", user).Msg("kafka user removed")
	writeJSON(w, http.StatusOK, map[string]string{"tenant": tenant, "user": user})
}

// writeKafkaUserError answers a refused user change: 400 for a bad
// credential, 409 where the broker keeps no users, 500 otherwise.
func writeKafkaUserError(w http.ResponseWriter, err error) {
	status := http.StatusInternalServerError
	switch {
	case errors.Is(err, wire.ErrInvalidRequest):
		status = http.StatusBadRequest
	case errors.Is(err, ErrNoKafkaUsers):
		status = http.StatusConflict
	}
	writeJSON(w, status, map[string]string{"error": err.Error()})
}
