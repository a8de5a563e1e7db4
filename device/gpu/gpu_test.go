package gpu

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

func TestSimulatedInventory(t *testing.T) {
	tests := []struct {
		name      string
		opts      SimOptions
		wantCount int
		wantModel string
		wantMiB   uint64
		wantCC    string
		wantArch  string
	}{
		{"h100 preset", SimOptions{Preset: PresetH100}, 8, "NVIDIA H100 80GB HBM3", 81920, "9.0", "hopper"},
		{"a100 preset", SimOptions{Preset: PresetA100}, 8, "Mock NVIDIA A100-SXM4-40GB", 40960, "8.0", "ampere"},
		{"a100 preset cut to 4", SimOptions{Preset: PresetA100, Count: 4}, 4, "Mock NVIDIA A100-SXM4-40GB", 40960, "8.0", "ampere"},
		{"custom", SimOptions{Preset: PresetCustom, Count: 3, Model: "NVIDIA L4", MemoryMiB: 23034}, 3, "NVIDIA L4", 23034, "8.0", "ampere"},
		{"h100 grown to 10", SimOptions{Preset: PresetH100, Count: 10}, 10, "NVIDIA H100 80GB HBM3", 81920, "9.0", "hopper"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sim, err := NewSimulated(tt.opts)
			if err != nil {
				t.Fatal(err)
			}
			inv, err := NewSource(sim).Inventory()
			if err != nil {
				t.Fatal(err)
			}
			if inv.DriverVersion != "550.54.15" || inv.CUDAVersion != "12.4" {
				t.Errorf("driver %q cuda %q", inv.DriverVersion, inv.CUDAVersion)
			}
			if len(inv.GPUs) != tt.wantCount {
				t.Fatalf("%d GPUs, want %d", len(inv.GPUs), tt.wantCount)
			}
			seen := map[string]bool{}
			for i, g := range inv.GPUs {
				if g.Err != nil {
					t.Fatalf("GPU %d: %v", i, g.Err)
				}
				if g.Index != i || g.Model != tt.wantModel || g.MemoryMiB != tt.wantMiB || g.ComputeCapability() != tt.wantCC || g.Architecture != tt.wantArch {
					t.Errorf("GPU %d = %+v", i, g)
				}
				if !strings.HasPrefix(g.UUID, "GPU-") || seen[g.UUID] {
					t.Errorf("GPU %d: bad or repeated UUID %q", i, g.UUID)
				}
				seen[g.UUID] = true
				if !strings.HasPrefix(g.PCIBusID, "00000000:") || g.PCIBandwidthMBps == 0 || g.PowerLimitW == 0 || g.MIG {
					t.Errorf("GPU %d: pci %q bw %d power %d mig %v", i, g.PCIBusID, g.PCIBandwidthMBps, g.PowerLimitW, g.MIG)
				}
			}
		})
	}
}

func TestSimulatedUUIDsAreStable(t *testing.T) {
	a, _ := NewSimulated(SimOptions{Preset: PresetH100})
	b, _ := NewSimulated(SimOptions{Preset: PresetH100})
	c, _ := NewSimulated(SimOptions{Preset: PresetH100, Seed: "node2"})
	if strings.Join(a.UUIDs(), ",") != strings.Join(b.UUIDs(), ",") {
		t.Fatal("same seed gave different UUIDs")
	}
	if a.UUIDs()[0] == c.UUIDs()[0] {
		t.Fatal("different seeds gave the same UUID")
	}
}

func TestSimulatedOptionErrors(t *testing.T) {
	for _, o := range []SimOptions{{Preset: "tpu"}, {Preset: PresetCustom}, {Preset: PresetCustom, Count: 2, Model: "x"}} {
		if _, err := NewSimulated(o); err == nil {
			t.Errorf("NewSimulated(%+v): no error", o)
		}
	}
}

func TestInitFailureIsRetried(t *testing.T) {
	sim, _ := NewSimulated(SimOptions{Preset: PresetA100, Count: 2})
	sim.SetInitError(nvml.ERROR_LIBRARY_NOT_FOUND)
	src := NewSource(sim)
	_, err := src.Inventory()
	if !errors.Is(err, ErrInit) || !strings.Contains(err.Error(), "libnvidia-ml.so.1 not found") {
		t.Fatalf("err = %v", err)
	}
	sim.SetInitError(nvml.SUCCESS)
	inv, err := src.Inventory()
	if err != nil || len(inv.GPUs) != 2 {
		t.Fatalf("after heal: %d GPUs, %v", len(inv.GPUs), err)
	}
}

func TestLostGPUAndMIG(t *testing.T) {
	sim, _ := NewSimulated(SimOptions{Preset: PresetH100, Count: 3})
	sim.SetLost(1, nvml.ERROR_GPU_IS_LOST)
	sim.SetMIG(2, true)
	inv, err := NewSource(sim).Inventory()
	if err != nil {
		t.Fatal(err)
	}
	if inv.GPUs[0].Err != nil || inv.GPUs[1].Err == nil || !strings.Contains(inv.GPUs[1].Err.Error(), "GPU_IS_LOST") {
		t.Fatalf("errors: %v / %v", inv.GPUs[0].Err, inv.GPUs[1].Err)
	}
	if !inv.GPUs[2].MIG || inv.GPUs[0].MIG {
		t.Fatalf("MIG: %v %v", inv.GPUs[0].MIG, inv.GPUs[2].MIG)
	}
}

// TestSimulatedMIGDevices: a MIG-enabled GPU lists its MIG devices with
// NVML's names (parent model and profile), memory, instance IDs and
// stable UUIDs; disabling MIG removes them.
func TestSimulatedMIGDevices(t *testing.T) {
	for _, tt := range []struct {
		preset   string
		profiles []int
		want     []string // profile and memory MiB
	}{
		{PresetA100, []int{nvml.GPU_INSTANCE_PROFILE_1_SLICE, nvml.GPU_INSTANCE_PROFILE_1_SLICE, nvml.GPU_INSTANCE_PROFILE_3_SLICE},
			[]string{"1g.5gb 4864", "1g.5gb 4864", "3g.20gb 19968"}},
		{PresetH100, []int{nvml.GPU_INSTANCE_PROFILE_2_SLICE}, []string{"2g.20gb 20480"}},
	} {
		t.Run(tt.preset, func(t *testing.T) {
			sim, _ := NewSimulated(SimOptions{Preset: tt.preset, Count: 2})
			if _, err := sim.AddMIGDevice(1, nvml.GPU_INSTANCE_PROFILE_1_SLICE); err == nil {
				t.Fatal("MIG device created without MIG mode")
			}
			sim.SetMIG(1, true)
			var uuids []string
			for _, p := range tt.profiles {
				u, err := sim.AddMIGDevice(1, p)
				if err != nil {
					t.Fatal(err)
				}
				uuids = append(uuids, u)
			}
			inv, err := NewSource(sim).Inventory()
			if err != nil {
				t.Fatal(err)
			}
			g := inv.GPUs[1]
			if !g.MIG || inv.GPUs[0].MIG || len(inv.GPUs[0].MIGDevices) != 0 || len(g.MIGDevices) != len(tt.want) {
				t.Fatalf("GPU 1: MIG %v with %d devices", g.MIG, len(g.MIGDevices))
			}
			for j, m := range g.MIGDevices {
				got := fmt.Sprintf("%s %d", m.Profile, m.MemoryMiB)
				if m.Err != nil || got != tt.want[j] || m.UUID != uuids[j] || !strings.HasPrefix(m.UUID, "MIG-") ||
					m.Name != g.Model+" MIG "+m.Profile || m.GPUInstance != j {
					t.Errorf("MIG device %d = %+v, want %s", j, m, tt.want[j])
				}
			}
			again, _ := NewSimulated(SimOptions{Preset: tt.preset, Count: 2})
			again.SetMIG(1, true)
			if u, _ := again.AddMIGDevice(1, tt.profiles[0]); u != uuids[0] {
				t.Errorf("MIG UUID not stable: %s then %s", uuids[0], u)
			}
			sim.SetMIG(1, false)
			if inv, _ := NewSource(sim).Inventory(); inv.GPUs[1].MIG || len(inv.GPUs[1].MIGDevices) != 0 {
				t.Errorf("after MIG off: %+v", inv.GPUs[1])
			}
		})
	}
}

func TestMIGProfile(t *testing.T) {
	for name, want := range map[string]string{
		"NVIDIA A100-SXM4-40GB MIG 1g.5gb": "1g.5gb", "NVIDIA H100 80GB HBM3 MIG 1g.10gb+me": "1g.10gb+me", "NVIDIA A100": "", "": "",
	} {
		if got := migProfile(name); got != want {
			t.Errorf("migProfile(%q) = %q, want %q", name, got, want)
		}
	}
}

func TestStats(t *testing.T) {
	tests := []struct {
		name   string
		opts   SimOptions
		memMiB uint64
	}{
		{"h100 preset", SimOptions{Preset: PresetH100, Count: 2}, 81920},
		{"a100 preset", SimOptions{Preset: PresetA100, Count: 2}, 40960},
		{"custom", SimOptions{Preset: PresetCustom, Count: 2, Model: "NVIDIA L4", MemoryMiB: 23034}, 23034},
		{"h100 grown to 10", SimOptions{Preset: PresetH100, Count: 10}, 81920},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sim, err := NewSimulated(tt.opts)
			if err != nil {
				t.Fatal(err)
			}
			last := len(sim.UUIDs()) - 1
			sim.SetUsage(last, tt.memMiB/2, 80)
			st, err := NewSource(sim).Stats()
			if err != nil {
				t.Fatal(err)
			}
			u := sim.UUIDs()
			s0, s1 := st[u[0]], st[u[last]]
			if s0.Err != nil || s0.MemUsedMiB != 0 || s0.MemTotalMiB != tt.memMiB || *s0.GPUUtilPct != 0 {
				t.Errorf("idle GPU stats %+v", s0)
			}
			if s1.Err != nil || s1.MemUsedMiB != tt.memMiB/2 || *s1.GPUUtilPct != 80 || *s1.MemUtilPct != 50 || s1.TemperatureC == nil || s1.PowerW == nil || *s1.PowerW <= *s0.PowerW {
				t.Errorf("busy GPU stats %+v", s1)
			}
			if *s1.EncoderPct != 20 || *s1.DecoderPct != 40 || *s1.BAR1UsedMiB != 2 || *s1.BAR1TotalMiB != tt.memMiB || s1.ECCCorrected.Device == nil {
				t.Errorf("busy GPU encoder %v decoder %v BAR1 %v/%v ECC %+v", *s1.EncoderPct, *s1.DecoderPct, *s1.BAR1UsedMiB, *s1.BAR1TotalMiB, s1.ECCCorrected)
			}
		})
	}
}

// TestMIGStats: a MIG device reports its memory.
func TestMIGStats(t *testing.T) {
	sim, _ := NewSimulated(SimOptions{Preset: PresetA100, Count: 2})
	sim.SetMIG(1, true)
	mig, _ := sim.AddMIGDevice(1, nvml.GPU_INSTANCE_PROFILE_3_SLICE)
	st, err := NewSource(sim).Stats()
	if err != nil {
		t.Fatal(err)
	}
	if m := st[mig]; m.Err != nil || m.MemTotalMiB != 19968 || m.GPUUtilPct != nil {
		t.Fatalf("MIG device stats %+v", m)
	}
}

// TestSimulatedSetsEveryCallOfSource: every optional fact Source reads is
// answered on every preset, also for GPUs added beyond the preset's eight
// (an unset go-nvml mock function would panic, and Source recovers from
// nothing).
func TestSimulatedSetsEveryCallOfSource(t *testing.T) {
	for _, o := range []SimOptions{{Preset: PresetH100, Count: 10}, {Preset: PresetA100, Count: 10}, {Preset: PresetCustom, Count: 2, Model: "NVIDIA L4", MemoryMiB: 23034}} {
		sim, err := NewSimulated(o)
		if err != nil {
			t.Fatal(err)
		}
		sim.SetMIG(1, true)
		if _, err := sim.AddMIGDevice(1, nvml.GPU_INSTANCE_PROFILE_1_SLICE); err != nil {
			t.Fatal(err)
		}
		inv, err := NewSource(sim).Inventory()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := NewSource(sim).Stats(); err != nil {
			t.Fatal(err)
		}
		for _, g := range inv.GPUs {
			if g.Err != nil || g.Architecture == "" || g.ComputeMajor == 0 || g.PCIBusID == "" || g.PCIBandwidthMBps == 0 ||
				g.PowerLimitW == 0 || g.CoresClockMHz == 0 || g.MemoryClockMHz == 0 || g.BAR1MiB == 0 || g.CUDACores == 0 {
				t.Errorf("%s GPU %d lacks a fact: %+v", o.Preset, g.Index, g)
			}
			if g.MIG != (g.Index == 1) {
				t.Errorf("%s GPU %d: MIG %v", o.Preset, g.Index, g.MIG)
			}
		}
	}
}

// TestRealNVML reads the machine's real NVML: without a driver it must fail
// with a clear initialization error; with GPUs, each one is described.
func TestRealNVML(t *testing.T) {
	src := NewSource(nvml.New())
	defer src.Close()
	inv, err := src.Inventory()
	if err != nil {
		if !errors.Is(err, ErrInit) || !strings.Contains(err.Error(), "NVML failed to initialize") {
			t.Fatalf("no NVML here, but the error is unclear: %v", err)
		}
		t.Logf("no NVML on this machine: %v", err)
		return
	}
	for _, g := range inv.GPUs {
		if g.Err != nil {
			t.Errorf("GPU %d: %v", g.Index, g.Err)
			continue
		}
		if !strings.HasPrefix(g.UUID, "GPU-") || g.MemoryMiB == 0 || g.Model == "" || g.PCIBusID == "" {
			t.Errorf("GPU %d described as %+v", g.Index, g)
		}
	}
	if _, err := src.Stats(); err != nil {
		t.Fatal(err)
	}
}

// TestXidWatch: every GPU is registered for Xid critical errors, each
// event is reported with its GPU (and MIG instance), and Close stops the
// watch.
func TestXidWatch(t *testing.T) {
	sim, _ := NewSimulated(SimOptions{Preset: PresetA100, Count: 3})
	src := NewSource(sim)
	if started, _, err := src.WatchXid(func(XidEvent) {}); started || err != nil {
		t.Fatalf("watch before NVML is initialized: %v, %v", started, err)
	}
	if sim.XidRegistered(0) {
		t.Fatal("watch started before NVML was initialized")
	}
	if _, err := src.Inventory(); err != nil {
		t.Fatal(err)
	}
	events := make(chan XidEvent, 4)
	started, unsupported, err := src.WatchXid(func(e XidEvent) { events <- e })
	if !started || err != nil || len(unsupported) != 0 {
		t.Fatalf("WatchXid: %v, %v, %v", started, unsupported, err)
	}
	if again, _, _ := src.WatchXid(func(e XidEvent) { events <- e }); again {
		t.Fatal("a second watch started")
	}
	for i := 0; i < 3; i++ {
		if !sim.XidRegistered(i) {
			t.Fatalf("GPU %d not registered for Xid events", i)
		}
	}
	sim.InjectXid(2, 79)
	sim.InjectMIGXid(1, 3, 0, 48)
	want := []XidEvent{{UUID: sim.UUIDs()[2], Xid: 79, GPUInstance: -1, ComputeInstance: -1}, {UUID: sim.UUIDs()[1], Xid: 48, GPUInstance: 3, ComputeInstance: 0}}
	for _, w := range want {
		select {
		case e := <-events:
			if e != w {
				t.Errorf("event %+v, want %+v", e, w)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no event for %+v", w)
		}
	}
	src.Close()
	sim.InjectXid(0, 79)
	select {
	case e := <-events:
		t.Fatalf("event %+v after Close", e)
	case <-time.After(2 * xidWaitMS * time.Millisecond):
	}
}

// TestMemoryHealth: uncorrectable ECC counts and a row remapping failure
// are read at every inventory.
func TestMemoryHealth(t *testing.T) {
	sim, _ := NewSimulated(SimOptions{Preset: PresetH100, Count: 2})
	sim.SetECC(1, 2, 5)
	sim.SetRemapFailure(1, true)
	inv, err := NewSource(sim).Inventory()
	if err != nil {
		t.Fatal(err)
	}
	h0, h1 := inv.GPUs[0].Memory, inv.GPUs[1].Memory
	if h0.UncorrectedVolatile == nil || *h0.UncorrectedVolatile != 0 || h0.RemapFailure {
		t.Errorf("healthy GPU: %+v", h0)
	}
	if *h1.UncorrectedVolatile != 2 || *h1.UncorrectedAggregate != 5 || !h1.RemapFailure {
		t.Errorf("failing GPU: volatile %d aggregate %d remap failure %v", *h1.UncorrectedVolatile, *h1.UncorrectedAggregate, h1.RemapFailure)
	}
}
