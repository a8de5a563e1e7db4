package aclview

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/hashicorp/nomad/acl"
	"github.com/hashicorp/nomad/api"
)

func parse(t testing.TB, rules string) *acl.Policy {
	t.Helper()
	p, err := acl.Parse(rules, acl.PolicyParseStrict)
	if err != nil {
		t.Fatalf("parsing %q: %v", rules, err)
	}
	return p
}

func TestEvaluate(t *testing.T) {
	tests := []struct {
		name     string
		policies map[string]string
		complete bool
		reason   []string // substrings of the reason
	}{
		{name: "read on every namespace", policies: map[string]string{"p": `namespace "*" { policy = "read" }`}, complete: true},
		{name: "read-job capability on every namespace", policies: map[string]string{"p": `namespace "*" { capabilities = ["read-job"] }`}, complete: true},
		{name: "write implies read-job", policies: map[string]string{"p": `namespace "*" { policy = "write" }`}, complete: true},
		{name: "one namespace only", policies: map[string]string{"p": `namespace "default" { policy = "read" }`},
			reason: []string{`no namespace "*" rule`, PolicyFile}},
		{name: "list-jobs is not read-job", policies: map[string]string{"p": `namespace "*" { capabilities = ["list-jobs"] }`},
			reason: []string{`namespace "*" lacks read-job (policy p)`}},
		{name: "an exact rule narrows the wildcard", policies: map[string]string{"p": `
namespace "*" { policy = "read" }
namespace "secret" { capabilities = ["submit-job"] }`}, reason: []string{`namespace "secret" lacks read-job (policy p)`}},
		{name: "a glob denies", policies: map[string]string{"p": `namespace "*" { policy = "read" }`, "q": `namespace "team-*" { policy = "deny" }`},
			reason: []string{`namespace "team-*" is denied (policy q)`}},
		{name: "deny in one policy wins over read in another", policies: map[string]string{"a": `namespace "*" { policy = "read" }`, "b": `namespace "*" { policy = "deny" }`},
			reason: []string{`namespace "*" is denied (policy a, b)`}},
		{name: "rules of one name merge across policies", policies: map[string]string{
			"a": `namespace "*" { policy = "read" }`,
			"b": `namespace "prod" { capabilities = ["submit-job"] }`,
			"c": `namespace "prod" { capabilities = ["read-job"] }`}, complete: true},
		{name: "no namespace rules", policies: map[string]string{"p": `node { policy = "read" }`}, reason: []string{`no namespace "*" rule`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var ps []Policy
			for _, name := range []string{"a", "b", "c", "p", "q"} {
				if r, ok := tt.policies[name]; ok {
					ps = append(ps, Policy{Name: name, Rules: parse(t, r)})
				}
			}
			v := Evaluate(ps)
			if v.Complete != tt.complete {
				t.Fatalf("complete = %v (%s), want %v", v.Complete, v.Reason, tt.complete)
			}
			for _, w := range tt.reason {
				if !strings.Contains(v.Reason, w) {
					t.Errorf("reason %q lacks %q", v.Reason, w)
				}
			}
		})
	}
}

// TestShippedPolicyIsComplete: the policy shipped for the plugin passes
// Nomad's strict parser and the check.
func TestShippedPolicyIsComplete(t *testing.T) {
	raw, err := os.ReadFile("../../" + PolicyFile)
	if err != nil {
		t.Fatal(err)
	}
	p := parse(t, string(raw))
	if v := Evaluate([]Policy{{Name: "gpushare-plugin", Rules: p}}); !v.Complete {
		t.Fatalf("shipped policy: %s", v.Reason)
	}
	if p.Node == nil || p.Node.Policy != "read" {
		t.Errorf("shipped policy does not grant node read: %+v", p.Node)
	}
}

// fakeACL serves the ACL endpoints the checker reads.
type fakeACL struct {
	token    *api.ACLToken
	tokenErr int    // HTTP status for /v1/acl/token/self when not 0
	errBody  string // and its body
	policies map[string]string
	index    uint64 // every policy's modify index
	reads    int
}

func (f *fakeACL) serve(t *testing.T) *api.Client {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.reads++
		switch {
		case r.URL.Path == "/v1/acl/token/self" && f.tokenErr != 0:
			http.Error(w, f.errBody, f.tokenErr)
		case r.URL.Path == "/v1/acl/token/self":
			json.NewEncoder(w).Encode(f.token)
		case r.URL.Path == "/v1/acl/policy/self":
			var out []*api.ACLPolicyListStub
			for _, n := range f.token.Policies {
				out = append(out, &api.ACLPolicyListStub{Name: n, ModifyIndex: f.index})
			}
			json.NewEncoder(w).Encode(out)
		case strings.HasPrefix(r.URL.Path, "/v1/acl/policy/"):
			name := strings.TrimPrefix(r.URL.Path, "/v1/acl/policy/")
			rules, ok := f.policies[name]
			if !ok {
				http.Error(w, "Permission denied", http.StatusForbidden)
				return
			}
			json.NewEncoder(w).Encode(&api.ACLPolicy{Name: name, Rules: rules, ModifyIndex: f.index})
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	c, err := api.NewClient(&api.Config{Address: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestChecker(t *testing.T) {
	tests := []struct {
		name     string
		fake     fakeACL
		complete bool
		reason   string
	}{
		{name: "ACLs disabled (v1.11)", fake: fakeACL{token: &api.ACLToken{AccessorID: "acls-disabled", Type: "client"}}, complete: true, reason: "ACLs are disabled"},
		{name: "ACLs disabled (older)", fake: fakeACL{tokenErr: http.StatusBadRequest, errBody: "ACL support disabled"}, complete: true, reason: "ACLs are disabled"},
		{name: "management", fake: fakeACL{token: &api.ACLToken{AccessorID: "x", Type: "management"}}, complete: true, reason: "management token"},
		{name: "shipped-like policy", fake: fakeACL{token: &api.ACLToken{Type: "client", Policies: []string{"plugin"}},
			policies: map[string]string{"plugin": `namespace "*" { capabilities = ["read-job"] }
node { policy = "read" }`}}, complete: true},
		{name: "one namespace", fake: fakeACL{token: &api.ACLToken{Type: "client", Policies: []string{"ops"}},
			policies: map[string]string{"ops": `namespace "default" { policy = "read" }`}}, reason: `no namespace "*" rule`},
		{name: "anonymous without a policy", fake: fakeACL{token: &api.ACLToken{AccessorID: "anonymous", Type: "client"}}, reason: `no namespace "*" rule`},
		{name: "unreadable policy", fake: fakeACL{token: &api.ACLToken{Type: "client", Policies: []string{"gone"}}},
			reason: `cannot check what the Nomad token may read (reading policy "gone"`},
		{name: "token refused", fake: fakeACL{tokenErr: http.StatusForbidden, errBody: "Permission denied"}, reason: "cannot check what the Nomad token may read"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := NewChecker(tt.fake.serve(t))
			v := c.Check(&api.QueryOptions{})
			if v.Complete != tt.complete || !strings.Contains(v.Reason, tt.reason) {
				t.Fatalf("verdict %+v, want complete=%v with %q", v, tt.complete, tt.reason)
			}
		})
	}
}

// TestCheckerNoticesChanges: every check reads the token and its policy
// list; a policy is read again only when its modify index changed, so a
// policy narrowed in place counts at the next check.
func TestCheckerNoticesChanges(t *testing.T) {
	f := &fakeACL{token: &api.ACLToken{Type: "client", Policies: []string{"p"}}, policies: map[string]string{"p": `namespace "*" { policy = "read" }`}}
	c := NewChecker(f.serve(t))
	if v := c.Check(&api.QueryOptions{}); !v.Complete {
		t.Fatalf("wide policy: %s", v.Reason)
	}
	reads := f.reads
	if v := c.Check(&api.QueryOptions{}); !v.Complete || f.reads-reads != 2 {
		t.Fatalf("unchanged policy: %+v after %d requests, want 2 (token, policy list)", v, f.reads-reads)
	}
	f.policies["p"] = `namespace "default" { policy = "read" }`
	f.index++
	if v := c.Check(&api.QueryOptions{}); v.Complete {
		t.Fatal("narrowed policy not noticed at the next check")
	}
	f.token = &api.ACLToken{Type: "management"}
	if v := c.Check(&api.QueryOptions{}); !v.Complete {
		t.Fatalf("token swapped for a management one: %s", v.Reason)
	}
}

func FuzzEvaluate(f *testing.F) {
	f.Add(`namespace "*" { policy = "read" }`, `namespace "x" { policy = "deny" }`)
	f.Add(`namespace "a*" { capabilities = ["read-job"] }`, ``)
	f.Fuzz(func(t *testing.T, a, b string) {
		var ps []Policy
		for _, r := range []string{a, b} {
			if p, err := acl.Parse(r, acl.PolicyParseLenient); err == nil {
				ps = append(ps, Policy{Name: "p", Rules: p})
			}
		}
		v := Evaluate(ps)
		if v.Reason == "" {
			t.Fatal("verdict without a reason")
		}
		if !v.Complete {
			return
		}
		// A complete verdict must agree with Nomad's own ACL on any
		// namespace name.
		obj, err := acl.NewACL(false, policiesOf(ps))
		if err != nil {
			return
		}
		for _, ns := range []string{"default", "x", "a", "ab", "zzz", a + "n", b} {
			if ns != "" && !strings.ContainsAny(ns, "*") && !obj.AllowNamespaceOperation(ns, acl.NamespaceCapabilityReadJob) {
				t.Fatalf("complete verdict, but Nomad's ACL denies read-job in %q", ns)
			}
		}
	})
}

func policiesOf(ps []Policy) []*acl.Policy {
	out := make([]*acl.Policy, len(ps))
	for i, p := range ps {
		out[i] = p.Rules
	}
	return out
}
