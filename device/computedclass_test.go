package device

import (
	"fmt"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/hashicorp/nomad/nomad/structs"
	dev "github.com/hashicorp/nomad/plugins/device"
)

// nodeClass is the computed class the Nomad servers give a node that
// carries the plugin's device groups (as the client converts them).
func nodeClass(t *testing.T, groups []*dev.DeviceGroup) string {
	t.Helper()
	n := &structs.Node{Datacenter: "dc1", NodePool: "default", NodeResources: &structs.NodeResources{}}
	for _, g := range groups {
		r := &structs.NodeDeviceResource{Vendor: g.Vendor, Type: g.Type, Name: g.Name, Attributes: g.Attributes}
		for _, d := range g.Devices {
			r.Instances = append(r.Instances, &structs.NodeDevice{ID: d.ID, Healthy: d.Healthy, HealthDescription: d.HealthDesc})
		}
		n.NodeResources.Devices = append(n.NodeResources.Devices, r)
	}
	if err := n.ComputeClass(); err != nil {
		t.Fatal(err)
	}
	return n.ComputedClass
}

// TestComputedClassFollowsAllocatableInstances: Nomad caches device
// feasibility per computed node class and never unblocks an evaluation
// for a class it found ineligible, so every change of which instances are
// allocatable must change the class (and nothing else may).
func TestComputedClassFollowsAllocatableInstances(t *testing.T) {
	if structs.IsUniqueNamespace(OfferedAttr) {
		t.Fatalf("%q is in the unique namespace, which the class hash leaves out", OfferedAttr)
	}
	f := newFakeNomad(t)
	p := newPlugin(t, f, nil)
	u := uuids(p)
	snapshot := func() (fams, class string) {
		groups := p.pub.current()
		return fmt.Sprint(families(p)), nodeClass(t, groups)
	}
	fams, class := snapshot()
	steps := []struct {
		name string
		do   func()
	}{
		{"idle", func() {}},
		{"holdings change within the share GPU", func() { f.place("a0", "gpu-share", shares(u[3], 0, 10)...) }},
		{"stats change", func() { p.hw.simulated().SetUsage(1, 1000, 50) }},
		{"landing place fills: GPU 2 withdrawn", func() { f.place("a1", "gpu-share", shares(u[3], 10, 60)...) }},
		{"settling", func() {}},
		{"GPU 2 published as shares", func() {}},
		{"tenants end: GPU 2 withdrawn", func() { f.finish("a0"); f.finish("a1") }},
		{"settling", func() {}},
		{"GPU 2 back to whole", func() {}},
		{"a GPU is lost", func() { p.hw.simulated().SetLost(0, nvml.ERROR_GPU_IS_LOST) }},
	}
	changes := 0
	for _, s := range steps {
		s.do()
		cycle(p, f)
		nf, nc := snapshot()
		if (nf != fams) != (nc != class) {
			t.Errorf("%s: families %s -> %s but computed class %s -> %s", s.name, fams, nf, class, nc)
		}
		if nc != class {
			changes++
		}
		fams, class = nf, nc
	}
	if changes < 4 {
		t.Errorf("computed class changed %d times, want at least 4 (withdraw, share, withdraw, whole, lost)", changes)
	}
}
