package testcluster

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/gpushare/nomad-gpushare/internal/localcluster"
	"github.com/gpushare/nomad-gpushare/quota-service/kvlayout"
	"github.com/gpushare/nomad-gpushare/quota-service/state"
	nomadapi "github.com/hashicorp/nomad/api"
)

// ReclaimOneGPU has team-a borrow all four GPUs of the demo's plugin
// config (the fourth job gets the GPU kept shared only if the plugin may
// read waiting demand), then team-b (under its guarantee of 2, as team-a's)
// ask for one: the quota service whose keys are under layout suspends one
// of team-a's jobs for team-b. It returns the jobs by namespace, which
// the namespaces team-a and team-b must exist for.
func ReclaimOneGPU(t testing.TB, c *localcluster.Cluster, layout kvlayout.Layout) map[string][]string {
	t.Helper()
	jobs := map[string][]string{"team-a": {"a1", "a2", "a3", "a4"}, "team-b": {"b1"}}
	for _, id := range jobs["team-a"] {
		SubmitGPUJob(t, c, "team-a", id)
	}
	Eventually(t, 2*time.Minute, func() error { return Running(c, "team-a", jobs["team-a"], 4) })
	SubmitGPUJob(t, c, "team-b", "b1")
	Eventually(t, 2*time.Minute, func() error {
		if err := Running(c, "team-b", jobs["team-b"], 1); err != nil {
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

// SubmitGPUJob registers a raw_exec batch job holding one whole GPU until
// purged.
func SubmitGPUJob(t testing.TB, c *localcluster.Cluster, ns, id string) {
	t.Helper()
	job := nomadapi.NewBatchJob(id, id, "global", 50)
	job.Namespace = &ns
	task := nomadapi.NewTask("work", "raw_exec").SetConfig("command", "/bin/sleep").SetConfig("args", []string{"3600"})
	cpu, mem, count, kill := 20, 16, uint64(1), time.Second
	task.Resources = &nomadapi.Resources{CPU: &cpu, MemoryMB: &mem,
		Devices: []*nomadapi.RequestedDevice{{Name: "nvidia/gpu", Count: &count}}}
	task.KillTimeout = &kill
	job.AddTaskGroup(nomadapi.NewTaskGroup("main", 1).AddTask(task))
	if _, _, err := c.Nomad.Jobs().Register(job, &nomadapi.WriteOptions{Namespace: ns}); err != nil {
		t.Fatalf("registering %s/%s: %v", ns, id, err)
	}
}

// Running says whether want of the jobs in ns have a running allocation.
func Running(c *localcluster.Cluster, ns string, ids []string, want int) error {
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
