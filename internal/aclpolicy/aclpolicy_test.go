package aclpolicy

import (
	"testing"

	"github.com/hashicorp/nomad/acl"
)

// compile parses rules with Nomad's own policy parser.
func compile(t *testing.T, rules string) *acl.ACL {
	t.Helper()
	p, err := acl.Parse(rules, true)
	if err != nil {
		t.Fatalf("Nomad rejects the policy: %v\n%s", err, rules)
	}
	a, err := acl.NewACL(false, []*acl.Policy{p})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// TestQuotaServiceActsOnlyInProjectNamespaces: the quota service's Nomad
// policy, assembled from the shipped files, lets it watch every namespace,
// suspend or resume jobs only in the project namespaces, and write node
// metadata (the placement ranks).
func TestQuotaServiceActsOnlyInProjectNamespaces(t *testing.T) {
	rules, err := QuotaNomad("../..", []string{"team-a", "team-b"})
	if err != nil {
		t.Fatal(err)
	}
	a := compile(t, rules)
	for _, ns := range []string{"team-a", "team-b", "default", "infra"} {
		for _, op := range []string{acl.NamespaceCapabilityListJobs, acl.NamespaceCapabilityReadJob} {
			if !a.AllowNamespaceOperation(ns, op) {
				t.Errorf("the service may not %s in %s", op, ns)
			}
		}
		project := ns == "team-a" || ns == "team-b"
		if got := a.AllowNamespaceOperation(ns, acl.NamespaceCapabilitySubmitJob); got != project {
			t.Errorf("submit-job in %s: %v, want %v", ns, got, project)
		}
	}
	// The published node demand (-publish-demand): its heartbeat and node
	// values, written, listed and deleted by the service alone.
	for _, path := range []string{"gpushare/demand/leader", "gpushare/demand/nodes/n1"} {
		for _, op := range []string{acl.VariablesCapabilityRead, acl.VariablesCapabilityWrite, acl.VariablesCapabilityList, acl.VariablesCapabilityDestroy} {
			if !a.AllowVariableOperation("default", path, op, nil) {
				t.Errorf("the service may not %s the variable %s", op, path)
			}
		}
	}
	// Node write: the placement ranks are node metadata (-publish-ranks).
	if !a.AllowNodeRead() || !a.AllowNodeWrite() || a.AllowAgentRead() {
		t.Errorf("node read %v, node write %v, agent read %v: want node read and write (placement ranks), no agent read", a.AllowNodeRead(), a.AllowNodeWrite(), a.AllowAgentRead())
	}
}

// TestPluginPolicyOnlyReadsAndMovesGuests: the device plugin reads its node
// and every namespace's jobs, may stop an allocation (alloc-lifecycle: the
// node-level scheduler moves a guest back to its home GPU that way), and
// may change nothing else.
func TestPluginPolicyOnlyReadsAndMovesGuests(t *testing.T) {
	rules, err := Read("../..", PluginNomad)
	if err != nil {
		t.Fatal(err)
	}
	a := compile(t, rules)
	if !a.AllowNodeRead() || a.AllowNodeWrite() {
		t.Errorf("node read %v, node write %v: want read only", a.AllowNodeRead(), a.AllowNodeWrite())
	}
	for _, ns := range []string{"default", "team-a"} {
		for _, op := range []string{acl.NamespaceCapabilityReadJob, acl.NamespaceCapabilityAllocLifecycle} {
			if !a.AllowNamespaceOperation(ns, op) {
				t.Errorf("the plugin may not %s in %s", op, ns)
			}
		}
		for _, op := range []string{acl.NamespaceCapabilitySubmitJob, acl.NamespaceCapabilityDispatchJob, acl.NamespaceCapabilityAllocExec, acl.NamespaceCapabilityAllocNodeExec} {
			if a.AllowNamespaceOperation(ns, op) {
				t.Errorf("the plugin may %s in %s", op, ns)
			}
		}
	}
	// The published node demand: read only; no other variable.
	for _, path := range []string{"gpushare/demand/leader", "gpushare/demand/nodes/n1"} {
		if !a.AllowVariableOperation("default", path, acl.VariablesCapabilityRead, nil) {
			t.Errorf("the plugin may not read the variable %s", path)
		}
		for _, op := range []string{acl.VariablesCapabilityWrite, acl.VariablesCapabilityDestroy} {
			if a.AllowVariableOperation("default", path, op, nil) {
				t.Errorf("the plugin may %s the variable %s", op, path)
			}
		}
	}
	if a.AllowVariableOperation("default", "gpushare/record-key", acl.VariablesCapabilityRead, nil) {
		t.Error("the plugin may read the service's record keys")
	}
}
