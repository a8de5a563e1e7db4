package service_test

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gpushare/nomad-gpushare/internal/testcluster"
	"github.com/gpushare/nomad-gpushare/quota-service/httpapi"
	"github.com/gpushare/nomad-gpushare/quota-service/service"
	nomadapi "github.com/hashicorp/nomad/api"
)

// usageNode is a node of its own for the utilization test.
type usageNode struct{ *testcluster.SimNode }

// run registers a service job in ns whose task runs gpushare-simload on
// the given device with the given memory and SM use.
func (n *usageNode) run(t *testing.T, ns, name, device string, count uint64, mib, sm int) {
	t.Helper()
	job := nomadapi.NewServiceJob(name, name, "global", 50)
	job.Namespace, job.Datacenters = &ns, []string{"dc1"}
	task := nomadapi.NewTask("main", "raw_exec").SetConfig("command", n.Simload).
		SetConfig("args", []string{"-state-dir", n.StateDir, "-mib", fmt.Sprint(mib), "-sm", fmt.Sprint(sm)})
	task.Resources = &nomadapi.Resources{CPU: ptr(20), MemoryMB: ptr(16), Devices: []*nomadapi.RequestedDevice{{Name: device, Count: &count}}}
	task.KillTimeout = ptr(time.Second)
	job.AddTaskGroup(nomadapi.NewTaskGroup("main", 1).AddTask(task))
	if _, _, err := n.Nomad.Jobs().Register(job, &nomadapi.WriteOptions{Namespace: ns}); err != nil {
		t.Fatalf("registering %s/%s: %v", ns, name, err)
	}
}

// TestUtilizationOnRealNomad: the quota service reads what the device
// plugin reports of each task's GPU use and shows, per project, what is
// guaranteed, allocated and used (memory and compute), and the idle part
// of the allocation, in /v1/utilization, the dashboard and the metrics.
func TestUtilizationOnRealNomad(t *testing.T) {
	n := usageNode{testcluster.StartSimNode(t, 2)}
	s := newScenario(t, n.Cluster, "gpushare-utilization-test")
	s.namespace("team-a")
	s.namespace("team-b")
	s.quota("team-a", `{"guaranteed": 1}`)
	s.quota("team-b", `{"guaranteed": 1}`)
	// team-a: a quarter GPU, idle (10% of its memory, 10% SM); team-b: a
	// whole GPU using half its memory and 90% of its compute.
	n.run(t, "team-a", "notebook", "nvidia/gpu-share", 25, 8192, 10)
	n.run(t, "team-b", "train", "nvidia/gpu", 1, 40960, 90)
	svc, _ := s.startInstance("usage", func(cfg *service.Config) {
		cfg.Usage = service.UsageConfig{Port: n.UsagePort, Period: time.Second}
	}, nil)
	api := httptest.NewServer(httpapi.Handler(svc, svc.Registry()))
	defer api.Close()

	want := map[string]service.ProjectUtilization{}
	want["team-a"] = projectUsage("1", 0.25, 0.1, 0.1, 0.15)
	want["team-b"] = projectUsage("1", 1, 0.5, 0.9, 0.1)
	testcluster.Eventually(t, 3*time.Minute, func() error {
		var u service.Utilization
		if err := getJSON(api.URL+"/v1/utilization", &u); err != nil {
			return err
		}
		got := map[string]service.ProjectUtilization{}
		for _, p := range u.Projects {
			got[p.Project] = p
		}
		for name, w := range want {
			g := got[name]
			if !strings.HasPrefix(g.Guaranteed, w.Guaranteed) || !near(g.Allocated, w.Allocated) || !near(g.UsedMemory, w.UsedMemory) ||
				!near(g.UsedCompute, w.UsedCompute) || !near(g.Idle, w.Idle) {
				return fmt.Errorf("%s: %+v, want %+v (nodes %d, failed %v)", name, g, w, u.Nodes, u.Failed)
			}
		}
		return nil
	})
	for name, w := range want {
		for metricName, v := range map[string]float64{"gpushare_project_used_memory_gpus": w.UsedMemory, "gpushare_project_used_compute_gpus": w.UsedCompute,
			"gpushare_project_idle_gpus": w.Idle, "gpushare_project_reported_allocated_gpus": w.Allocated} {
			if got := metric(t, svc.Registry(), metricName, map[string]string{"project": name}); !near(got, v) {
				t.Errorf("%s{project=%q} = %v, want %v", metricName, name, got, v)
			}
		}
	}
}

func projectUsage(guaranteed string, allocated, mem, sm, idle float64) service.ProjectUtilization {
	var p service.ProjectUtilization
	p.Guaranteed, p.Allocated, p.UsedMemory, p.UsedCompute, p.Idle = guaranteed, allocated, mem, sm, idle
	return p
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-6 }

func getJSON(url string, v any) error {
	resp, err := http.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("%s: %s: %s", url, resp.Status, b)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}
