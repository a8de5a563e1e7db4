package alloctrack

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/gpushare/nomad-gpushare/vocab"
	"github.com/gpushare/nomad-gpushare/vocab/nomadread"
	"github.com/hashicorp/nomad/api"
)

// Tenant is one task of a live allocation of this node that holds gpushare
// devices: what the plugin needs to know to account for its GPU use, to
// bind it, and to move it.
type Tenant struct {
	AllocID, Namespace, Job, Group, Task string
	// Stopping: the allocation's desired status is no longer "run".
	Stopping    bool
	Created     time.Time
	CreateIndex uint64
	// Whole are the GPUs it holds whole; ShareGPU and ShareIDs the share
	// instances it holds (of one GPU: Reserve refuses anything else).
	Whole    []string
	ShareGPU string
	ShareIDs []string
	// Limit is its vocab.LimitMetaKey value ("" when unset) and LimitFrom
	// where it was found ("task", "group" or "job").
	Limit, LimitFrom string
}

// Key names the tenant: allocation ID and task.
func (t Tenant) Key() string { return t.AllocID + "/" + t.Task }

// Shares is the number of units (hundredths of a GPU) its share instances
// stand for: one per instance unless the IDs say more.
func (t Tenant) Shares() int {
	n := 0
	for _, raw := range t.ShareIDs {
		if id, err := vocab.Parse(raw); err == nil && id.IsShare {
			n += id.Units
		}
	}
	return n
}

// tenantsOf lists the tenants of the live allocations, by allocation
// creation then key.
func tenantsOf(allocs []*api.Allocation) []Tenant {
	var out []Tenant
	for _, a := range allocs {
		if a == nil || !live(a) || a.AllocatedResources == nil {
			continue
		}
		for task, tr := range a.AllocatedResources.Tasks {
			if tr == nil {
				continue
			}
			t := Tenant{AllocID: a.ID, Namespace: a.Namespace, Job: a.JobID, Group: a.TaskGroup, Task: task,
				Stopping: a.DesiredStatus != "" && a.DesiredStatus != api.AllocDesiredStatusRun,
				Created:  time.Unix(0, a.CreateTime), CreateIndex: a.CreateIndex}
			addDevices(&t, tr.Devices)
			if len(t.Whole) == 0 && len(t.ShareIDs) == 0 {
				continue
			}
			t.Limit, t.LimitFrom, _ = nomadread.TaskLimit(a.Job, a.TaskGroup, task)
			out = append(out, t)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].CreateIndex != out[j].CreateIndex {
			return out[i].CreateIndex < out[j].CreateIndex
		}
		return out[i].Key() < out[j].Key()
	})
	return out
}

// addDevices records the gpushare instances of a task.
func addDevices(t *Tenant, devs []*api.AllocatedDeviceResource) {
	nomadread.Instances(devs, func(id vocab.ID, raw string) {
		if !id.IsShare {
			t.Whole = append(t.Whole, id.UUID)
			return
		}
		if t.ShareGPU == "" {
			t.ShareGPU = id.UUID
		}
		t.ShareIDs = append(t.ShareIDs, raw)
	})
	sort.Strings(t.Whole)
	sort.Strings(t.ShareIDs)
}

// ReadTenants reads the tenants of a node's live allocations now, from the
// servers' current state (not a stale follower: Reserve asks for an
// allocation the client has just received). It is safe to call
// concurrently with Read.
func (t *Tracker) ReadTenants(ctx context.Context, nodeID string) ([]Tenant, error) {
	q, cancel := t.q(ctx)
	defer cancel()
	q.AllowStale = false
	allocs, _, err := t.client.Nodes().Allocations(nodeID, q)
	if err != nil {
		return nil, fmt.Errorf("list allocations of node %s at %s: %w", nodeID, t.client.Address(), err)
	}
	return tenantsOf(allocs), nil
}

// StopAllocation asks Nomad to stop an allocation; Nomad places a
// replacement (POST /v1/allocation/:id/stop). It needs the alloc-lifecycle
// capability in the allocation's namespace.
func (t *Tracker) StopAllocation(ctx context.Context, namespace, allocID string) error {
	q, cancel := t.q(ctx)
	defer cancel()
	q.Namespace = namespace
	if _, err := t.client.Allocations().Stop(&api.Allocation{ID: allocID, Namespace: namespace}, q); err != nil {
		return fmt.Errorf("stop allocation %s (namespace %s) at %s: %w", allocID, namespace, t.client.Address(), err)
	}
	return nil
}
