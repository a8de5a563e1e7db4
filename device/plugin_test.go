package device

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/gpushare/nomad-gpushare/device/gpu"
	"github.com/gpushare/nomad-gpushare/vocab"
	hclog "github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"
	dev "github.com/hashicorp/nomad/plugins/device"
)

// newPlugin configures a plugin on a simulated 4 x A100 40GB machine that
// reads the fake Nomad. mod adjusts the config.
func newPlugin(t testing.TB, f *fakeNomad, mod func(*Config)) *Plugin {
	t.Helper()
	c := DefaultConfig()
	c.Backend, c.SimulatedPreset, c.SimulatedCount = BackendSimulated, "a100", 4
	c.NomadAddress, c.NodeID, c.SwitchSettlePeriod = f.URL, fakeNodeID, "0s"
	if mod != nil {
		mod(&c)
	}
	p := New(hclog.NewNullLogger())
	if err := p.configure(c); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Shutdown)
	// Boot: the first read finds the GPUs published nowhere; they settle
	// and are published on the next.
	cycle(p, f)
	cycle(p, f)
	return p
}

// loopStateOf returns the configured loop's state, for tests that run its
// steps while no loop runs.
func loopStateOf(p *Plugin) *loopState {
	p.loop.mu.Lock()
	defer p.loop.mu.Unlock()
	return p.loop.state
}

// cycle is one round of the plugin's loop followed by the Nomad client
// pushing the new fingerprint to the servers.
func cycle(p *Plugin, f *fakeNomad) {
	st := loopStateOf(p)
	p.refreshHardware(st)
	p.observe(context.Background(), st)
	f.sync(p.pub.current())
}

// families returns, per GPU index, where it is allocatable: "whole",
// "share", or "none".
func families(p *Plugin) []string {
	hw := p.hw.view().gpus
	out := make([]string, len(hw))
	pos := map[string]int{}
	for i, g := range hw {
		pos[g.UUID] = i
		out[i] = "none"
	}
	for _, g := range p.pub.current() {
		for _, d := range g.Devices {
			if !d.Healthy {
				continue
			}
			u := d.ID
			if g.Type == "gpu-share" {
				u = u[:len(u)-4]
			}
			if g.Type == "gpu" {
				out[pos[u]] = "whole"
			} else {
				out[pos[u]] = "share"
			}
		}
	}
	return out
}

func uuids(p *Plugin) []string {
	var out []string
	for _, g := range p.hw.view().gpus {
		out = append(out, g.UUID)
	}
	return out
}

func TestFingerprintGroups(t *testing.T) {
	f := newFakeNomad(t)
	p := newPlugin(t, f, nil)
	cycle(p, f)
	if got := fmt.Sprint(families(p)); got != "[whole whole whole share]" {
		t.Fatalf("families = %s", got)
	}
	groups := p.pub.current()
	if len(groups) != 5 {
		t.Fatalf("%d groups, want 1 whole + 4 share", len(groups))
	}
	w := groups[0]
	if w.Vendor != "nvidia" || w.Type != "gpu" || w.Name != "Mock NVIDIA A100-SXM4-40GB" || len(w.Devices) != 4 {
		t.Fatalf("whole group %s/%s/%s with %d devices", w.Vendor, w.Type, w.Name, len(w.Devices))
	}
	for _, k := range []string{"memory", "compute_capability", "driver_version", "cuda_version", "pci_bandwidth", "power", "cuda_cores", "model"} {
		if w.Attributes[k] == nil {
			t.Errorf("whole group lacks attribute %q", k)
		}
	}
	if v, _ := w.Attributes["memory"].GetInt(); v != 40960 || w.Attributes["memory"].Unit != "MiB" {
		t.Errorf("memory attribute %v", w.Attributes["memory"])
	}
	if w.Devices[3].Healthy || !contains(w.Devices[3].HealthDesc, "share mode") || w.Devices[0].HwLocality.PciBusID == "" {
		t.Errorf("whole instance of the shared GPU: %+v", w.Devices[3])
	}
	names := map[string]bool{}
	for i, g := range groups[1:] {
		u := uuids(p)[i]
		if g.Type != "gpu-share" || len(g.Devices) != 100 || g.Devices[7].ID != u+"-s07" {
			t.Fatalf("share group %d: %s with %d devices, 8th %s", i, g.Type, len(g.Devices), g.Devices[7].ID)
		}
		if s, _ := g.Attributes["uuid"].GetString(); s != u {
			t.Errorf("share group %d uuid attribute %q", i, s)
		}
		for _, k := range []string{"model", "memory", "share_memory", "pci_bus_id", "compute_capability"} {
			if g.Attributes[k] == nil {
				t.Errorf("share group lacks attribute %q", k)
			}
		}
		names[g.Name] = true
	}
	if len(names) != 4 {
		t.Errorf("share group names not distinct: %v", names)
	}
	// Every group passes Nomad's own validation.
	for _, g := range groups {
		if err := g.Validate(); err != nil {
			t.Error(err)
		}
	}
}

func TestNothingAllocatableBeforeNomadIsRead(t *testing.T) {
	f := newFakeNomad(t)
	f.setDown(true)
	p := newPlugin(t, f, nil)
	cycle(p, f)
	if got := fmt.Sprint(families(p)); got != "[none none none none]" {
		t.Fatalf("families = %s", got)
	}
	desc := p.pub.current()[0].Devices[0].HealthDesc
	if !contains(desc, "waiting to read GPU usage from the Nomad API") {
		t.Errorf("HealthDesc = %q", desc)
	}
	f.setDown(false)
	cycle(p, f)
	if got := fmt.Sprint(families(p)); got != "[none none none none]" {
		t.Fatalf("families while settling = %s", got)
	}
	cycle(p, f)
	if got := fmt.Sprint(families(p)); got != "[whole whole whole share]" {
		t.Fatalf("families after Nomad answers = %s", got)
	}
}

func TestPartitionFollowsHoldings(t *testing.T) {
	f := newFakeNomad(t)
	p := newPlugin(t, f, nil)
	u := uuids(p)
	cycle(p, f)
	steps := []struct {
		do   func()
		want string
	}{
		// The landing place fills up: GPU 2 is withdrawn from the whole family...
		{func() { f.place("a1", "gpu-share", shares(u[3], 0, 70)...) }, "[whole whole none share]"},
		// ...the servers see it withdrawn and it settles...
		{func() {}, "[whole whole none share]"},
		// ...nothing landed: it is published as shares.
		{func() {}, "[whole whole share share]"},
		// A whole job takes GPU 0.
		{func() { f.place("a2", "gpu", u[0]) }, "[whole whole share share]"},
		// The share tenant ends: two idle share GPUs, the lower goes whole.
		{func() { f.finish("a1") }, "[whole whole none share]"},
		{func() {}, "[whole whole none share]"},
		{func() {}, "[whole whole whole share]"},
	}
	for i, s := range steps {
		s.do()
		cycle(p, f)
		if got := fmt.Sprint(families(p)); got != s.want {
			t.Fatalf("step %d: families = %s, want %s", i, got, s.want)
		}
	}
}

func TestPlacementRacingASwitchAbortsIt(t *testing.T) {
	f := newFakeNomad(t)
	p := newPlugin(t, f, nil)
	u := uuids(p)
	f.place("a1", "gpu-share", shares(u[3], 0, 70)...)
	cycle(p, f)
	cycle(p, f) // servers see GPU 2 withdrawn; settling until the next read
	if got := fmt.Sprint(families(p)); got != "[whole whole none share]" {
		t.Fatalf("families = %s", got)
	}
	// A whole placement planned before the withdrawal lands on GPU 2.
	f.place("late", "gpu", u[2])
	if _, err := p.Reserve([]string{u[2]}); err != nil {
		t.Fatalf("Reserve of the late whole placement: %v", err)
	}
	// Shares of GPU 2 can no longer be reserved.
	if _, err := p.Reserve(shares(u[2], 0, 10)); err == nil || !contains(err.Error(), "held whole") {
		t.Fatalf("Reserve of shares on a GPU held whole: %v", err)
	}
	cycle(p, f)
	// GPU 2 stays whole; share mode still lacks room, so GPU 1 becomes the
	// next landing place.
	if got := fmt.Sprint(families(p)); got != "[whole none whole share]" {
		t.Fatalf("families after the late placement = %s", got)
	}
}

func TestNomadUnreachableKeepsLastState(t *testing.T) {
	f := newFakeNomad(t)
	p := newPlugin(t, f, nil)
	u := uuids(p)
	cycle(p, f)
	f.place("a1", "gpu-share", shares(u[3], 0, 70)...)
	cycle(p, f) // GPU 2 withdrawn
	f.setDown(true)
	for i := 0; i < 3; i++ {
		cycle(p, f)
		if got := fmt.Sprint(families(p)); got != "[whole whole none share]" {
			t.Fatalf("blind cycle %d: families = %s", i, got)
		}
	}
	// Reserve keeps working from cached state while blind.
	if _, err := p.Reserve([]string{u[0]}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Reserve(shares(u[3], 70, 10)); err != nil {
		t.Fatal(err)
	}
	f.setDown(false)
	cycle(p, f)
	cycle(p, f)
	cycle(p, f)
	if got := fmt.Sprint(families(p)); got != "[whole whole share share]" {
		t.Fatalf("after Nomad is back: families = %s", got)
	}
}

func TestLostGPUBecomesUnhealthy(t *testing.T) {
	f := newFakeNomad(t)
	p := newPlugin(t, f, nil)
	cycle(p, f)
	p.hw.simulated().SetLost(1, nvml.ERROR_GPU_IS_LOST)
	cycle(p, f)
	d := p.pub.current()[0].Devices[1]
	if d.Healthy || !contains(d.HealthDesc, "GPU_IS_LOST") {
		t.Fatalf("lost GPU: healthy=%v desc=%q", d.Healthy, d.HealthDesc)
	}
	p.hw.simulated().SetLost(1, nvml.SUCCESS)
	cycle(p, f)
	if got := fmt.Sprint(families(p)); got != "[whole whole whole share]" {
		t.Fatalf("after recovery: %s", got)
	}
}

// TestMIGDevicesAreOffered: a MIG-enabled GPU is offered neither whole
// nor as shares; its MIG devices are, in one group per MIG device name
// with their profile and memory, and Reserve binds them by MIG UUID.
func TestMIGDevicesAreOffered(t *testing.T) {
	f := newFakeNomad(t)
	p := newPlugin(t, f, nil)
	u := uuids(p)
	sim := p.hw.simulated()
	sim.SetMIG(3, true)
	var mig []string
	for _, prof := range []int{nvml.GPU_INSTANCE_PROFILE_1_SLICE, nvml.GPU_INSTANCE_PROFILE_1_SLICE, nvml.GPU_INSTANCE_PROFILE_3_SLICE} {
		id, err := sim.AddMIGDevice(3, prof)
		if err != nil {
			t.Fatal(err)
		}
		mig = append(mig, id)
	}
	cycle(p, f) // GPU 3 leaves the partition; GPU 2 is withdrawn to become the landing place
	cycle(p, f)
	cycle(p, f)
	if got := fmt.Sprint(families(p)); got != "[whole whole share none]" {
		t.Fatalf("families = %s", got)
	}
	byName := map[string]*dev.DeviceGroup{}
	for _, g := range p.pub.current() {
		if err := g.Validate(); err != nil {
			t.Error(err)
		}
		byName[g.Type+"/"+g.Name] = g
		for _, d := range g.Devices {
			if strings.HasPrefix(d.ID, u[3]) {
				t.Errorf("the MIG-enabled GPU is offered as %s in %s/%s", d.ID, g.Type, g.Name)
			}
		}
	}
	small, big := byName["gpu/Mock NVIDIA A100-SXM4-40GB MIG 1g.5gb"], byName["gpu/Mock NVIDIA A100-SXM4-40GB MIG 3g.20gb"]
	if small == nil || big == nil || len(small.Devices) != 2 || len(big.Devices) != 1 || small.Devices[0].ID != mig[0] || !small.Devices[0].Healthy {
		t.Fatalf("MIG groups: %v", byName)
	}
	for k, want := range map[string]string{"mig_profile": "1g.5gb", "sharing": "mig", "model": "Mock NVIDIA A100-SXM4-40GB"} {
		if got, _ := small.Attributes[k].GetString(); got != want {
			t.Errorf("MIG group attribute %s = %q, want %q", k, got, want)
		}
	}
	if mem, _ := small.Attributes["memory"].GetInt(); mem != 4864 {
		t.Errorf("MIG group memory %d MiB", mem)
	}
	// The part of the GPU each is, in shares: 1 and 3 of its 7 slices.
	for g, want := range map[*dev.DeviceGroup]int64{small: 14, big: 42} {
		if got, _ := g.Attributes[vocab.MIGSharesAttr].GetInt(); got != want {
			t.Errorf("%s: %s = %d, want %d", g.Name, vocab.MIGSharesAttr, got, want)
		}
	}

	r, err := p.Reserve([]string{mig[2]})
	if err != nil || r.Envs["NVIDIA_VISIBLE_DEVICES"] != mig[2] || r.Envs["CUDA_VISIBLE_DEVICES"] != mig[2] {
		t.Fatalf("Reserve of a MIG device: %v, %v", r, err)
	}
	for _, req := range [][]string{{u[3]}, shares(u[3], 0, 5)} {
		if _, err := p.Reserve(req); err == nil || !strings.Contains(err.Error(), "has MIG enabled") || !strings.Contains(err.Error(), "MIG 1g.5gb") {
			t.Errorf("Reserve(%s...) of the MIG-enabled GPU: %v", req[0], err)
		}
	}
	// A MIG device is unhealthy with its GPU.
	sim.SetLost(3, nvml.ERROR_GPU_IS_LOST)
	cycle(p, f)
	if _, err := p.Reserve([]string{mig[0]}); err == nil || !strings.Contains(err.Error(), "GPU_IS_LOST") {
		t.Errorf("Reserve of a MIG device of a lost GPU: %v", err)
	}
}

func TestIgnoredGPUs(t *testing.T) {
	f := newFakeNomad(t)
	sim, _ := gpu.NewSimulated(gpu.SimOptions{Preset: "a100", Count: 4})
	ignored := sim.UUIDs()[0]
	p := newPlugin(t, f, func(c *Config) { c.IgnoredGPUIDs = []string{ignored} })
	cycle(p, f)
	for _, u := range uuids(p) {
		if u == ignored {
			t.Fatal("ignored GPU is published")
		}
	}
	if len(uuids(p)) != 3 {
		t.Fatalf("%d GPUs", len(uuids(p)))
	}
}

// TestNVMLInitFailure: a failing NVML is retried and never ends the
// fingerprint stream with an error.
func TestNVMLInitFailure(t *testing.T) {
	f := newFakeNomad(t)
	sim, _ := gpu.NewSimulated(gpu.SimOptions{Preset: "h100", Count: 2})
	sim.SetInitError(nvml.ERROR_LIBRARY_NOT_FOUND)
	p := New(hclog.NewNullLogger())
	p.newLib = func() nvml.Interface { return sim }
	c := DefaultConfig()
	c.NomadAddress, c.NodeID, c.FingerprintPeriod, c.NomadPollPeriod, c.SwitchSettlePeriod = f.URL, fakeNodeID, "100ms", "100ms", "0s"
	if err := p.configure(c); err != nil {
		t.Fatal(err)
	}
	defer p.Shutdown()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch, err := p.Fingerprint(ctx)
	if err != nil {
		t.Fatal(err)
	}
	first := <-ch
	if first.Error != nil || len(first.Devices) != 1 || first.Devices[0].Name != UnavailableGroup ||
		first.Devices[0].Devices[0].Healthy || !contains(first.Devices[0].Devices[0].HealthDesc, "NVML failed to initialize") {
		t.Fatalf("first response: %+v", first)
	}
	if err := first.Devices[0].Validate(); err != nil {
		t.Fatal(err)
	}
	hwErr := p.hw.view().err
	if hwErr == nil || !contains(hwErr.Error(), "libnvidia-ml.so.1 not found") {
		t.Fatalf("recorded error: %v", hwErr)
	}
	sim.SetInitError(nvml.SUCCESS)
	deadline := time.After(10 * time.Second)
	for {
		select {
		case r := <-ch:
			if r.Error != nil {
				t.Fatalf("stream error: %v", r.Error)
			}
			healthy := 0
			for _, g := range r.Devices {
				for _, d := range g.Devices {
					if d.Healthy {
						healthy++
					}
				}
			}
			if healthy == 1+100 { // one whole GPU and one share landing place
				return
			}
		case <-deadline:
			t.Fatal("GPUs never published after NVML healed")
		}
	}
}

// TestStats: statistics carry HashiCorp's nvidia plugin's names and units
// (dashboards built on it keep working), share instances the shares held,
// and MIG devices their memory.
func TestStats(t *testing.T) {
	f := newFakeNomad(t)
	p := newPlugin(t, f, nil)
	u := uuids(p)
	sim := p.hw.simulated()
	sim.SetMIG(0, true)
	mig, _ := sim.AddMIGDevice(0, nvml.GPU_INSTANCE_PROFILE_2_SLICE)
	f.place("a1", "gpu-share", shares(u[3], 0, 30)...)
	cycle(p, f)
	sim.SetUsage(3, 10240, 55)
	sim.SetCorrectedECC(3, nvml.MEMORY_LOCATION_DEVICE_MEMORY, 4)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch, err := p.Stats(ctx, 50*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	r := <-ch
	if r.Error != nil {
		t.Fatal(r.Error)
	}
	groups := map[string]*dev.DeviceGroupStats{}
	for _, g := range r.Groups {
		groups[g.Type+"/"+g.Name] = g
	}
	whole, share := groups["gpu/Mock NVIDIA A100-SXM4-40GB"], groups["gpu-share/"+shareGroupName(p.hw.view().gpus[3].GPU)]
	if whole == nil || len(whole.InstanceStats) != 3 || whole.InstanceStats[u[0]] != nil || share == nil || len(share.InstanceStats) != 100 {
		t.Fatalf("groups: %v", groups)
	}
	for _, st := range []*dev.DeviceStats{whole.InstanceStats[u[3]], share.InstanceStats[u[3]+"-s42"]} {
		if *st.Summary.IntNumeratorVal != 10240 || *st.Summary.IntDenominatorVal != 40960 || st.Summary.Unit != "MiB" {
			t.Errorf("summary %d/%d %s", *st.Summary.IntNumeratorVal, *st.Summary.IntDenominatorVal, st.Summary.Unit)
		}
		a := st.Stats.Attributes
		for name, want := range map[string]int64{
			"GPU utilization": 55, "Memory utilization": 25, "Encoder utilization": 13, "Decoder utilization": 27,
			"Temperature": 59, "Power usage": 345, "Memory state": 10240, "BAR1 buffer state": 2, "ECC memory errors": 4,
			"ECC L1 errors": 0, "ECC L2 errors": 0,
		} {
			if a[name] == nil || a[name].IntNumeratorVal == nil || *a[name].IntNumeratorVal != want {
				t.Errorf("%s = %v, want %d", name, a[name], want)
			}
		}
		if *a["Power usage"].IntDenominatorVal != 400 || a["Power usage"].Unit != "W" || a["Temperature"].Unit != "C" {
			t.Errorf("power %v, temperature %v", a["Power usage"], a["Temperature"])
		}
	}
	if held := share.InstanceStats[u[3]+"-s00"].Stats.Attributes["shares_held"]; held == nil || *held.IntNumeratorVal != 30 || *held.IntDenominatorVal != 100 {
		t.Errorf("shares_held %v", held)
	}
	if whole.InstanceStats[u[3]].Stats.Attributes["shares_held"] != nil {
		t.Error("shares_held on a whole instance")
	}
	m := groups["gpu/Mock NVIDIA A100-SXM4-40GB MIG 2g.10gb"]
	if m == nil || m.InstanceStats[mig] == nil || *m.InstanceStats[mig].Summary.IntDenominatorVal != 9856 {
		t.Fatalf("MIG device stats: %+v", m)
	}
}

func TestFingerprintStreamsChanges(t *testing.T) {
	f := newFakeNomad(t)
	p := newPlugin(t, f, func(c *Config) { c.FingerprintPeriod, c.NomadPollPeriod = "100ms", "100ms" })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch, err := p.Fingerprint(ctx)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.After(10 * time.Second)
	for {
		select {
		case r := <-ch:
			var desc []string
			for _, d := range r.Devices[0].Devices {
				desc = append(desc, fmt.Sprint(d.Healthy))
			}
			if strings.Join(desc, ",") == "true,true,true,false" {
				return
			}
		case <-deadline:
			t.Fatal("no fingerprint with the GPUs published")
		}
	}
}

// TestDemandMovesIdleGPUs: waiting demand read from blocked evaluations
// moves idle GPUs between the families, and each job version is
// read once.
func TestDemandMovesIdleGPUs(t *testing.T) {
	f := newFakeNomad(t)
	p := newPlugin(t, f, nil)
	u := uuids(p)
	cycle(p, f)
	t1 := time.Now()
	steps := []struct {
		do   func()
		want string
	}{
		{func() {}, "[whole whole whole share]"},
		// Three whole jobs run; a fourth waits: the idle landing place,
		// which no share demand needs, goes whole.
		{func() {
			f.place("w0", "gpu", u[0])
			f.place("w1", "gpu", u[1])
			f.place("w2", "gpu", u[2])
			f.block("w3", "gpu", 1, t1)
		}, "[whole whole whole none]"},
		{func() {}, "[whole whole whole none]"},
		{func() {}, "[whole whole whole whole]"},
		{func() { f.unblock("w3"); f.place("w3", "gpu", u[3]) }, "[whole whole whole whole]"},
		// All end; a 50-share tenant on GPU 3 leaves 50 free shares (room):
		// the plain policy keeps no idle share GPU. A 60-share job waits:
		// GPU 2 goes share.
		{func() {
			for _, a := range []string{"w0", "w1", "w2", "w3"} {
				f.finish(a)
			}
			f.place("s50", "gpu-share", shares(u[3], 0, 50)...)
		}, "[whole whole whole share]"},
		{func() { f.block("s60", "gpu-share", 60, t1.Add(time.Second)) }, "[whole whole none share]"},
		{func() {}, "[whole whole none share]"},
		{func() {}, "[whole whole share share]"},
		{func() { f.unblock("s60"); f.place("s60", "gpu-share", shares(u[2], 0, 60)...) }, "[whole whole share share]"},
	}
	for i, s := range steps {
		s.do()
		cycle(p, f)
		if got := fmt.Sprint(families(p)); got != s.want {
			t.Fatalf("step %d: families = %s, want %s", i, got, s.want)
		}
	}
	if f.jobReads != 2 {
		t.Errorf("job specifications read %d times, want 2 (once per job version)", f.jobReads)
	}
}

// TestServedDemandOpensNoOtherGPU: two share jobs wait, one idle GPU is
// opened for both, and they run there; their blocked evaluations are still
// listed for a while (Nomad marks them complete in a later write than the
// plan's, and the plugin reads evaluations apart from allocations). That
// demand is already served here, so no other GPU is opened for shares:
// it would take the idle GPU a guest of dynamic fractions needs.
func TestServedDemandOpensNoOtherGPU(t *testing.T) {
	f := newFakeNomad(t)
	p := newPlugin(t, f, func(c *Config) { c.MinIdleShareGPUs = 0 })
	u := uuids(p)
	t1 := time.Now()
	steps := []struct {
		name string
		do   func()
		want string
	}{
		{"idle", func() {}, "[whole whole whole whole]"},
		{"two notebooks wait", func() {
			f.block("nb-a", "gpu-share", 50, t1)
			f.block("nb-b", "gpu-share", 50, t1.Add(time.Millisecond))
		}, "[whole whole whole none]"},
		{"settling", func() {}, "[whole whole whole none]"},
		{"opened for both", func() {}, "[whole whole whole share]"},
		{"both run there, their evaluations still listed", func() {
			f.placeBy("a1", "nb-a", "gpu-share", shares(u[3], 0, 50)...)
			f.placeBy("b1", "nb-b", "gpu-share", shares(u[3], 50, 50)...)
		}, "[whole whole whole share]"},
		{"still listed", func() {}, "[whole whole whole share]"},
		{"listing caught up", func() { f.unblock("nb-a"); f.unblock("nb-b") }, "[whole whole whole share]"},
	}
	for _, s := range steps {
		s.do()
		cycle(p, f)
		if got := fmt.Sprint(families(p)); got != s.want {
			t.Fatalf("%s: families = %s, want %s", s.name, got, s.want)
		}
	}
}

// TestSettleEndsOnProof: with a settle period that never ends, a switch
// completes as soon as the servers see the GPU withdrawn and no pending or
// blocked evaluation written before could still place the family it
// leaves, in the same loop step; one that could keeps it withdrawn.
func TestSettleEndsOnProof(t *testing.T) {
	tests := []struct {
		name  string
		block func(f *fakeNomad, at time.Time)
		want  string
	}{
		{"only whole demand waits: proven for the share family", func(*fakeNomad, time.Time) {}, "[whole whole whole whole]"},
		{"a share job's evaluation from before may still place: waits", func(f *fakeNomad, at time.Time) {
			f.block("s1", "gpu-share", 100, at.Add(time.Second))
		}, "[whole whole whole none]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeNomad(t)
			f.nodeModify = 1
			p := newPlugin(t, f, func(c *Config) { c.SwitchSettlePeriod = "1h" })
			u := uuids(p)
			if got := fmt.Sprint(families(p)); got != "[whole whole whole share]" {
				t.Fatalf("after boot (proven, no evaluation): %s", got)
			}
			t1 := time.Now()
			f.place("w0", "gpu", u[0])
			f.place("w1", "gpu", u[1])
			f.place("w2", "gpu", u[2])
			f.block("w3", "gpu", 1, t1)
			tt.block(f, t1)
			cycle(p, f) // withdrawn; the fake servers see it at once
			if got := fmt.Sprint(families(p)); got != "[whole whole whole none]" {
				t.Fatalf("families %s, want the landing place withdrawn", got)
			}
			cycle(p, f)
			if got := fmt.Sprint(families(p)); got != tt.want {
				t.Fatalf("families %s, want %s", got, tt.want)
			}
		})
	}
}

// TestUnreadableNameKeepsAGroupName: a GPU whose name NVML cannot read
// is unhealthy with that reason, and its whole device group still has a
// name: the model it had, or UnknownModel when it never had one (Nomad
// stops a plugin for good on a group without a name).
func TestUnreadableNameKeepsAGroupName(t *testing.T) {
	f := newFakeNomad(t)
	p := newPlugin(t, f, nil)
	sim := p.hw.simulated()
	sim.SetNameError(1, nvml.ERROR_UNKNOWN)
	cycle(p, f)
	w := p.pub.current()[0]
	if w.Name != "Mock NVIDIA A100-SXM4-40GB" || w.Devices[1].Healthy || !contains(w.Devices[1].HealthDesc, "read name: ERROR_UNKNOWN") {
		t.Fatalf("known GPU with an unreadable name: group %q, %+v", w.Name, w.Devices[1])
	}

	// A plugin that starts while the name cannot be read.
	q := newPlugin(t, f, func(c *Config) { c.SimulatedSeed = "other" })
	q.hw.simulated().SetNameError(2, nvml.ERROR_UNKNOWN)
	q.hw.reset(hwConfig{src: gpu.NewSource(q.hw.simulated()), sim: q.hw.simulated()})
	cycle(q, f)
	var names []string
	for _, g := range q.pub.current() {
		if err := g.Validate(); err != nil {
			t.Errorf("group %q: %v", g.Name, err)
		}
		names = append(names, g.Name)
	}
	if !strings.Contains(strings.Join(names, ","), UnknownModel) {
		t.Errorf("groups %v lack %q", names, UnknownModel)
	}
}

// TestStatsNotAvailable: what NVML does not report is "N/A", as in
// HashiCorp's plugin, never a zero.
func TestStatsNotAvailable(t *testing.T) {
	st := gpuStats(gpu.Stats{MemUsedMiB: 1, MemTotalMiB: 2}, 0, time.Now())
	for name, v := range st.Stats.Attributes {
		if name == StatMemoryState {
			continue
		}
		if v.StringVal == nil || *v.StringVal != "N/A" || v.IntNumeratorVal != nil {
			t.Errorf("%s = %+v, want N/A", name, v)
		}
	}
	if len(st.Stats.Attributes) != 11 {
		t.Errorf("%d statistics, want HashiCorp's 11", len(st.Stats.Attributes))
	}
}

// TestWarnsAboutAnotherNvidiaPlugin: when another plugin (HashiCorp's
// nvidia plugin) publishes nvidia groups on the node, the plugin warns
// once, naming the groups and the fix.
func TestWarnsAboutAnotherNvidiaPlugin(t *testing.T) {
	f := newFakeNomad(t)
	p := newPlugin(t, f, nil)
	var logs strings.Builder
	p.logger = hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Warn})
	cycle(p, f)
	if logs.Len() != 0 {
		t.Fatalf("warnings without another plugin: %s", logs.String())
	}
	f.mu.Lock()
	f.foreign = []*api.NodeDeviceResource{{Vendor: "nvidia", Type: "gpu", Name: "Mock NVIDIA A100-SXM4-40GB"}}
	f.mu.Unlock()
	cycle(p, f)
	cycle(p, f)
	out := logs.String()
	if strings.Count(out, "another device plugin publishes nvidia device groups") != 1 ||
		!strings.Contains(out, "nvidia/gpu/Mock NVIDIA A100-SXM4-40GB") || !strings.Contains(out, `plugin "nvidia-gpu"`) {
		t.Fatalf("warnings: %s", out)
	}
}

// TestIsolationAttribute: share groups say whether their limits are
// enforced (isolation = "none" without MPS), MIG groups that the hardware
// isolates, and a MIG device's task learns it too.
func TestIsolationAttribute(t *testing.T) {
	f := newFakeNomad(t)
	p := newPlugin(t, f, nil)
	sim := p.hw.simulated()
	sim.SetMIG(0, true)
	mig, _ := sim.AddMIGDevice(0, nvml.GPU_INSTANCE_PROFILE_1_SLICE)
	cycle(p, f)
	for _, g := range p.pub.current() {
		sharing, _ := g.Attributes["sharing"].GetString()
		iso := ""
		if a := g.Attributes["isolation"]; a != nil {
			iso, _ = a.GetString()
		}
		want := map[string]string{"share": "none", "mig": "mig", "whole": ""}[sharing]
		if iso != want {
			t.Errorf("group %s/%s (%s): isolation %q, want %q", g.Type, g.Name, sharing, iso, want)
		}
	}
	r, err := p.Reserve([]string{mig})
	if err != nil || r.Envs["GPUSHARE_ISOLATION"] != "mig" {
		t.Errorf("MIG device: %v, %v", r, err)
	}
}
