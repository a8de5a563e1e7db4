package nomadwatch

import (
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/gpushare/nomad-gpushare/device"
	"github.com/gpushare/nomad-gpushare/device/gpu"
	nomadapi "github.com/hashicorp/nomad/api"
)

// eventOf is an event whose payload holds v under field as the event
// stream delivers it: JSON decoded into maps.
func eventOf(t testing.TB, field string, v any) *nomadapi.Event {
	return &nomadapi.Event{Payload: wire(t, field, v)}
}

// scaleNode is an 8 x H100 node in the plugin's layout (808 device
// instances), with the fields a node event carries.
func scaleNode(t testing.TB) *nomadapi.Node {
	t.Helper()
	groups, err := device.SimulatedLayout(gpu.SimOptions{Preset: gpu.PresetH100, Seed: "payload"}, 100, 4)
	if err != nil {
		t.Fatal(err)
	}
	started := time.Date(2026, 11, 28, 4, 0, 0, 0, time.UTC)
	return &nomadapi.Node{ID: "node-1", Name: "gpu-1", Datacenter: "dc1", NodePool: "gpu", Status: "ready",
		SchedulingEligibility: "eligible", Drain: true, Meta: map[string]string{"gpushare.rank.x": "3"},
		Attributes:    map[string]string{"unique.hostname": "gpu-1"},
		DrainStrategy: &nomadapi.DrainStrategy{DrainSpec: nomadapi.DrainSpec{Deadline: time.Hour}, ForceDeadline: started.Add(time.Hour), StartedAt: started},
		LastDrain:     &nomadapi.DrainMetadata{StartedAt: started, UpdatedAt: started, Status: "draining"},
		Events:        []*nomadapi.NodeEvent{{Message: "Node registered", Subsystem: "Cluster", Timestamp: started}},
		NodeResources: &nomadapi.NodeResources{Cpu: nomadapi.NodeCpuResources{CpuShares: 268800}, Memory: nomadapi.NodeMemoryResources{MemoryMB: 2063936},
			Devices: device.NodeDevices(groups)},
		ReservedResources: &nomadapi.NodeReservedResources{Cpu: nomadapi.NodeReservedCpuResources{CpuShares: 1000}},
		CreateIndex:       7, ModifyIndex: 4242}
}

// roundTrip is v as a JSON client reads it back: what an event's payload
// must decode to.
func roundTrip[T any](t testing.TB, v *T) *T {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	out := new(T)
	if err := json.Unmarshal(b, out); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestDecodePayload: a node and an allocation decode from an event's
// payload to what was sent, device attributes included. (The API client's
// Event.Node, which the cache used before, decoded every device attribute
// without its value: a node event made a MIG node's instances look like
// whole GPUs until the next listing.)
func TestDecodePayload(t *testing.T) {
	node := scaleNode(t)
	got, err := decodePayload[nomadapi.Node](eventOf(t, "Node", node), "Node")
	if err != nil {
		t.Fatal(err)
	}
	if want := roundTrip(t, node); !reflect.DeepEqual(got, want) {
		t.Errorf("node decodes to\n%+v\nwant\n%+v", got, want)
	}
	attr := got.NodeResources.Devices[0].Attributes["architecture"]
	if attr == nil || attr.StringVal == nil || *attr.StringVal != "hopper" {
		t.Errorf("device attribute architecture decodes to %+v, want hopper", attr)
	}

	alloc := &nomadapi.Allocation{ID: "a1", Namespace: "team-a", JobID: "j", TaskGroup: "g", NodeID: "node-1",
		DesiredStatus: "run", ClientStatus: "running", CreateIndex: 3, ModifyIndex: 9, AllocModifyIndex: 8, CreateTime: 1764000000000000000,
		AllocatedResources: &nomadapi.AllocatedResources{Tasks: map[string]*nomadapi.AllocatedTaskResources{"t": {
			Cpu: nomadapi.AllocatedCpuResources{CpuShares: 500}, Memory: nomadapi.AllocatedMemoryResources{MemoryMB: 256},
			Devices: []*nomadapi.AllocatedDeviceResource{{Vendor: "nvidia", Type: "gpu-share", Name: "H100", DeviceIDs: []string{"GPU-1-s00", "GPU-1-s01"}}}}}},
		TaskStates:        map[string]*nomadapi.TaskState{"t": {State: "running", StartedAt: time.Date(2026, 11, 28, 4, 0, 0, 0, time.UTC)}},
		RescheduleTracker: &nomadapi.RescheduleTracker{Events: []*nomadapi.RescheduleEvent{{RescheduleTime: 17, PrevAllocID: "a0"}}},
	}
	ev := eventOf(t, "Allocation", alloc)
	gotA, err := decodePayload[nomadapi.Allocation](ev, "Allocation")
	if err != nil {
		t.Fatal(err)
	}
	if want := roundTrip(t, alloc); !reflect.DeepEqual(gotA, want) {
		t.Errorf("allocation decodes to\n%+v\nwant\n%+v", gotA, want)
	}
	if none, err := decodePayload[nomadapi.Node](ev, "Node"); none != nil || err != nil {
		t.Errorf("a payload without the field: %v, %v; want nil, nil", none, err)
	}
}

// BenchmarkDecodeNodeEvent is one node event of the scale layout, decoded
// through encoding/json (decodePayload), with the device groups read from
// the tree (decodeNodeTree: a node's first event after a listing), by the
// cache for a metadata change, and as the API client does (Event.Node).
func BenchmarkDecodeNodeEvent(b *testing.B) {
	ev := eventOf(b, "Node", scaleNode(b))
	b.Run("encoding-json", func(b *testing.B) {
		for b.Loop() {
			if _, err := decodePayload[nomadapi.Node](ev, "Node"); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("tree", func(b *testing.B) {
		raw := ev.Payload["Node"].(map[string]any)
		for b.Loop() {
			if _, err := decodeNodeTree(raw); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("cache-metadata-change", func(b *testing.B) {
		c := newCache()
		node := scaleNode(b)
		b.StopTimer()
		for i := range b.N {
			node.ModifyIndex++
			node.Meta["gpushare.rank.x"] = fmt.Sprint(i)
			ev := &nomadapi.Event{Topic: nomadapi.TopicNode, Type: "NodeRegistration", Key: node.ID, Index: node.ModifyIndex, Payload: wire(b, "Node", node)}
			b.StartTimer()
			if err := c.apply(ev); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
		}
	})
	b.Run("client-mapstructure", func(b *testing.B) {
		for b.Loop() {
			if _, err := ev.Node(); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestNodeEventKeepsUnchangedResources: a node event that changes only the
// node's metadata keeps the cached devices (and decodes to what a full
// decode gives); one that changes a device instance's health decodes the
// devices again.
func TestNodeEventKeepsUnchangedResources(t *testing.T) {
	c := newCache()
	node := scaleNode(t)
	apply := func(n *nomadapi.Node) nodeEntry {
		t.Helper()
		ev := &nomadapi.Event{Topic: nomadapi.TopicNode, Type: "NodeRegistration", Key: n.ID, Index: n.ModifyIndex, Payload: wire(t, "Node", n)}
		if err := c.apply(ev); err != nil {
			t.Fatal(err)
		}
		full, err := decodePayload[nomadapi.Node](ev, "Node")
		if err != nil {
			t.Fatal(err)
		}
		got, want := c.nodes[n.ID], newNodeEntry(full)
		if !reflect.DeepEqual(got.full, want.full) || !reflect.DeepEqual(got.stub, want.stub) || !reflect.DeepEqual(got.dev, want.dev) {
			t.Fatalf("cached node differs from a full decode:\n got %+v\nwant %+v", got.full, want.full)
		}
		return got
	}
	first := apply(node)
	node.Meta = map[string]string{"gpushare.rank.x": "5"}
	node.ModifyIndex++
	second := apply(node)
	if second.dev != first.dev || second.full.Meta["gpushare.rank.x"] != "5" {
		t.Errorf("a metadata change decoded the devices again (or lost the metadata): %+v", second.full.Meta)
	}
	// The rest of the node changes with or without its metadata; the
	// metadata goes away: each compares equal to a full decode (apply).
	for _, change := range []func(){
		func() { node.Attributes["unique.hostname"] = "gpu-1b" },
		func() { node.Status, node.Meta["gpushare.rank.x"] = "down", "6" },
		func() { node.Meta = nil },
		func() { node.Meta = map[string]string{} },
		func() { node.SchedulingEligibility = "ineligible" },
	} {
		change()
		node.ModifyIndex++
		if e := apply(node); e.dev != first.dev {
			t.Error("a change outside the node's resources decoded the devices again")
		}
	}
	inst := node.NodeResources.Devices[0].Instances[0]
	inst.Healthy, inst.HealthDescription = false, "withdrawn"
	node.ModifyIndex++
	if third := apply(node); third.dev == second.dev {
		t.Error("a device's health change kept the cached devices")
	}
}
