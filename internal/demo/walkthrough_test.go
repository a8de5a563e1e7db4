package demo

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpushare/nomad-gpushare/internal/localcluster"
	"github.com/gpushare/nomad-gpushare/internal/testcluster"
	consulapi "github.com/hashicorp/consul/api"
	nomadapi "github.com/hashicorp/nomad/api"
)

// quotaWalkthrough plays docs/operator.md's quota walkthrough (A worked
// example, steps 0 to 3) on a running demo, as a person would with the
// env file sourced: with ACLs on, the grant-project.sh step is what lets
// the service suspend team-a's work for team-b.
func quotaWalkthrough(t *testing.T, c *localcluster.Cluster, root, dir string) {
	t.Helper()
	// 0. Free the node and drop the demo's quotas.
	for _, id := range []string{"training", "notebook", "inference"} {
		if _, _, err := c.Nomad.Jobs().Deregister(id, true, nil); err != nil {
			t.Fatalf("nomad job stop -purge %s: %v", id, err)
		}
	}
	for _, p := range []string{"default", "research"} {
		if _, err := c.Consul.KV().Delete("gpushare/quotas/"+p, nil); err != nil {
			t.Fatal(err)
		}
	}
	// 1. Two projects, their namespaces, and (ACLs) the service's rights.
	for _, p := range []string{"team-a", "team-b"} {
		pair := &consulapi.KVPair{Key: "gpushare/quotas/" + p, Value: []byte(`{"guaranteed": 2, "priority": 10}`)}
		if _, err := c.Consul.KV().Put(pair, nil); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Nomad.Namespaces().Register(&nomadapi.Namespace{Name: p}, nil); err != nil {
			t.Fatal(err)
		}
	}
	grant := exec.Command("bash", "-c", fmt.Sprintf("source %q && jobspecs/acl/grant-project.sh team-a team-b", filepath.Join(dir, "env")))
	grant.Dir = root
	if out, err := grant.CombinedOutput(); err != nil {
		t.Fatalf("grant-project.sh: %v\n%s", err, out)
	}
	// 2. team-a borrows the node; 3. team-b asks for its guarantee.
	spec, err := os.ReadFile(filepath.Join(root, "jobspecs/examples/training-whole-gpu.nomad.hcl"))
	if err != nil {
		t.Fatal(err)
	}
	submit := func(ns, id string) {
		job, err := c.Nomad.Jobs().ParseHCL(strings.Replace(string(spec), `job "training"`, fmt.Sprintf("job %q", id), 1), true)
		if err != nil {
			t.Fatalf("parsing the training example: %v", err)
		}
		job.Namespace = &ns
		if _, _, err := c.Nomad.Jobs().Register(job, &nomadapi.WriteOptions{Namespace: ns}); err != nil {
			t.Fatalf("nomad job run -namespace %s (%s): %v", ns, id, err)
		}
	}
	for i := 1; i <= 4; i++ {
		submit("team-a", fmt.Sprintf("train-a%d", i))
	}
	testcluster.Eventually(t, 2*time.Minute, func() error { return runningIn(c, "team-a", 4) })
	for i := 1; i <= 2; i++ {
		submit("team-b", fmt.Sprintf("train-b%d", i))
	}
	// 4. Within seconds two of team-a's jobs are suspended, with records.
	testcluster.Eventually(t, 2*time.Minute, func() error {
		if err := runningIn(c, "team-b", 2); err != nil {
			return err
		}
		keys, _, err := c.Consul.KV().Keys("gpushare/suspended/team-a/", "", nil)
		if err != nil {
			return err
		}
		if len(keys) != 2 {
			return fmt.Errorf("%d suspension records of team-a, want 2", len(keys))
		}
		return runningIn(c, "team-a", 2)
	})
}

// runningIn checks that exactly n allocations of namespace ns run.
func runningIn(c *localcluster.Cluster, ns string, n int) error {
	allocs, _, err := c.Nomad.Allocations().List(&nomadapi.QueryOptions{Namespace: ns})
	if err != nil {
		return err
	}
	got := 0
	for _, a := range allocs {
		if a.ClientStatus == "running" && a.DesiredStatus == "run" {
			got++
		}
	}
	if got != n {
		return fmt.Errorf("%d allocations of %s run, want %d", got, ns, n)
	}
	return nil
}
