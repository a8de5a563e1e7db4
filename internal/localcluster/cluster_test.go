package localcluster_test

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gpushare/nomad-gpushare/internal/localcluster"
	"github.com/gpushare/nomad-gpushare/internal/testcluster"
	consulapi "github.com/hashicorp/consul/api"
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

// TestACLClusterDeniesWithoutToken starts the agents with ACLs on and
// checks what an operator relies on: a request without a token is denied
// by both agents, the management tokens work, Consul's agent registered
// its node (a session can be made on it), and Nomad registers a job's
// service in Consul with its own Consul token.
func TestACLClusterDeniesWithoutToken(t *testing.T) {
	c := testcluster.Start(t, localcluster.Options{ACL: true})
	if c.ConsulToken == "" || c.NomadToken == "" {
		t.Fatalf("ACL cluster without management tokens: consul %q, nomad %q", c.ConsulToken, c.NomadToken)
	}
	anonNomad, err := nomadapi.NewClient(&nomadapi.Config{Address: c.NomadAddr})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := anonNomad.Jobs().List(nil); err == nil || !strings.Contains(err.Error(), "403") {
		t.Fatalf("Nomad answered a job list without a token: %v", err)
	}
	anonConsul, err := consulapi.NewClient(&consulapi.Config{Address: strings.TrimPrefix(c.ConsulAddr, "http://")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := anonConsul.KV().Put(&consulapi.KVPair{Key: "gpushare-test/anon", Value: []byte("x")}, nil); err == nil {
		t.Fatal("Consul took a KV write without a token")
	}
	testcluster.Eventually(t, 60*time.Second, func() error {
		_, _, err := c.Consul.Session().Create(&consulapi.SessionEntry{Name: "probe", TTL: "10s"}, nil)
		return err
	})

	job := nomadapi.NewServiceJob("web", "web", "global", 50)
	job.Datacenters = []string{"dc1"}
	task := nomadapi.NewTask("sleep", "raw_exec").
		SetConfig("command", "/bin/sleep").SetConfig("args", []string{"600"})
	task.Resources = &nomadapi.Resources{CPU: ptr(20), MemoryMB: ptr(16)}
	group := nomadapi.NewTaskGroup("web", 1).AddTask(task)
	group.Services = []*nomadapi.Service{{Name: "acl-probe", Provider: "consul"}}
	job.AddTaskGroup(group)
	if _, _, err := c.Nomad.Jobs().Register(job, nil); err != nil {
		t.Fatalf("registering a job with the management token: %v", err)
	}
	testcluster.Eventually(t, 60*time.Second, func() error {
		entries, _, err := c.Consul.Catalog().Service("acl-probe", "", nil)
		if err != nil {
			return err
		}
		if len(entries) != 1 {
			return fmt.Errorf("%d instances of acl-probe in Consul's catalog, want 1", len(entries))
		}
		return nil
	})
}
