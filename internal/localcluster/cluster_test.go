package localcluster_test

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gpushare/nomad-gpushare/internal/localcluster"
	"github.com/gpushare/nomad-gpushare/internal/testcluster"
	nomadapi "github.com/hashicorp/nomad/api"
)

// TestClusterRunsJobThatWritesConsulKV starts both agents, runs a raw_exec
// batch job that writes its allocation ID into Consul KV with the consul CLI,
// and reads the key back.
func TestClusterRunsJobThatWritesConsulKV(t *testing.T) {
	c := testcluster.Start(t, localcluster.Options{})
	consulBin, err := localcluster.AgentBinary("consul")
	if err != nil {
		t.Fatal(err)
	}

	const key = "gpushare-test/written-by-job"
	job := nomadapi.NewBatchJob("kv-writer", "kv-writer", "global", 50)
	job.Datacenters = []string{"dc1"}
	task := nomadapi.NewTask("write", "raw_exec").
		SetConfig("command", consulBin).
		SetConfig("args", []string{"kv", "put", "-http-addr=" + c.ConsulAddr, key, "${NOMAD_ALLOC_ID}"})
	group := nomadapi.NewTaskGroup("write", 1).AddTask(task)
	group.RestartPolicy = &nomadapi.RestartPolicy{Attempts: ptr(0), Mode: ptr("fail")}
	job.AddTaskGroup(group)
	if _, _, err := c.Nomad.Jobs().Register(job, nil); err != nil {
		t.Fatalf("registering job: %v", err)
	}

	var allocID string
	testcluster.Eventually(t, 60*time.Second, func() error {
		allocs, _, err := c.Nomad.Jobs().Allocations("kv-writer", false, nil)
		if err != nil {
			return err
		}
		if len(allocs) != 1 {
			return fmt.Errorf("%d allocations, want 1", len(allocs))
		}
		a := allocs[0]
		switch a.ClientStatus {
		case "complete":
			allocID = a.ID
			return nil
		case "failed", "lost":
			t.Fatalf("allocation %s %s; nomad log:\n%s", a.ID, a.ClientStatus, c.NomadLogTail(30))
		}
		return fmt.Errorf("allocation %s is %s", a.ID, a.ClientStatus)
	})

	pair, _, err := c.Consul.KV().Get(key, nil)
	if err != nil {
		t.Fatalf("reading %s: %v", key, err)
	}
	if pair == nil {
		t.Fatalf("key %s not written by the job", key)
	}
	if got := string(pair.Value); got != allocID {
		t.Fatalf("key %s = %q, want the job's allocation ID %q", key, got, allocID)
	}
}

// TestCloseLeavesNoProcess checks that Close stops the agents and the tasks
// they started, including tasks that outlived a Nomad restart.
func TestCloseLeavesNoProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test: needs real agents; run without -short")
	}
	c, err := localcluster.New(localcluster.Options{})
	if err != nil {
		t.Fatal(err)
	}
	job := nomadapi.NewServiceJob("sleeper", "sleeper", "global", 50)
	job.Datacenters = []string{"dc1"}
	task := nomadapi.NewTask("sleep", "raw_exec").
		SetConfig("command", "/bin/sleep").SetConfig("args", []string{"600"})
	job.AddTaskGroup(nomadapi.NewTaskGroup("sleep", 1).AddTask(task))
	if _, _, err := c.Nomad.Jobs().Register(job, nil); err != nil {
		c.Close()
		t.Fatalf("registering job: %v", err)
	}
	testcluster.Eventually(t, 60*time.Second, func() error {
		allocs, _, err := c.Nomad.Jobs().Allocations("sleeper", false, nil)
		if err != nil {
			return err
		}
		if len(allocs) != 1 || allocs[0].ClientStatus != "running" {
			return fmt.Errorf("sleeper not running yet: %d allocations", len(allocs))
		}
		return nil
	})
	if err := c.RestartNomad(); err != nil {
		c.Close()
		t.Fatalf("restarting nomad: %v", err)
	}
	tree, agents := c.ProcessTree()
	if !hasSleep(tree) {
		c.Close()
		t.Fatalf("the sleep task is not among the agent's processes %v", tree)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if alive := localcluster.AlivePIDs(append(tree, agents...)); len(alive) > 0 {
		t.Fatalf("processes left after Close: %v", alive)
	}
	if _, err := os.Stat(c.Dir); !os.IsNotExist(err) {
		t.Fatalf("cluster directory %s not removed: %v", c.Dir, err)
	}
}

func hasSleep(pids []int) bool {
	for _, p := range pids {
		if cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p)); err == nil &&
			strings.HasPrefix(string(cmdline), "/bin/sleep\x00600") {
			return true
		}
	}
	return false
}

func ptr[T any](v T) *T { return &v }
