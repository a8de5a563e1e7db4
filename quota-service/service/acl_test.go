package service_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpushare/nomad-gpushare/internal/aclpolicy"
	"github.com/gpushare/nomad-gpushare/internal/localcluster"
	"github.com/gpushare/nomad-gpushare/internal/testcluster"
	"github.com/gpushare/nomad-gpushare/quota-service/nomadwatch"
	"github.com/gpushare/nomad-gpushare/quota-service/service"
	consulapi "github.com/hashicorp/consul/api"
	nomadapi "github.com/hashicorp/nomad/api"
)

// repoRoot is the checkout, where the shipped policies are.
const repoRoot = "../.."

func shippedPolicy(t testing.TB, name string) string {
	t.Helper()
	rules, err := aclpolicy.Read(repoRoot, name)
	if err != nil {
		t.Fatal(err)
	}
	return rules
}

// newACLGPUCluster starts Consul and Nomad with ACLs on (default deny) and
// the device plugin on the demo's four simulated GPUs, with a token made
// from the shipped plugin policy.
func newACLGPUCluster(t *testing.T) *localcluster.Cluster {
	t.Helper()
	if testing.Short() {
		t.Skip("integration test: needs real agents; run without -short")
	}
	dir := t.TempDir()
	out := filepath.Join(dir, "nomad-device-gpushare")
	if err := localcluster.BuildBinary("github.com/gpushare/nomad-gpushare/device/cmd/nomad-device-gpushare", out); err != nil {
		t.Fatalf("building the device plugin: %v", err)
	}
	return testcluster.Start(t, localcluster.Options{PluginDir: dir, PluginConfig: demoPluginConfig,
		WaitForDevices: []string{"nvidia/gpu", "nvidia/gpu-share"}, ACL: true,
		PluginPolicy: shippedPolicy(t, aclpolicy.PluginNomad)})
}

func nomadWithToken(t testing.TB, c *localcluster.Cluster, token string) *nomadapi.Client {
	t.Helper()
	client, err := nomadapi.NewClient(&nomadapi.Config{Address: c.NomadAddr, SecretID: token})
	if err != nil {
		t.Fatal(err)
	}
	return client
}

func consulWithToken(t testing.TB, c *localcluster.Cluster, token string) *consulapi.Client {
	t.Helper()
	client, err := consulapi.NewClient(&consulapi.Config{Address: strings.TrimPrefix(c.ConsulAddr, "http://"), Token: token})
	if err != nil {
		t.Fatal(err)
	}
	return client
}

// TestReclaimWithACLs is issue 13's ACL story: Consul and Nomad with ACLs
// on and default deny; the device plugin, the quota service and the person
// editing quotas each hold a token made from the shipped policies and
// nothing more. Team-a borrows the whole 4-GPU node (its fourth job needs
// the GPU the plugin keeps shared, which the plugin switches only if its
// token may read the waiting demand), team-b reclaims its 2 guaranteed
// GPUs, and team-a's suspended jobs resume when team-b's end. The
// service's tokens cannot write a quota nor act outside project
// namespaces. The service publishes the placement ranks with its token.
func TestReclaimWithACLs(t *testing.T) {
	c := newACLGPUCluster(t)
	s := newScenario(t, c, "gpushare")

	people, err := c.CreateConsulToken("people-quota-admin", shippedPolicy(t, aclpolicy.PeopleConsul))
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"team-a", "team-b"} {
		pair := &consulapi.KVPair{Key: s.layout.Quota(q), Value: []byte("{\n  \"guaranteed\": 2\n}\n")}
		if _, err := consulWithToken(t, c, people).KV().Put(pair, nil); err != nil {
			t.Fatalf("writing quota %s with the quota admins' token: %v", q, err)
		}
	}
	rules, err := aclpolicy.QuotaNomad(repoRoot, []string{"team-a", "team-b"})
	if err != nil {
		t.Fatal(err)
	}
	nomadToken, err := c.CreateNomadToken("gpushare-quota", rules)
	if err != nil {
		t.Fatal(err)
	}
	consulToken, err := c.CreateConsulToken("gpushare-quota", shippedPolicy(t, aclpolicy.QuotaConsul))
	if err != nil {
		t.Fatal(err)
	}
	svcNomad, svcConsul := nomadWithToken(t, c, nomadToken), consulWithToken(t, c, consulToken)
	svc, stopSvc := s.startQuotaService("q1", func(cfg *service.Config) {
		cfg.Nomad, cfg.Consul, cfg.PublishRanks = svcNomad, svcConsul, true
	})
	waitLeader(t, svc)

	a, b := jobsOf("team-a", 4, 1), jobsOf("team-b", 2, 1)
	for _, j := range a {
		s.submit(j)
	}
	s.wait(120*time.Second, "running", isRunning, a...)
	checkRanksPublished(t, c)
	stop := s.watchNothingLost(append(append([]gpuJob(nil), a...), b...))
	latency, suspended := s.reclaim(a, b, 2)
	t.Logf("reclaim with ACLs: team-b's 2 jobs run %.2fs after submission", latency.Seconds())
	// People who edit quotas read the status, not the records (which name
	// every suspended job and hold its sealed spec).
	for _, j := range suspended {
		key := s.layout.Suspension(j.ns, j.id)
		if pair, _, err := consulWithToken(t, c, people).KV().Get(key, nil); err == nil && pair != nil {
			t.Errorf("the quota admins' token reads the suspension record %s", key)
		}
	}
	if pair, _, err := consulWithToken(t, c, people).KV().Get(s.layout.ProjectStatus("team-a"), nil); err != nil || pair == nil {
		t.Errorf("the quota admins' token cannot read team-a's status: %v", err)
	}
	checkPrettyJSON(t, c, s.layout.Root+"/")
	checkStatusByToken(t, c, svc, svcNomad, suspended)

	for _, j := range b {
		s.finish(j.ns, j.id)
	}
	s.wait(60*time.Second, "complete", isComplete, b...)
	s.wait(60*time.Second, "running again", isRunning, suspended...)
	s.finish("team-a", "")
	s.wait(60*time.Second, "complete", isComplete, a...)
	if violations, polls := stop(); len(violations) > 0 {
		t.Fatalf("jobs lost at %d of %d polls:\n%s", len(violations), polls, strings.Join(violations, "\n"))
	}
	// A resumed job's record closes ("running-again") at the cycle after
	// it finished.
	testcluster.Eventually(t, 30*time.Second, func() error {
		for _, j := range suspended {
			for _, ev := range []string{"suspend ", "resume ", "running-again "} {
				if n := countPrefix(s.historyEvents(), ev+j.ns+"/"+j.id); n != 1 {
					return fmt.Errorf("history has %d %q entries for %s/%s, want 1", n, strings.TrimSpace(ev), j.ns, j.id)
				}
			}
		}
		return nil
	})
	checkDepartmentsWithACLs(t, s, svc, consulWithToken(t, c, people))
	checkElasticWithACLs(t, s, consulWithToken(t, c, people))
	checkServiceTokensDenied(t, s, svcNomad, svcConsul)
	// The shipped policy lets the service follow the event stream.
	if n := metric(t, svc.Registry(), "gpushare_view_relists_total", map[string]string{"reason": "start"}); n == 0 {
		t.Errorf("the leader never listed Nomad for a connected event stream: the shipped policy should allow the stream")
	}
	stopSvc()
	checkStreamRefusedPolls(t, s, rules, svcConsul)
}

// checkDepartmentsWithACLs: the quota admins' token writes a department
// document, and the service's token reads it (its status shows it).
func checkDepartmentsWithACLs(t *testing.T, s *scenario, svc *service.Service, people *consulapi.Client) {
	t.Helper()
	key := s.layout.Department("acl-research")
	if _, err := people.KV().Put(&consulapi.KVPair{Key: key, Value: []byte(`{"guaranteed": 0}`)}, nil); err != nil {
		t.Fatalf("writing department %s with the quota admins' token: %v", key, err)
	}
	testcluster.Eventually(t, 30*time.Second, func() error {
		for _, d := range svc.Status().Departments {
			if d.Name == "acl-research" {
				return nil
			}
		}
		return fmt.Errorf("the service does not show department acl-research: its token should read %s", s.layout.Departments())
	})
	if _, err := people.KV().Delete(key, nil); err != nil {
		t.Fatal(err)
	}
}

// checkElasticWithACLs: with the shipped policies, team-a's elastic group
// shrinks to its minimum for team-b and grows back; the quota admins'
// token cannot read the shrink record.
func checkElasticWithACLs(t *testing.T, s *scenario, people *consulapi.Client) {
	t.Helper()
	if err := os.Remove(filepath.Join(s.control, "all-team-a")); err != nil {
		t.Fatal(err)
	}
	serve := gpuJob{ns: "team-a", id: "serve", whole: 1, count: 4, groupMeta: map[string]string{nomadwatch.MetaMinCount: "2"}}
	s.submit(serve)
	s.wait(120*time.Second, "running all of itself", runsAll(4), serve)
	b := []gpuJob{{ns: "team-b", id: "infer-1", whole: 1}, {ns: "team-b", id: "infer-2", whole: 1}}
	for _, j := range b {
		s.submit(j)
	}
	s.wait(90*time.Second, "running", isRunning, b...)
	s.wait(30*time.Second, "running at its minimum", runsAll(2), serve)
	if rec, err := s.shrinkRecord(serve); err != nil || rec == nil {
		t.Fatalf("shrink record of serve: %+v (%v), want one", rec, err)
	}
	key := s.layout.ShrinkRecord(serve.ns, serve.id)
	if pair, _, err := people.KV().Get(key, nil); err == nil && pair != nil {
		t.Errorf("the quota admins' token reads the shrink record %s", key)
	}
	for _, j := range b {
		s.finish(j.ns, j.id)
	}
	s.wait(120*time.Second, "grown back", runsAll(4), serve)
	s.finish(serve.ns, serve.id)
	s.wait(60*time.Second, "complete", isComplete, serve)
}

// checkStreamRefusedPolls: a token without read-job in every namespace
// is refused the event stream (403); the service warns and lists Nomad in
// full every cycle instead, and still works.
func checkStreamRefusedPolls(t *testing.T, s *scenario, rules string, consul *consulapi.Client) {
	t.Helper()
	narrow := strings.Replace(rules, `namespace "*" {`, `namespace "team-*" {`, 1)
	// The record key's block reads jobs in "default" too: not here.
	narrow = strings.Replace(narrow, `capabilities = ["list-jobs", "read-job"]`, "", 1)
	token, err := s.c.CreateNomadToken("gpushare-quota-narrow", narrow)
	if err != nil {
		t.Fatal(err)
	}
	var logs lockedBuffer
	svc, _ := s.startQuotaService("q2", func(cfg *service.Config) {
		cfg.Nomad, cfg.Consul, cfg.Log = nomadWithToken(t, s.c, token), consul, teeLogger(t, "q2", &logs)
		cfg.PlanInterval = time.Second
	})
	waitLeader(t, svc)
	testcluster.Eventually(t, 60*time.Second, func() error {
		if !strings.Contains(logs.String(), "Nomad refused or closed the event stream at once: polling instead") {
			return errors.New("no warning that the event stream was refused")
		}
		return nil
	})
	// A cycle lists Nomad as it starts and counts as completed when it
	// ends: the first of the cycles waited for may have listed before
	// the count was read, so four cycles show at least three listings.
	polls := metric(t, svc.Registry(), "gpushare_view_relists_total", map[string]string{"reason": "poll"})
	reused := metric(t, svc.Registry(), "gpushare_plans_reused_total", nil)
	waitCycles(t, svc, 4)
	if n := metric(t, svc.Registry(), "gpushare_view_relists_total", map[string]string{"reason": "poll"}); n < polls+3 {
		t.Errorf("%v listings in 4 cycles without the stream, want one a cycle", n-polls)
	}
	// Nothing changes meanwhile: the cycles take the last plan again.
	if n := metric(t, svc.Registry(), "gpushare_plans_reused_total", nil); n < reused+3 {
		t.Errorf("%v plans taken again in 4 cycles where nothing changed, want at least 3", n-reused)
	}
	if h := svc.Health(); !h.OK {
		t.Errorf("health without the event stream = %+v, want OK", h)
	}
}

// checkServiceTokensDenied shows what the service's tokens may not do:
// write a quota, write outside its folders, or stop a job outside the
// project namespaces.
func checkServiceTokensDenied(t *testing.T, s *scenario, nomad *nomadapi.Client, consul *consulapi.Client) {
	t.Helper()
	for _, key := range []string{s.layout.Quota("team-a"), s.layout.Quota("new-project"), "other/key"} {
		_, err := consul.KV().Put(&consulapi.KVPair{Key: key, Value: []byte(`{"guaranteed": 4}`)}, nil)
		if err == nil || !strings.Contains(err.Error(), "Permission denied") {
			t.Errorf("the service's Consul token wrote %s: %v, want permission denied", key, err)
		}
	}
	runSleeper(t, s.c, "default", "outside")
	if _, _, err := nomad.Jobs().Deregister("outside", false, nil); err == nil || !strings.Contains(err.Error(), "403") {
		t.Errorf("the service's Nomad token stopped a job in namespace default: %v, want 403", err)
	}
}

// checkPrettyJSON checks that every JSON document the service wrote under
// prefix (all but people's quota documents and the lock) is indented, so
// it reads well in the Consul UI.
func checkPrettyJSON(t *testing.T, c *localcluster.Cluster, prefix string) {
	t.Helper()
	pairs, _, err := c.Consul.KV().List(prefix, nil)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, p := range pairs {
		if strings.HasPrefix(p.Key, prefix+"quotas/") || p.Key == prefix+"leader" {
			continue
		}
		n++
		if !json.Valid(p.Value) {
			t.Errorf("%s is not JSON: %.80q", p.Key, p.Value)
			continue
		}
		if !strings.Contains(string(p.Value), "\n  \"") {
			t.Errorf("%s is not indented JSON: %.80q", p.Key, p.Value)
		}
	}
	if n < 4 {
		t.Errorf("only %d documents under %s, want project status, records and history", n, prefix)
	}
	t.Logf("%d documents under %s are indented JSON", n, prefix)
}
