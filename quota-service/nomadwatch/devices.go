package nomadwatch

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"unique"

	"github.com/gpushare/nomad-gpushare/internal/feasible"
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
// name, vendor, type and attributes (res's map, shared, without the
// per-GPU ones, which own holds), how many instances it has, and their
// IDs in a short form (for ${device.ids}).
type deviceGroup struct {
	res       *nomadapi.NodeDeviceResource
	own       []feasible.NamedAttribute
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
	var own []feasible.NamedAttribute
	res.Attributes, own = splitAttributes(g.Attributes)
	out := deviceGroup{res: &res, own: own, instances: len(g.Instances)}
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

// perGPUAttributes are the device attributes whose values tell apart
// the GPUs of one model on one node: the plugin's share groups, one per
// GPU, carry them. A group keeps them apart (deviceGroup.own), so that
// its attribute map, the same for every GPU of a model on every node
// alike, is held once (sharedAttributes).
var perGPUAttributes = []string{"index", "pci_bus_id", "uuid"}

// attrMaps holds one attribute map per distinct content (without the
// per-GPU attributes), by attrMapKey. It is emptied when it grows past
// attrMapsMax (maps already shared stay valid). The maps are never
// written once shared.
var attrMaps = struct {
	sync.Mutex
	m map[string]map[string]*nomadapi.Attribute
}{m: map[string]map[string]*nomadapi.Attribute{}}

const attrMapsMax = 1 << 12

// splitAttributes splits a group's attributes into the map it shares with
// every group of the same attributes and the per-GPU ones it keeps as its
// own, sorted by name.
func splitAttributes(m map[string]*nomadapi.Attribute) (map[string]*nomadapi.Attribute, []feasible.NamedAttribute) {
	if m == nil {
		return nil, nil
	}
	var own []feasible.NamedAttribute
	for _, name := range perGPUAttributes {
		if a, ok := m[name]; ok {
			own = append(own, feasible.NamedAttribute{Name: name, Value: a})
		}
	}
	return sharedAttributes(m), own
}

// sharedAttributes is m without the per-GPU attributes, as a map shared
// with every other group of equal attributes.
func sharedAttributes(m map[string]*nomadapi.Attribute) map[string]*nomadapi.Attribute {
	key := attrMapKey(m)
	attrMaps.Lock()
	defer attrMaps.Unlock()
	if c, ok := attrMaps.m[string(key)]; ok {
		return c
	}
	if len(attrMaps.m) >= attrMapsMax {
		clear(attrMaps.m)
	}
	c := make(map[string]*nomadapi.Attribute, len(m))
	for k, a := range m {
		if !slices.Contains(perGPUAttributes, k) {
			c[interned(k)] = a
		}
	}
	attrMaps.m[string(key)] = c
	return c
}

// attrMapKey is the content of m without the per-GPU attributes, in name
// order, as a key: each name, then which of the value's pointers are set
// and their values, then the unit.
func attrMapKey(m map[string]*nomadapi.Attribute) []byte {
	names := make([]string, 0, len(m))
	for k := range m {
		if !slices.Contains(perGPUAttributes, k) {
			names = append(names, k)
		}
	}
	slices.Sort(names)
	b := make([]byte, 0, 32*len(names))
	for _, k := range names {
		b = appendField(b, k)
		a := m[k]
		if a == nil {
			b = append(b, 'n')
			continue
		}
		if a.FloatVal != nil {
			b = strconv.AppendFloat(append(b, 'f'), *a.FloatVal, 'g', -1, 64)
		}
		if a.IntVal != nil {
			b = strconv.AppendInt(append(b, 'i'), *a.IntVal, 10)
		}
		if a.StringVal != nil {
			b = appendField(append(b, 's'), *a.StringVal)
		}
		if a.BoolVal != nil {
			b = strconv.AppendBool(append(b, 'b'), *a.BoolVal)
		}
		b = appendField(append(b, 'u'), a.Unit)
	}
	return b
}

// appendField appends s with its length, so that no two contents join
// to the same key.
func appendField(b []byte, s string) []byte {
	b = strconv.AppendInt(b, int64(len(s)), 10)
	return append(append(b, ':'), s...)
}

// shared is m with its keys and values interned: thousands of nodes
// carry the same attribute names and mostly the same values.
func shared(m map[string]string) map[string]string {
	if m == nil {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[interned(k)] = interned(v)
	}
	return out
}

// interned is s, as the one copy that every equal string interned shares.
func interned(s string) string { return unique.Make(s).Value() }

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
