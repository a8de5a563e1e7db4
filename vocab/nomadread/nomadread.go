// Package nomadread reads the gpushare vocabulary (package vocab) out of
// Nomad's API objects: which gpushare devices an allocation holds, how many
// units a node's share instances stand for, a task's device requests and
// its limit meta key. The device plugin and the quota service read Nomad
// alike through it.
package nomadread

import (
	"slices"
	"unique"

	"github.com/hashicorp/nomad/api"

	"github.com/gpushare/nomad-gpushare/vocab"
)

// ShareUnit is how many units one share instance of a node's device groups
// stands for: vocab.UnitsPerGPU over the vocab.SharesAttr of its share
// groups, 1 when none says (a plugin before shares_per_gpu, or no share
// group).
func ShareUnit(devs []*api.NodeDeviceResource) int {
	for _, g := range devs {
		if g == nil || g.Vendor != vocab.Vendor || g.Type != vocab.TypeShare {
			continue
		}
		if a := g.Attributes[vocab.SharesAttr]; a != nil && a.IntVal != nil && vocab.ValidSharesPerGPU(int(*a.IntVal)) {
			return vocab.UnitsPerGPU / int(*a.IntVal)
		}
	}
	return 1
}

// HeldDevices reads which GPUs an allocation's tasks were given: whole GPUs
// and shares (Instances). The UUIDs are interned: a cluster's allocations
// name its GPUs many times over.
func HeldDevices(r *api.AllocatedResources) vocab.Held {
	var h vocab.Held
	if r == nil {
		return h
	}
	for _, tr := range r.Tasks {
		if tr == nil {
			continue
		}
		Instances(tr.Devices, func(id vocab.ID, _ string) {
			uuid := unique.Make(id.UUID).Value()
			switch {
			case id.IsShare:
				h.AddShares(uuid, id.Units)
			case !slices.Contains(h.Whole, uuid):
				h.Whole = append(h.Whole, uuid)
			}
		})
	}
	slices.Sort(h.Whole)
	return h
}

// Instances calls f with every gpushare instance of a task's devices, parsed
// and as Nomad names it: whole GPUs from instances of
// vocab.Vendor/vocab.TypeWhole, shares from instances of
// vocab.Vendor/vocab.TypeShare. Instance IDs that do not parse, or that do
// not belong to the family they were given in, are left out.
func Instances(devs []*api.AllocatedDeviceResource, f func(id vocab.ID, raw string)) {
	for _, d := range devs {
		if d == nil || d.Vendor != vocab.Vendor {
			continue
		}
		for _, raw := range d.DeviceIDs {
			id, err := vocab.Parse(raw)
			if err == nil && (d.Type == vocab.TypeWhole && !id.IsShare || d.Type == vocab.TypeShare && id.IsShare) {
				f(id, raw)
			}
		}
	}
}

// ParseRequest reads a task's device request. A nil count is Nomad's
// default, 1 (api.RequestedDevice.Canonicalize).
func ParseRequest(d *api.RequestedDevice) vocab.Request {
	r := vocab.ParseRequestName(d.Name)
	r.Count = 1
	if d.Count != nil {
		r.Count = int(*d.Count)
	}
	return r
}

// TaskLimit returns the vocab.LimitMetaKey value that applies to a task of
// a job (task meta, else group meta, else job meta) and where it was found
// ("task", "group" or "job"); ok is false when none is set.
func TaskLimit(job *api.Job, group, task string) (value, where string, ok bool) {
	if job == nil {
		return "", "", false
	}
	for _, tg := range job.TaskGroups {
		if tg == nil || tg.Name == nil || *tg.Name != group {
			continue
		}
		for _, t := range tg.Tasks {
			if t != nil && t.Name == task {
				if v, ok := t.Meta[vocab.LimitMetaKey]; ok {
					return v, "task", true
				}
			}
		}
		if v, ok := tg.Meta[vocab.LimitMetaKey]; ok {
			return v, "group", true
		}
	}
	if v, ok := job.Meta[vocab.LimitMetaKey]; ok {
		return v, "job", true
	}
	return "", "", false
}
