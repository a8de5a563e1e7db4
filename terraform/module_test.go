// Package terraform_test runs terraform/ for real: OpenTofu from the tools
// cache applies examples/cluster (the modules/gpushare module) to real
// Consul and Nomad agents with ACLs on.
package terraform_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpushare/nomad-gpushare/internal/aclpolicy"
	"github.com/gpushare/nomad-gpushare/internal/localcluster"
	"github.com/gpushare/nomad-gpushare/internal/testcluster"
	"github.com/gpushare/nomad-gpushare/quota-service/kvlayout"
	"github.com/gpushare/nomad-gpushare/quota-service/state"
	consulapi "github.com/hashicorp/consul/api"
	nomadapi "github.com/hashicorp/nomad/api"
)

var layout = kvlayout.New("")

// TestModuleProvisionsACLCluster applies examples/cluster to Consul and
// Nomad with ACLs on (default deny) and follows an operator: the quotas,
// namespaces, policies, tokens, scheduler configuration and quota service
// are in place; the service, running on the tokens the module made, acts
// on the quotas; the device plugin runs on the module's token; a second
// plan is empty; a quota edited in Consul shows as a diff; a changed quota
// is followed by the service; a quota already in Consul is adopted by
// import, not overwritten; a bad quota fails at plan naming the attribute
// and the fix; destroy removes everything.
func TestModuleProvisionsACLCluster(t *testing.T) {
	c := startCluster(t)
	bin := filepath.Join(t.TempDir(), "gpushare-quota")
	if err := localcluster.BuildBinary("github.com/gpushare/nomad-gpushare/quota-service/cmd/gpushare-quota", bin); err != nil {
		t.Fatal(err)
	}
	w := newWorkspace(t, "examples/cluster")
	projects := map[string]any{
		"team-a": map[string]any{"guaranteed": 2, "priority": 10},
		"team-b": map[string]any{"guaranteed": 2, "limit": 4},
	}
	vars := map[string]any{"nomad_addr": c.NomadAddr, "consul_addr": strings.TrimPrefix(c.ConsulAddr, "http://"),
		"nomad_token": c.NomadToken, "consul_token": c.ConsulToken, "quota_binary": bin, "quota_driver": "raw_exec", "projects": projects}
	w.vars(vars)

	w.must(0, "init")
	w.must(2, "plan", "-detailed-exitcode")
	w.must(0, "apply", "-auto-approve")
	checkProvisioned(t, c)
	checkQuotaDocument(t, c, "team-a", "{\n  \"guaranteed\": 2,\n  \"priority\": 10\n}\n")
	checkQuotaDocument(t, c, "team-b", "{\n  \"guaranteed\": 2,\n  \"limit\": 4\n}\n")
	out := w.must(0, "output", "-raw", "plugin_nomad_token")
	if err := c.UsePluginToken(strings.TrimSpace(out)); err != nil {
		t.Fatalf("restarting the Nomad client with the module's plugin token: %v", err)
	}
	waitServiceFollows(t, c, "team-b", "2.00")
	jobs := reclaimOneGPU(t, c)

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
	w.must(0, "destroy", "-auto-approve")
	checkDestroyed(t, c)
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
	demo, err := os.ReadFile("../jobspecs/demo/plugin.hcl")
	if err != nil {
		t.Fatal(err)
	}
	return testcluster.Start(t, localcluster.Options{PluginDir: dir, PluginConfig: string(demo),
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

// reclaimOneGPU has team-a borrow all four GPUs (the fourth job gets the
// GPU kept shared only if the plugin's token lets it read waiting
// demand), then team-b (under its guarantee) ask for one: the service
// suspends one of team-a's jobs for team-b. It returns the jobs by
// namespace.
func reclaimOneGPU(t *testing.T, c *localcluster.Cluster) map[string][]string {
	t.Helper()
	jobs := map[string][]string{"team-a": {"a1", "a2", "a3", "a4"}, "team-b": {"b1"}}
	for _, id := range jobs["team-a"] {
		submitGPUJob(t, c, "team-a", id)
	}
	testcluster.Eventually(t, 2*time.Minute, func() error { return running(c, "team-a", jobs["team-a"], 4) })
	submitGPUJob(t, c, "team-b", "b1")
	testcluster.Eventually(t, 2*time.Minute, func() error {
		if err := running(c, "team-b", jobs["team-b"], 1); err != nil {
			return err
		}
		pairs, _, err := c.Consul.KV().List(layout.Suspended()+"team-a/", nil)
		if err != nil {
			return err
		}
		if len(pairs) != 1 {
			return fmt.Errorf("%d suspension records of team-a, want 1", len(pairs))
		}
		var rec state.Suspension
		if err := json.Unmarshal(pairs[0].Value, &rec); err != nil {
			return err
		}
		if rec.ForProject != "team-b" || rec.Phase != state.PhaseSuspended {
			return fmt.Errorf("suspension record %+v, want stopped for team-b", rec)
		}
		return nil
	})
	return jobs
}

// submitGPUJob registers a batch job holding one whole GPU until purged.
func submitGPUJob(t *testing.T, c *localcluster.Cluster, ns, id string) {
	t.Helper()
	job := nomadapi.NewBatchJob(id, id, "global", 50)
	job.Namespace = &ns
	task := nomadapi.NewTask("work", "raw_exec").SetConfig("command", "/bin/sleep").SetConfig("args", []string{"3600"})
	task.Resources = &nomadapi.Resources{CPU: ptr(20), MemoryMB: ptr(16),
		Devices: []*nomadapi.RequestedDevice{{Name: "nvidia/gpu", Count: ptr(uint64(1))}}}
	task.KillTimeout = ptr(time.Second)
	job.AddTaskGroup(nomadapi.NewTaskGroup("main", 1).AddTask(task))
	if _, _, err := c.Nomad.Jobs().Register(job, &nomadapi.WriteOptions{Namespace: ns}); err != nil {
		t.Fatalf("registering %s/%s: %v", ns, id, err)
	}
}

// running says whether want of the jobs have a running allocation.
func running(c *localcluster.Cluster, ns string, ids []string, want int) error {
	n := 0
	for _, id := range ids {
		allocs, _, err := c.Nomad.Jobs().Allocations(id, false, &nomadapi.QueryOptions{Namespace: ns})
		if err != nil {
			return err
		}
		for _, a := range allocs {
			if a.ClientStatus == "running" && a.DesiredStatus == "run" {
				n++
			}
		}
	}
	if n != want {
		return fmt.Errorf("%d of %s's jobs run, want %d", n, ns, want)
	}
	return nil
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

func ptr[T any](v T) *T { return &v }
