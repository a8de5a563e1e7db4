package nomadwatch

import (
	"fmt"
	"sort"
	"strings"
	"sync"
	"unique"

	"github.com/gpushare/nomad-gpushare/vocab"
	nomadapi "github.com/hashicorp/nomad/api"
)

// nodeDevices is what Assemble reads of one node's device inventory, read
// once per node modify index: the plugin publishes shares_per_gpu
// instances of every GPU (808 on an 8-GPU node at the default), and the
// cache keeps this instead of the instance list.
type nodeDevices struct {
	// gpus are the node's GPUs and MIG devices, sorted by UUID.
	gpus []nodeGPU
	// groups are the node's device groups, every vendor's, for
	// constraints.
	groups []deviceGroup
	// warnings are what did not read (instance IDs, MIG groups).
	warnings []string
}

// nodeGPU is one GPU (or MIG device) a node publishes, in either family.
type nodeGPU struct {
	uuid   string
	health gpuHealth
}

// deviceGroup is one device group without its instance list: the group's
// name, vendor, type and attributes, how many instances it has, and their
// IDs in a short form (for ${device.ids}).
type deviceGroup struct {
	res       *nomadapi.NodeDeviceResource
	instances int
	ids       []idRun
}

// idRun is a run of instance IDs: id, then, for a share, the next n-1
// shares of the same GPU in order (vocab.ID.Share counting up); a share
// group's instances are one run per GPU.
type idRun struct {
	id vocab.ID
	n  int
}

// readDevices reads a node's device inventory. Instance IDs that do not
// parse are left out with a warning.
func readDevices(devs []*nomadapi.NodeDeviceResource) *nodeDevices {
	d := &nodeDevices{}
	gpus := map[string]*gpuHealth{}
	for _, g := range devs {
		if g == nil {
			continue
		}
		d.groups = append(d.groups, newDeviceGroup(g))
		if g.Vendor != vocab.Vendor || (g.Type != vocab.TypeWhole && g.Type != vocab.TypeShare) {
			continue
		}
		d.addGroupGPUs(g, gpus)
	}
	for u, h := range gpus {
		d.gpus = append(d.gpus, nodeGPU{uuid: u, health: *h})
	}
	sort.Slice(d.gpus, func(i, j int) bool { return d.gpus[i].uuid < d.gpus[j].uuid })
	return d
}

// addGroupGPUs adds the GPUs that the instances of one gpushare group
// name: each GPU's model (the whole-GPU family's name wins), health and,
// for a MIG device, the part of its GPU it is.
func (d *nodeDevices) addGroupGPUs(g *nomadapi.NodeDeviceResource, gpus map[string]*gpuHealth) {
	mig, migWarning := migShares(g)
	if migWarning != "" {
		d.warnings = append(d.warnings, migWarning)
	}
	for _, inst := range g.Instances {
		id, err := vocab.Parse(inst.ID)
		if err != nil {
			d.warnings = append(d.warnings, err.Error())
			continue
		}
		h := gpus[id.UUID]
		if h == nil {
			h = &gpuHealth{}
			gpus[id.UUID] = h
		}
		if h.model == "" || g.Type == vocab.TypeWhole {
			h.model = g.Name
		}
		if g.Type == vocab.TypeWhole {
			h.mig = mig
		}
		h.add(inst)
	}
}

// newDeviceGroup is group g without its instance list, its attributes
// shared with other groups' (sharedAttributes).
func newDeviceGroup(g *nomadapi.NodeDeviceResource) deviceGroup {
	res := *g
	res.Instances = nil
	res.Attributes = sharedAttributes(g.Attributes)
	out := deviceGroup{res: &res, instances: len(g.Instances)}
	for _, inst := range g.Instances {
		id, err := vocab.Parse(inst.ID)
		if err != nil {
			id = vocab.ID{UUID: inst.ID} // kept as it is
		}
		if k := len(out.ids) - 1; k >= 0 && continues(out.ids[k], id) {
			out.ids[k].n++
			continue
		}
		out.ids = append(out.ids, idRun{id: id, n: 1})
	}
	return out
}

// continues reports whether id is the share that follows run r.
func continues(r idRun, id vocab.ID) bool {
	return r.id.IsShare && id.IsShare && id.UUID == r.id.UUID && id.Units == r.id.Units && id.Share == r.id.Share+r.n
}

// joinedIDs is the group's instance IDs joined by commas, as Nomad
// resolves ${device.ids}.
func (g deviceGroup) joinedIDs() string {
	var b strings.Builder
	for _, r := range g.ids {
		for k := range r.n {
			if b.Len() > 0 {
				b.WriteByte(',')
			}
			id := r.id
			id.Share += k
			b.WriteString(id.String())
		}
	}
	return b.String()
}

// compactNode is node n as the cache keeps it: the fields the service
// reads (its identity, status, attributes and meta, CPU, memory and device
// groups without their instance lists), with the attribute and meta
// strings shared between nodes, and what Assemble reads of its devices.
func compactNode(n *nomadapi.Node) (*nomadapi.Node, *nodeDevices) {
	out := &nomadapi.Node{ID: n.ID, Datacenter: n.Datacenter, Name: n.Name, NodeClass: n.NodeClass, NodePool: n.NodePool,
		Drain: n.Drain, SchedulingEligibility: n.SchedulingEligibility, Status: n.Status, StatusDescription: n.StatusDescription,
		Attributes: shared(n.Attributes), Meta: shared(n.Meta), ReservedResources: n.ReservedResources, LastDrain: n.LastDrain,
		CreateIndex: n.CreateIndex, ModifyIndex: n.ModifyIndex}
	if n.NodeResources == nil {
		return out, readDevices(nil)
	}
	d := readDevices(n.NodeResources.Devices)
	out.NodeResources = &nomadapi.NodeResources{Cpu: n.NodeResources.Cpu, Memory: n.NodeResources.Memory,
		Devices: make([]*nomadapi.NodeDeviceResource, len(d.groups))}
	for i, g := range d.groups {
		out.NodeResources.Devices[i] = g.res
	}
	return out, d
}

// attrValue is a device attribute's value as a comparable key.
type attrValue struct {
	set  uint8 // which of the pointers were set, a bit each
	f    float64
	i    int64
	s    string
	b    bool
	unit string
}

// attrTable holds one *nomadapi.Attribute per distinct value:
// every GPU group of a node carries about twenty attributes, mostly the
// same on every GPU of a model. It is emptied when it grows past
// attrTableMax (entries already shared stay valid).
var attrTable = struct {
	sync.Mutex
	m map[attrValue]*nomadapi.Attribute
}{m: map[attrValue]*nomadapi.Attribute{}}

const attrTableMax = 1 << 16

// sharedAttributes is m with equal attributes shared between groups.
func sharedAttributes(m map[string]*nomadapi.Attribute) map[string]*nomadapi.Attribute {
	if m == nil {
		return nil
	}
	out := make(map[string]*nomadapi.Attribute, len(m))
	attrTable.Lock()
	defer attrTable.Unlock()
	if len(attrTable.m) > attrTableMax {
		clear(attrTable.m)
	}
	for k, a := range m {
		if a == nil {
			out[k] = nil
			continue
		}
		key := keyOf(a)
		c, ok := attrTable.m[key]
		if !ok {
			c = a
			attrTable.m[key] = c
		}
		out[unique.Make(k).Value()] = c
	}
	return out
}

// keyOf is attribute a's value as a key.
func keyOf(a *nomadapi.Attribute) attrValue {
	k := attrValue{unit: a.Unit}
	if a.FloatVal != nil {
		k.set, k.f = k.set|1, *a.FloatVal
	}
	if a.IntVal != nil {
		k.set, k.i = k.set|2, *a.IntVal
	}
	if a.StringVal != nil {
		k.set, k.s = k.set|4, *a.StringVal
	}
	if a.BoolVal != nil {
		k.set, k.b = k.set|8, *a.BoolVal
	}
	return k
}

// shared is m with its keys and values interned: thousands of nodes
// carry the same attribute names and mostly the same values.
func shared(m map[string]string) map[string]string {
	if m == nil {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[unique.Make(k).Value()] = unique.Make(v).Value()
	}
	return out
}

// fingerprint is what the resync compares of a node's devices: every
// GPU's UUID, model and health.
func (d *nodeDevices) fingerprint() string {
	var b strings.Builder
	for _, g := range d.gpus {
		fmt.Fprintf(&b, "|%s:%s:%d:%t:%s", g.uuid, g.health.model, g.health.mig, g.health.healthy, g.health.reason)
	}
	for _, g := range d.groups {
		fmt.Fprintf(&b, "|%s/%s/%s:%d", g.res.Vendor, g.res.Type, g.res.Name, g.instances)
	}
	return b.String()
}
