package device_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpushare/nomad-gpushare/internal/localcluster"
	"github.com/gpushare/nomad-gpushare/internal/testcluster"
	"github.com/gpushare/nomad-gpushare/vocab/nodedemand"
	nomadapi "github.com/hashicorp/nomad/api"
)

// forger writes the published demand as someone with write on the
// variables could (docs/design.md, Partition protocol, rule 11): a
// heartbeat of its own, beating every second, and the node's value.
type forger struct {
	c *localcluster.Cluster
}

// beat rewrites the heartbeat every second until ctx ends.
func (f *forger) beat(ctx context.Context, t testing.TB) {
	for seq := uint64(1); ctx.Err() == nil; seq++ {
		l := nodedemand.Leader{Epoch: "forged", Instance: "mallory", Beat: time.Second, Seq: seq}
		f.put(t, nodedemand.LeaderPath(nodedemand.DefaultPrefix), l.Items())
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

// demand publishes items as the node's value.
func (f *forger) demand(t testing.TB, items map[string]string) {
	f.put(t, nodedemand.NodePath(nodedemand.DefaultPrefix, f.c.NodeID), items)
}

func (f *forger) put(t testing.TB, path string, items map[string]string) {
	v := &nomadapi.Variable{Namespace: nodedemand.DefaultNamespace, Path: path, Items: items}
	if _, _, err := f.c.Nomad.Variables().Update(v, nil); err != nil {
		t.Errorf("writing %s: %v", path, err)
	}
}

// tenantGPU is the UUID of the GPU the share allocation a holds.
func tenantGPU(a *nomadapi.Allocation) (string, error) {
	if a.AllocatedResources != nil {
		for _, task := range a.AllocatedResources.Tasks {
			for _, d := range task.Devices {
				if d.Type == "gpu-share" && len(d.DeviceIDs) > 0 {
					id := d.DeviceIDs[0]
					return id[:strings.LastIndex(id, "-s")], nil
				}
			}
		}
	}
	return "", fmt.Errorf("allocation %s holds no share", a.ID)
}

// wholeHealthy says whether the node publishes GPU uuid in the whole
// family.
func wholeHealthy(c *localcluster.Cluster, uuid string) (bool, error) {
	node, _, err := c.Nomad.Nodes().Info(c.NodeID, nil)
	if err != nil {
		return false, err
	}
	for _, g := range node.NodeResources.Devices {
		if g.Vendor != "nvidia" || g.Type != "gpu" {
			continue
		}
		for _, in := range g.Instances {
			if in.ID == uuid && in.Healthy {
				return true, nil
			}
		}
	}
	return false, nil
}

// TestHostilePublishedDemand: the published demand picks a family, never
// safety. A forger with write on the demand variables beats a heartbeat
// of its own and publishes demand for the node while a share tenant runs:
// three half-GPU requests, which the plugin takes (one idle GPU opens for
// shares: two share groups), then four whole GPUs, which the plugin
// serves where it may (the opened GPU goes whole again) but never by
// switching the tenant's GPU, which stays out of the whole family while
// the tenant keeps running. A value that does not decode makes the plugin
// read Nomad itself again.
func TestHostilePublishedDemand(t *testing.T) {
	c, _ := startDemandCluster(t)
	gpuJob(t, c, "tenant", "gpu-share", 10)
	_, alloc := runningEnv(t, c, "tenant")
	uuid, err := tenantGPU(alloc)
	if err != nil {
		t.Fatal(err)
	}

	f := &forger{c: c}
	ctx, cancel := context.WithCancel(context.Background())
	var beating sync.WaitGroup
	beating.Go(func() { f.beat(ctx, t) })
	defer func() { cancel(); beating.Wait() }()
	// The tenant's GPU is never whole while the tenant runs, whatever
	// the demand says: checked at every poll of every phase.
	safe := func() error {
		whole, err := wholeHealthy(c, uuid)
		if err != nil {
			return err
		}
		if whole {
			t.Fatalf("the tenant's GPU %s is published whole while its share tenant runs", uuid)
		}
		return nil
	}
	layoutIs := func(wantWhole, wantShare int) func() error {
		return func() error {
			if err := safe(); err != nil {
				return err
			}
			w, s, err := layout(c)
			if err != nil {
				return err
			}
			if w != wantWhole || len(s) != wantShare {
				return fmt.Errorf("%d whole GPUs and %d share groups allocatable, want %d and %d", w, len(s), wantWhole, wantShare)
			}
			return nil
		}
	}

	half := nodedemand.Request{Shares: 50}
	f.demand(t, nodedemand.Node{Epoch: "forged", Requests: []nodedemand.Request{half, half, half}}.Items())
	testcluster.Eventually(t, liveWindow, layoutIs(2, 2))

	f.demand(t, nodedemand.Node{Epoch: "forged", Requests: []nodedemand.Request{{Whole: 4}}}.Items())
	testcluster.Eventually(t, liveWindow, layoutIs(3, 1))
	if _, a := runningEnv(t, c, "tenant"); a.ID != alloc.ID {
		t.Errorf("the tenant runs as allocation %s, want %s: it was stopped", a.ID, alloc.ID)
	}

	const fallback = "published demand is not fresh: listing blocked evaluations"
	fellBack := pluginLogs(c, fallback)
	f.demand(t, map[string]string{"epoch": "forged", "demand": `[{"whole": 1000000}]`})
	testcluster.Eventually(t, liveWindow, func() error {
		if err := safe(); err != nil {
			return err
		}
		if pluginLogs(c, fallback) == fellBack {
			return errors.New("the plugin still takes a demand that does not decode")
		}
		return nil
	})
}
