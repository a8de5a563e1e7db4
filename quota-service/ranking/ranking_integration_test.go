package ranking_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gpushare/nomad-gpushare/internal/localcluster"
	"github.com/gpushare/nomad-gpushare/internal/testcluster"
	"github.com/gpushare/nomad-gpushare/quota-service/nomadwatch"
	"github.com/gpushare/nomad-gpushare/quota-service/quota"
	"github.com/gpushare/nomad-gpushare/quota-service/ranking"
	"github.com/gpushare/nomad-gpushare/quota-service/state"
	"github.com/gpushare/nomad-gpushare/scheduler/cluster"
	"github.com/gpushare/nomad-gpushare/vocab"
	"github.com/hashicorp/go-hclog"
	nomadapi "github.com/hashicorp/nomad/api"
)

// step is one job of the sequence: a share or whole-GPU batch job, pinned
// by its user to a node or left to Nomad.
type step struct {
	name   string
	device string
	count  uint64
	cpu    int
	mem    int
	// pin is the index of the node the job is constrained to; -1 none.
	pin int
}

// sequence: a half-GPU share pinned to node 0, a whole-GPU job with a
// large CPU and memory ask pinned to node 1, then a half share and a
// whole-GPU job that Nomad places. Without ranks, Nomad's bin-packing
// puts the second share next to the large job, on a fresh GPU of node 1:
// two GPUs end half used. With ranks, node 0 publishes that a half share
// fragments nothing there (its open GPU has room) and node 1 that it
// would, and the share's affinity sends it to node 0.
var sequence = []step{
	{name: "share-1", device: "nvidia/gpu-share", count: 50, cpu: 100, mem: 64, pin: 0},
	{name: "train-1", device: "nvidia/gpu", count: 1, cpu: 1000, mem: 1024, pin: 1},
	{name: "share-2", device: "nvidia/gpu-share", count: 50, cpu: 100, mem: 64, pin: -1},
	{name: "train-2", device: "nvidia/gpu", count: 1, cpu: 1000, mem: 1024, pin: -1},
}

// outcome is the end state's GPUs: partly used (some shares taken, not
// all: a whole-GPU job cannot use what is left) and idle.
type outcome struct{ partial, idle int }

// TestRankingAvoidsFragmentedGPUs runs the sequence twice on a real
// two-client Nomad cluster with the device plugin on two simulated GPUs
// per client: without the mechanism (jobs without affinity, nothing
// published) and with it (the publisher writes ranks after each
// placement, and jobs carry their class's affinity). The ranked run ends
// with fewer partly used GPUs and more idle ones.
func TestRankingAvoidsFragmentedGPUs(t *testing.T) {
	off := runSequence(t, false)
	on := runSequence(t, true)

	t.Logf("without ranks: %d GPUs partly used, %d idle; with ranks: %d partly used, %d idle", off.partial, off.idle, on.partial, on.idle)
	if on.partial >= off.partial {
		t.Errorf("with ranks %d GPUs end partly used, without %d: want fewer with ranks", on.partial, off.partial)
	}
	if on.idle <= off.idle {
		t.Errorf("with ranks %d GPUs end idle, without %d: want more with ranks", on.idle, off.idle)
	}
}

// runSequence starts a cluster, submits the sequence one job at a time,
// each once the previous one runs (and, ranked, once the ranks it left
// are on the servers), and returns the end state.
func runSequence(t *testing.T, ranked bool) outcome {
	t.Helper()
	c := testcluster.StartSimNodes(t, 2, 2)
	if ranked {
		examplesCarryTheirClass(t, c)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	builder := nomadwatch.NewBuilder(c.Nomad, hclog.NewNullLogger(), nomadwatch.Options{})
	pub := ranking.NewPublisher(c.Nomad, nil)
	pub.MinInterval, pub.ComputeEvery = 0, 0
	view := func() (*nomadwatch.View, error) { return builder.Build(ctx, quota.Set{}, state.Records{}) }
	for _, s := range sequence {
		// Each plugin publishes a GPU in share mode (its open share
		// GPU or its idle landing place) before the next job comes.
		testcluster.Eventually(t, 60*time.Second, func() error { return offerShares(c) })
		job := s.job(c.NodeIDs)
		if ranked {
			aff, err := ranking.Affinity(job.TaskGroups[0])
			if err != nil {
				t.Fatal(err)
			}
			job.TaskGroups[0].Affinities = append(job.TaskGroups[0].Affinities, aff)
		}
		if _, _, err := c.Nomad.Jobs().Register(job, nil); err != nil {
			t.Fatalf("registering %s: %v", s.name, err)
		}
		testcluster.Eventually(t, 90*time.Second, func() error { return running(c, s.name) })
		if ranked {
			testcluster.Eventually(t, 60*time.Second, func() error { return published(ctx, c, pub, view) })
			known := pub.Known()
			for i, id := range c.NodeIDs {
				t.Logf("after %s: node %d publishes %v", s.name, i, known[id])
			}
		}
	}
	v, err := view()
	if err != nil {
		t.Fatal(err)
	}
	out, err := gpus(v.Snapshot)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("ranked=%t: %d GPUs partly used, %d idle", ranked, out.partial, out.idle)
	return out
}

// examplesCarryTheirClass checks that every GPU group of the example
// jobspecs, as Nomad parses them, carries the ranking affinity of its own
// class.
func examplesCarryTheirClass(t *testing.T, c *localcluster.Cluster) {
	t.Helper()
	files, err := filepath.Glob("../../jobspecs/examples/*.nomad.hcl")
	if err != nil || len(files) == 0 {
		t.Fatalf("no example jobspecs (%v)", err)
	}
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		job, err := c.Nomad.Jobs().ParseHCL(string(src), true)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		for _, tg := range job.TaskGroups {
			want, err := ranking.Affinity(tg)
			if err != nil {
				t.Fatalf("%s group %s: no class (%v)", f, *tg.Name, err)
			}
			found := false
			for _, a := range tg.Affinities {
				equals := a.Operand == "" || a.Operand == "=" || a.Operand == "=="
				found = found || a.LTarget == want.LTarget && a.RTarget == want.RTarget && equals
			}
			if !found {
				t.Errorf("%s group %s: no affinity %s = %s (its class)", f, *tg.Name, want.LTarget, want.RTarget)
			}
		}
	}
}

// job is the step's batch job; pins name node IDs by index.
func (s step) job(pins []string) *nomadapi.Job {
	job := nomadapi.NewBatchJob(s.name, s.name, "global", 50)
	job.Datacenters = []string{"dc1"}
	cpu, mem, count := s.cpu, s.mem, s.count
	task := nomadapi.NewTask("run", "raw_exec").SetConfig("command", "/bin/sleep").SetConfig("args", []string{"3600"})
	task.Resources = &nomadapi.Resources{CPU: &cpu, MemoryMB: &mem,
		Devices: []*nomadapi.RequestedDevice{{Name: s.device, Count: &count}}}
	group := nomadapi.NewTaskGroup("run", 1).AddTask(task)
	if s.pin >= 0 {
		group.Constrain(nomadapi.NewConstraint("${node.unique.id}", "=", pins[s.pin]))
	}
	job.AddTaskGroup(group)
	return job
}

// running is nil once the job's one allocation runs.
func running(c *localcluster.Cluster, job string) error {
	allocs, _, err := c.Nomad.Jobs().Allocations(job, false, nil)
	if err != nil {
		return err
	}
	for _, a := range allocs {
		if a.ClientStatus == "running" {
			return nil
		}
	}
	return fmt.Errorf("job %s: no allocation running yet (%d allocations)", job, len(allocs))
}

// offerShares is nil once every node publishes a GPU in share mode.
func offerShares(c *localcluster.Cluster) error {
	for _, id := range c.NodeIDs {
		node, _, err := c.Nomad.Nodes().Info(id, nil)
		if err != nil {
			return err
		}
		if !sharesOffered(node) {
			return fmt.Errorf("node %s publishes no GPU in share mode yet", id)
		}
	}
	return nil
}

// sharesOffered reports whether node has a healthy share instance.
func sharesOffered(node *nomadapi.Node) bool {
	if node.NodeResources == nil {
		return false
	}
	for _, g := range node.NodeResources.Devices {
		if g.Vendor != vocab.Vendor || g.Type != vocab.TypeShare {
			continue
		}
		for _, inst := range g.Instances {
			if inst.Healthy {
				return true
			}
		}
	}
	return false
}

// published publishes the ranks of the cluster as it is and is nil once
// the servers show every node's ranks as written, so that the next job is
// placed on them.
func published(ctx context.Context, c *localcluster.Cluster, pub *ranking.Publisher, view func() (*nomadwatch.View, error)) error {
	v, err := view()
	if err != nil {
		return err
	}
	rep, err := pub.Publish(ctx, v.Snapshot, v.Specs)
	if err != nil {
		return err
	}
	if len(rep.Errors) > 0 {
		return fmt.Errorf("publishing: %v", rep.Errors)
	}
	for id, want := range pub.Known() {
		node, _, err := c.Nomad.Nodes().Info(id, nil)
		if err != nil {
			return err
		}
		for k, v := range want {
			if node.Meta[k] != v {
				return fmt.Errorf("node %s: servers show %s=%q, published %q", id, k, node.Meta[k], v)
			}
		}
	}
	return nil
}

// gpus counts the snapshot's partly used and idle GPUs.
func gpus(snap *cluster.Snapshot) (outcome, error) {
	x, err := snap.Index()
	if err != nil {
		return outcome{}, err
	}
	var out outcome
	for n := range snap.Nodes {
		for g := range snap.Nodes[n].GPUs {
			switch free := x.Free(n, g); {
			case free == cluster.SharesPerGPU:
				out.idle++
			case free > 0:
				out.partial++
			}
		}
	}
	return out, nil
}
