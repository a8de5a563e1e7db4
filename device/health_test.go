package device

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/gpushare/nomad-gpushare/device/gpu"
	"github.com/gpushare/nomad-gpushare/internal/testcluster"
)

// waitUnhealthy waits until the hardware shows the GPU (or MIG device)
// with uuid unhealthy, and returns the reason.
func waitUnhealthy(t *testing.T, p *Plugin, uuid string) string {
	t.Helper()
	var reason string
	testcluster.Eventually(t, 10*time.Second, func() error {
		for _, g := range p.hw.view().gpus {
			if g.UUID == uuid && !g.healthy {
				reason = g.reason
				return nil
			}
			for _, m := range g.MIGDevices {
				if m.UUID == uuid && m.Err != nil {
					reason = m.Err.Error()
					return nil
				}
			}
		}
		return fmt.Errorf("%s still healthy", uuid)
	})
	return reason
}

// TestCriticalXidMarksGPUUnhealthy: a critical Xid error makes its GPU
// unhealthy, with the Xid in the reason, until the plugin restarts;
// Reserve refuses it and the partition never switches it. Other Xids are
// logged only.
func TestCriticalXidMarksGPUUnhealthy(t *testing.T) {
	f := newFakeNomad(t)
	p := newPlugin(t, f, nil)
	u := uuids(p)
	sim := p.hw.simulated()
	sim.InjectXid(0, 13) // a graphics engine exception: the application's fault
	sim.InjectXid(1, 79)
	reason := waitUnhealthy(t, p, u[1])
	if !strings.Contains(reason, "critical Xid 79 (GPU has fallen off the bus)") || !strings.Contains(reason, "until the plugin restarts") {
		t.Errorf("reason %q", reason)
	}
	cycle(p, f)
	w := p.pub.current()[0]
	if !w.Devices[0].Healthy || w.Devices[1].Healthy || w.Devices[1].HealthDesc != reason {
		t.Fatalf("whole instances: %+v %+v", w.Devices[0], w.Devices[1])
	}
	if _, err := p.Reserve([]string{u[1]}); err == nil || !strings.Contains(err.Error(), "Xid 79") {
		t.Errorf("Reserve of a GPU with Xid 79: %v", err)
	}
	// NVML answers normally again: the GPU stays unhealthy.
	cycle(p, f)
	if _, err := p.Reserve([]string{u[1]}); err == nil {
		t.Error("GPU healthy again after a critical Xid without a restart")
	}
}

// TestXidSetIsConfigurable: xid_critical replaces the default set.
func TestXidSetIsConfigurable(t *testing.T) {
	f := newFakeNomad(t)
	p := newPlugin(t, f, func(c *Config) { c.XidCritical = []int{13} })
	u := uuids(p)
	p.hw.simulated().InjectXid(0, 79)
	p.hw.simulated().InjectXid(2, 13)
	waitUnhealthy(t, p, u[2])
	for _, g := range p.hw.view().gpus {
		if g.UUID == u[0] && !g.healthy {
			t.Errorf("Xid 79 marked GPU 0 with xid_critical = [13]: %s", g.reason)
		}
	}
}

// TestXidOfAMIGDevice: an Xid error about one MIG device marks that MIG
// device, not its neighbours.
func TestXidOfAMIGDevice(t *testing.T) {
	f := newFakeNomad(t)
	p := newPlugin(t, f, nil)
	sim := p.hw.simulated()
	sim.SetMIG(3, true)
	a, _ := sim.AddMIGDevice(3, nvml.GPU_INSTANCE_PROFILE_1_SLICE)
	b, _ := sim.AddMIGDevice(3, nvml.GPU_INSTANCE_PROFILE_1_SLICE)
	cycle(p, f)
	sim.InjectMIGXid(3, 1, 0, 48) // b is GPU instance 1
	if r := waitUnhealthy(t, p, b); !strings.Contains(r, "Xid 48 (double-bit ECC error)") {
		t.Errorf("reason %q", r)
	}
	cycle(p, f)
	if _, err := p.Reserve([]string{b}); err == nil {
		t.Error("MIG device with Xid 48 reserved")
	}
	if _, err := p.Reserve([]string{a}); err != nil {
		t.Errorf("its neighbour: %v", err)
	}
}

// TestMemoryErrorsMarkGPUUnhealthy: uncorrectable ECC errors since the
// driver loaded and a failed row remapping make a GPU unhealthy; a GPU
// reset (volatile count back to 0) heals it.
func TestMemoryErrorsMarkGPUUnhealthy(t *testing.T) {
	f := newFakeNomad(t)
	p := newPlugin(t, f, nil)
	u := uuids(p)
	sim := p.hw.simulated()
	sim.SetECC(0, 2, 2)
	sim.SetRemapFailure(2, true)
	cycle(p, f)
	for i, want := range map[int]string{0: "2 uncorrectable ECC errors since the driver loaded", 2: "row remapping failed"} {
		if _, err := p.Reserve([]string{u[i]}); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("GPU %d: %v, want %q", i, err, want)
		}
	}
	sim.SetECC(0, 0, 2)
	cycle(p, f)
	if _, err := p.Reserve([]string{u[0]}); err != nil {
		t.Errorf("after a GPU reset: %v", err)
	}
}

func TestMemoryFault(t *testing.T) {
	n := func(v uint64) *uint64 { return &v }
	base := map[string]uint64{}
	tests := []struct {
		name string
		mem  gpu.MemoryHealth
		want string
	}{
		{"no ECC reported", gpu.MemoryHealth{}, ""},
		{"clean", gpu.MemoryHealth{UncorrectedVolatile: n(0), UncorrectedAggregate: n(7)}, ""},
		{"volatile errors", gpu.MemoryHealth{UncorrectedVolatile: n(1), UncorrectedAggregate: n(8)}, "1 uncorrectable ECC errors since the driver loaded"},
		{"lifetime count only: first seen is the base", gpu.MemoryHealth{UncorrectedAggregate: n(7)}, ""},
		{"lifetime count only: unchanged", gpu.MemoryHealth{UncorrectedAggregate: n(7)}, ""},
		{"lifetime count only: new errors", gpu.MemoryHealth{UncorrectedAggregate: n(9)}, "2 uncorrectable ECC errors since the plugin started"},
		{"remap failure", gpu.MemoryHealth{UncorrectedVolatile: n(0), RemapFailure: true}, "row remapping failed"},
	}
	for _, tt := range tests {
		got := memoryFault(gpu.GPU{UUID: "GPU-1", Memory: tt.mem}, base)
		if tt.want == "" && got != "" || !strings.Contains(got, tt.want) {
			t.Errorf("%s: %q, want %q", tt.name, got, tt.want)
		}
	}
}
