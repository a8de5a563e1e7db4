package actuator

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	nomadapi "github.com/hashicorp/nomad/api"
)

// TestPermissionsGenerationMovesOnlyWithThePolicies: reading the token's
// policies again keeps the generation (and every cached verdict) when
// they are the same, and moves it when a rule or the token changed.
func TestPermissionsGenerationMovesOnlyWithThePolicies(t *testing.T) {
	var rules, tokenType atomic.Value
	rules.Store(`namespace "*" { policy = "write" }`)
	tokenType.Store("client")
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/acl/token/self":
			_ = json.NewEncoder(rw).Encode(nomadapi.ACLToken{AccessorID: "a", Type: tokenType.Load().(string), Policies: []string{"p"}})
		case "/v1/acl/policy/p":
			_ = json.NewEncoder(rw).Encode(nomadapi.ACLPolicy{Name: "p", Rules: rules.Load().(string)})
		default:
			http.NotFound(rw, r)
		}
	}))
	defer srv.Close()
	client, err := nomadapi.NewClient(&nomadapi.Config{Address: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	p := newPermissions(client, 0) // read again on every call
	for _, tc := range []struct {
		name, rules, token string
		gen                int
	}{
		{name: "first read", rules: `namespace "*" { policy = "write" }`, token: "client", gen: 1},
		{name: "same policies", rules: `namespace "*" { policy = "write" }`, token: "client", gen: 1},
		{name: "a rule changed", rules: `namespace "*" { policy = "read" }`, token: "client", gen: 2},
		{name: "management token", rules: `namespace "*" { policy = "read" }`, token: "management", gen: 3},
		{name: "still management", rules: `namespace "*" { policy = "read" }`, token: "management", gen: 3},
	} {
		rules.Store(tc.rules)
		tokenType.Store(tc.token)
		_, gen, err := p.current(context.Background(), p.read.Add(1))
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if gen != tc.gen {
			t.Errorf("%s: generation %d, want %d", tc.name, gen, tc.gen)
		}
	}
}
