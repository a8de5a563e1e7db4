// Package terraform_test runs terraform/ for real: OpenTofu from the tools
// cache applies examples/cluster (the modules/gpushare module) to real
// Consul and Nomad agents with ACLs on.
package terraform_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpushare/nomad-gpushare/internal/aclpolicy"
	"github.com/gpushare/nomad-gpushare/internal/demo"
	"github.com/gpushare/nomad-gpushare/internal/localcluster"
	"github.com/gpushare/nomad-gpushare/internal/testcluster"
	"github.com/gpushare/nomad-gpushare/quota-service/kvlayout"
	"github.com/gpushare/nomad-gpushare/quota-service/state"
	consulapi "github.com/hashicorp/consul/api"
	nomadapi "github.com/hashicorp/nomad/api"
)

var layout = kvlayout.New("")

// TestModuleProvisionsACLCluster applies examples/cluster to Consul and
// Nomad with ACLs on (default deny) and follows an operator: the quotas, a
// department with a project in it (the service takes the project), the
// namespaces, policies, tokens, scheduler configuration and quota service
// are in place; the service, running on the tokens the module made, acts
// on the quotas; the device plugin runs on the module's token; a second
// plan is empty; a quota edited in Consul shows as a diff; a changed quota
// is followed by the service; a quota already in Consul is adopted by
// import, not overwritten; a bad quota fails at plan naming the attribute
// and the fix; a second install named "blue" lives beside the first and
// its destroy removes only what it made; destroy removes everything.
func TestModuleProvisionsACLCluster(t *testing.T) {
	c := startCluster(t)
	bin := filepath.Join(t.TempDir(), "gpushare-quota")
	if err := localcluster.BuildBinary("github.com/gpushare/nomad-gpushare/quota-service/cmd/gpushare-quota", bin); err != nil {
		t.Fatal(err)
	}
	w := newWorkspace(t, "examples/cluster")
	projects := map[string]any{
		"team-a": map[string]any{"guaranteed": 2, "priority": 10},
		"team-b": map[string]any{"guaranteed": 2, "limit": 4, "min_runtime": "5m"},
		"team-r": map[string]any{"guaranteed": 1, "department": "research"},
	}
	departments := map[string]any{"research": map[string]any{"guaranteed": 1.5, "priority": 5}}
	vars := map[string]any{"nomad_addr": c.NomadAddr, "consul_addr": strings.TrimPrefix(c.ConsulAddr, "http://"),
		"nomad_token": c.NomadToken, "consul_token": c.ConsulToken, "quota_binary": bin, "quota_driver": "raw_exec", "projects": projects,
		"departments": departments}
	w.vars(vars)

	w.must(0, "init")
	w.must(2, "plan", "-detailed-exitcode")
	w.must(0, "apply", "-auto-approve")
	checkProvisioned(t, c)
	checkQuotaDocument(t, c, "team-a", "{\n  \"guaranteed\": 2,\n  \"priority\": 10\n}\n")
	checkQuotaDocument(t, c, "team-b", "{\n  \"guaranteed\": 2,\n  \"limit\": 4,\n  \"min_runtime\": \"5m\"\n}\n")
	checkQuotaDocument(t, c, "team-r", "{\n  \"guaranteed\": 1,\n  \"department\": \"research\"\n}\n")
	checkDepartmentDocument(t, c, "research", "{\n  \"guaranteed\": 1.5,\n  \"priority\": 5\n}\n")
	out := w.must(0, "output", "-raw", "plugin_nomad_token")
	if err := c.UsePluginToken(strings.TrimSpace(out)); err != nil {
		t.Fatalf("restarting the Nomad client with the module's plugin token: %v", err)
	}
	waitServiceFollows(t, c, "team-b", "2.00")
	// The service's token reads the department: it takes team-r in it.
	waitServiceFollows(t, c, "team-r", "1.00")
	jobs := testcluster.ReclaimOneGPU(t, c, layout)

	if out := w.must(0, "plan", "-detailed-exitcode"); !strings.Contains(out, "No changes") {
		t.Fatalf("second plan is not empty:\n%s", out)
	}
	checkDriftShows(t, c, w)
	w.must(0, "apply", "-auto-approve")
	checkImportAdopts(t, w)

	projects["team-b"] = map[string]any{"guaranteed": 1, "limit": 4}
	w.vars(vars)
	if out := w.must(2, "plan", "-detailed-exitcode"); !strings.Contains(out, "1 to change") {
		t.Fatalf("changing one quota plans something else:\n%s", out)
	}
	w.must(0, "apply", "-auto-approve")
	waitServiceFollows(t, c, "team-b", "1.00")

	projects["team-b"] = map[string]any{"guaranteed": 1, "limit": 0.5}
	w.vars(vars)
	checkBadQuotaFailsPlan(t, c, w)

	projects["team-b"] = map[string]any{"guaranteed": 1, "limit": 4}
	w.vars(vars)
	purge(t, c, jobs)
	waitPurged(t, c, jobs)
	installBeside(t, c, bin)
	w.must(0, "destroy", "-auto-approve")
	checkDestroyed(t, c)
}

// installBeside applies examples/cluster a second time, named "blue",
// beside the first install: a policy of its names made by someone else
// fails the plan; then it installs its own job, policies, tokens, variable
// and quotas, creates the namespace it lacks and leaves alone team-a's,
// which the first install made; its destroy removes only what it made.
func installBeside(t *testing.T, c *localcluster.Cluster, bin string) {
	t.Helper()
	w := newWorkspace(t, "examples/cluster")
	w.vars(map[string]any{"name": "blue", "nomad_addr": c.NomadAddr, "consul_addr": strings.TrimPrefix(c.ConsulAddr, "http://"),
		"nomad_token": c.NomadToken, "consul_token": c.ConsulToken, "quota_binary": bin, "quota_driver": "raw_exec",
		"projects": map[string]any{"team-c": map[string]any{"guaranteed": 1}, "shared": map[string]any{"guaranteed": 1, "namespace": "team-a"}}})
	w.must(0, "init")

	foreign := &nomadapi.ACLPolicy{Name: "blue-gpushare-plugin", Description: "someone else's", Rules: `node { policy = "read" }`}
	if _, err := c.Nomad.ACLPolicies().Upsert(foreign, nil); err != nil {
		t.Fatal(err)
	}
	if code, out := w.tofu("plan"); code == 0 || !strings.Contains(out, "was not made by this install") {
		t.Fatalf("plan over another owner's policy blue-gpushare-plugin: exit %d, want a refusal:\n%s", code, out)
	}
	if _, err := c.Nomad.ACLPolicies().Delete(foreign.Name, nil); err != nil {
		t.Fatal(err)
	}

	w.must(0, "apply", "-auto-approve")
	for _, p := range []string{"blue-gpushare-plugin", "blue-gpushare-quota", "gpushare-plugin", "gpushare-quota"} {
		if _, _, err := c.Nomad.ACLPolicies().Info(p, nil); err != nil {
			t.Errorf("Nomad policy %s: %v", p, err)
		}
	}
	for _, id := range []string{"blue-gpushare-quota", "gpushare-quota"} {
		if job, _, err := c.Nomad.Jobs().Info(id, nil); err != nil || job.Stop != nil && *job.Stop {
			t.Errorf("job %s is not running beside the other install: %v", id, err)
		}
	}
	if v, _, err := c.Nomad.Variables().Peek("nomad/jobs/blue-gpushare-quota", nil); err != nil || v == nil {
		t.Errorf("blue's tokens variable: %v", err)
	}
	for key, want := range map[string]bool{"blue-gpushare/quotas/team-c": true, "blue-gpushare/quotas/shared": true, "gpushare/quotas/team-a": true} {
		if pair, _, err := c.Consul.KV().Get(key, nil); err != nil || (pair != nil) != want {
			t.Errorf("Consul key %s: present %t, want %t (%v)", key, pair != nil, want, err)
		}
	}
	if ns, _, err := c.Nomad.Namespaces().Info("team-c", nil); err != nil || ns == nil || ns.Description != "gpushare project namespace (blue)" {
		t.Errorf("namespace team-c: %+v, %v", ns, err)
	}
	if out := w.must(0, "state", "list"); strings.Contains(out, `nomad_namespace.project["team-a"]`) {
		t.Errorf("blue took over namespace team-a, which the first install made:\n%s", out)
	}

	w.must(0, "destroy", "-auto-approve")
	if _, _, err := c.Nomad.Namespaces().Info("team-a", nil); err != nil {
		t.Errorf("blue's destroy removed namespace team-a, which it did not make: %v", err)
	}
	if job, _, err := c.Nomad.Jobs().Info("gpushare-quota", nil); err != nil || job.Stop != nil && *job.Stop {
		t.Errorf("blue's destroy touched the first install's job: %v", err)
	}
	if _, _, err := c.Nomad.Jobs().Info("blue-gpushare-quota", nil); err == nil {
		t.Error("blue's job left after its destroy")
	}
}

// startCluster starts Consul and Nomad with ACLs on and the demo's device
// plugin (four simulated GPUs, an idle one kept shared) without a token
// yet: the module makes it.
func startCluster(t *testing.T) *localcluster.Cluster {
	t.Helper()
	if testing.Short() {
		t.Skip("integration test: needs real agents and tofu; run without -short")
	}
	dir := t.TempDir()
	if err := localcluster.BuildBinary("github.com/gpushare/nomad-gpushare/device/cmd/nomad-device-gpushare",
		filepath.Join(dir, "nomad-device-gpushare")); err != nil {
		t.Fatal(err)
	}
	plugin, err := demo.PluginConfig("..", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return testcluster.Start(t, localcluster.Options{PluginDir: dir, PluginConfig: plugin.Config,
		WaitForDevices: []string{"nvidia/gpu", "nvidia/gpu-share"}, ACL: true})
}

// checkProvisioned checks what the module made besides the quotas.
func checkProvisioned(t *testing.T, c *localcluster.Cluster) {
	t.Helper()
	for _, ns := range []string{"team-a", "team-b"} {
		if got, _, err := c.Nomad.Namespaces().Info(ns, nil); err != nil || got == nil {
			t.Errorf("namespace %s: %v", ns, err)
		}
	}
	plugin, _, err := c.Nomad.ACLPolicies().Info("gpushare-plugin", nil)
	shipped, _ := aclpolicy.Read("..", aclpolicy.PluginNomad)
	if err != nil || plugin.Rules != shipped {
		t.Errorf("Nomad policy gpushare-plugin is not the shipped one: %v", err)
	}
	quota, _, err := c.Nomad.ACLPolicies().Info("gpushare-quota", nil)
	if err != nil {
		t.Fatalf("Nomad policy gpushare-quota: %v", err)
	}
	for _, want := range []string{`namespace "*"`, `namespace "team-a"`, `namespace "team-b"`, `"submit-job"`} {
		if !strings.Contains(quota.Rules, want) {
			t.Errorf("Nomad policy gpushare-quota lacks %s:\n%s", want, quota.Rules)
		}
	}
	if p, _, err := c.Consul.ACL().PolicyReadByName("gpushare-quota", nil); err != nil || p == nil || !strings.Contains(p.Rules, `key_prefix "gpushare/quotas/"`) {
		t.Errorf("Consul policy gpushare-quota is not the shipped one: %v", err)
	}
	sched, _, err := c.Nomad.Operator().SchedulerGetConfiguration(nil)
	if err != nil {
		t.Fatal(err)
	}
	pc := sched.SchedulerConfig.PreemptionConfig
	if pc.BatchSchedulerEnabled || pc.ServiceSchedulerEnabled || !pc.SystemSchedulerEnabled {
		t.Errorf("scheduler preemption %+v, want batch and service off, system on", pc)
	}
	// Two instances of the service pass their health check.
	testcluster.Eventually(t, 2*time.Minute, func() error {
		entries, _, err := c.Consul.Health().Service("gpushare-quota", "", true, nil)
		if err != nil {
			return err
		}
		if len(entries) != 2 {
			return fmt.Errorf("%d healthy gpushare-quota instances, want 2", len(entries))
		}
		return nil
	})
}

func checkQuotaDocument(t *testing.T, c *localcluster.Cluster, project, want string) {
	t.Helper()
	pair, _, err := c.Consul.KV().Get(layout.Quota(project), nil)
	if err != nil || pair == nil {
		t.Fatalf("quota of %s not in Consul: %v", project, err)
	}
	if string(pair.Value) != want {
		t.Errorf("quota of %s is\n%s\nwant\n%s", project, pair.Value, want)
	}
}

func checkDepartmentDocument(t *testing.T, c *localcluster.Cluster, name, want string) {
	t.Helper()
	pair, _, err := c.Consul.KV().Get(layout.Department(name), nil)
	if err != nil || pair == nil {
		t.Fatalf("department %s not in Consul: %v", name, err)
	}
	if string(pair.Value) != want {
		t.Errorf("department %s is\n%s\nwant\n%s", name, pair.Value, want)
	}
}

// waitServiceFollows waits until the service's status of project shows
// the guarantee want.
func waitServiceFollows(t *testing.T, c *localcluster.Cluster, project, want string) {
	t.Helper()
	testcluster.Eventually(t, 2*time.Minute, func() error {
		pair, _, err := c.Consul.KV().Get(layout.ProjectStatus(project), nil)
		if err != nil || pair == nil {
			return fmt.Errorf("no status of %s yet: %v", project, err)
		}
		var st state.ProjectStatus
		if err := json.Unmarshal(pair.Value, &st); err != nil {
			return err
		}
		if st.Guaranteed != want {
			return fmt.Errorf("the service says %s is guaranteed %s, want %s", project, st.Guaranteed, want)
		}
		return nil
	})
}

// checkDriftShows edits team-a's quota in Consul behind the module's back:
// the next plan shows the change back.
func checkDriftShows(t *testing.T, c *localcluster.Cluster, w *workspace) {
	t.Helper()
	doc := []byte(`{"guaranteed": 3, "priority": 10}`)
	if _, err := c.Consul.KV().Put(&consulapi.KVPair{Key: layout.Quota("team-a"), Value: doc}, nil); err != nil {
		t.Fatal(err)
	}
	out := w.must(2, "plan", "-detailed-exitcode")
	if !strings.Contains(out, `gpushare_quota.project["team-a"] will be updated`) || !strings.Contains(out, "guaranteed") ||
		!strings.Contains(out, "3 -> 2") {
		t.Fatalf("a quota edited in Consul does not show as a diff:\n%s", out)
	}
}

// checkImportAdopts forgets team-a's quota: applying then refuses to write
// over the document in Consul and says to import it; importing it adopts
// it with no change to plan.
func checkImportAdopts(t *testing.T, w *workspace) {
	t.Helper()
	const addr = `module.gpushare.gpushare_quota.project["team-a"]`
	w.must(0, "state", "rm", addr)
	code, out := w.tofu("apply", "-auto-approve")
	if code == 0 || !strings.Contains(out, "already holds a quota") || !strings.Contains(out, "import it") {
		t.Fatalf("apply over an existing quota (exit %d) does not say to import it:\n%s", code, out)
	}
	w.must(0, "import", addr, "team-a")
	if out := w.must(0, "plan", "-detailed-exitcode"); !strings.Contains(out, "No changes") {
		t.Fatalf("plan after importing the quota is not empty:\n%s", out)
	}
}

// checkBadQuotaFailsPlan: a limit below the guarantee fails at plan, on
// the attribute, with the fix; nothing is written.
func checkBadQuotaFailsPlan(t *testing.T, c *localcluster.Cluster, w *workspace) {
	t.Helper()
	code, out := w.tofu("plan")
	if code == 0 {
		t.Fatalf("plan accepted a limit below the guarantee:\n%s", out)
	}
	for _, want := range []string{`Invalid quota for project "team-b"`, `gpushare_quota.project["team-b"]`, "limit 0.50 is below guaranteed 1.00",
		`Fix: raise "limit" to at least "guaranteed"`} {
		if !strings.Contains(out, want) {
			t.Errorf("plan's error does not say %q:\n%s", want, out)
		}
	}
	checkQuotaDocument(t, c, "team-b", "{\n  \"guaranteed\": 1,\n  \"limit\": 4\n}\n")
	t.Logf("plan of a bad quota:\n%s", out)
}

// purge removes the test's jobs so that their namespaces can go.
func purge(t *testing.T, c *localcluster.Cluster, jobs map[string][]string) {
	t.Helper()
	for ns, ids := range jobs {
		for _, id := range ids {
			if _, _, err := c.Nomad.Jobs().Deregister(id, true, &nomadapi.WriteOptions{Namespace: ns}); err != nil {
				t.Fatalf("purging %s/%s: %v", ns, id, err)
			}
		}
	}
}

// waitPurged waits until the projects' namespaces hold no job and no live
// allocation (Nomad refuses to delete a namespace before), and fails with
// what is left if a purged job came back.
func waitPurged(t *testing.T, c *localcluster.Cluster, jobs map[string][]string) {
	t.Helper()
	testcluster.Eventually(t, 2*time.Minute, func() error {
		for ns := range jobs {
			opts := &nomadapi.QueryOptions{Namespace: ns}
			stubs, _, err := c.Nomad.Jobs().List(opts)
			if err != nil {
				return err
			}
			for _, j := range stubs {
				return fmt.Errorf("job %s/%s is in Nomad after its purge (job modify index %d, status %s, stop %t)", ns, j.ID, j.JobModifyIndex, j.Status, j.Stop)
			}
			allocs, _, err := c.Nomad.Allocations().List(opts)
			if err != nil {
				return err
			}
			for _, a := range allocs {
				if a.ClientStatus == "pending" || a.ClientStatus == "running" {
					return fmt.Errorf("allocation %s of %s/%s is still %s", a.ID, ns, a.JobID, a.ClientStatus)
				}
			}
		}
		return nil
	})
}

// checkDestroyed checks that destroy left nothing of the module.
func checkDestroyed(t *testing.T, c *localcluster.Cluster) {
	t.Helper()
	ctx := context.Background()
	if pairs, _, err := c.Consul.KV().List(layout.Quotas(), (&consulapi.QueryOptions{}).WithContext(ctx)); err != nil || len(pairs) > 0 {
		t.Errorf("quotas left after destroy: %d (%v)", len(pairs), err)
	}
	if pairs, _, err := c.Consul.KV().List(layout.Departments(), (&consulapi.QueryOptions{}).WithContext(ctx)); err != nil || len(pairs) > 0 {
		t.Errorf("departments left after destroy: %d (%v)", len(pairs), err)
	}
	for _, ns := range []string{"team-a", "team-b"} {
		if got, _, err := c.Nomad.Namespaces().Info(ns, nil); err == nil && got != nil {
			t.Errorf("namespace %s left after destroy", ns)
		}
	}
	for _, p := range []string{"gpushare-plugin", "gpushare-quota"} {
		if _, _, err := c.Nomad.ACLPolicies().Info(p, nil); err == nil {
			t.Errorf("Nomad policy %s left after destroy", p)
		}
	}
	if p, _, err := c.Consul.ACL().PolicyReadByName("gpushare-quota", nil); err != nil || p != nil {
		t.Errorf("Consul policy gpushare-quota left after destroy (%v)", err)
	}
	if v, _, err := c.Nomad.Variables().Peek("nomad/jobs/gpushare-quota", nil); err != nil || v != nil {
		t.Errorf("the service's tokens variable left after destroy (%v)", err)
	}
	if job, _, err := c.Nomad.Jobs().Info("gpushare-quota", nil); err == nil {
		t.Errorf("quota service job left after destroy: status %s", *job.Status)
	}
}
