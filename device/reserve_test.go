package device

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/gpushare/nomad-gpushare/internal/testcluster"
	"github.com/gpushare/nomad-gpushare/vocab"
	dev "github.com/hashicorp/nomad/plugins/device"
)

func TestReserve(t *testing.T) {
	f := newFakeNomad(t)
	p := newPlugin(t, f, nil)
	u := uuids(p)
	// GPU 0 held whole, GPU 3 has 30 shares held.
	f.place("w", "gpu", u[0])
	f.place("s", "gpu-share", shares(u[3], 0, 30)...)
	cycle(p, f)

	tests := []struct {
		name    string
		ids     []string
		wantEnv map[string]string
		wantErr string // substrings separated by "|"
	}{
		{name: "nothing", ids: nil, wantEnv: map[string]string{}},
		{name: "one whole GPU", ids: []string{u[1]}, wantEnv: map[string]string{
			"NVIDIA_VISIBLE_DEVICES": u[1], "CUDA_VISIBLE_DEVICES": u[1]}},
		{name: "two whole GPUs", ids: []string{u[1], u[2]}, wantEnv: map[string]string{
			"NVIDIA_VISIBLE_DEVICES": u[1] + "," + u[2]}},
		{name: "25 shares", ids: shares(u[3], 30, 25), wantEnv: map[string]string{
			"NVIDIA_VISIBLE_DEVICES": u[3], "CUDA_VISIBLE_DEVICES": u[3],
			"GPUSHARE_MEMORY_LIMIT_MIB": "10240", "GPUSHARE_FRACTION": "0.25",
			"TF_FORCE_GPU_ALLOW_GROWTH": "true", "XLA_PYTHON_CLIENT_PREALLOCATE": "false",
			"XLA_PYTHON_CLIENT_MEM_FRACTION": "0.25"}},
		{name: "one share", ids: shares(u[3], 99, 1), wantEnv: map[string]string{
			"GPUSHARE_FRACTION": "0.01", "GPUSHARE_MEMORY_LIMIT_MIB": "409"}},
		{name: "unknown IDs", ids: []string{"GPU-nope", u[1]}, wantErr: "unknown device IDs: GPU-nope"},
		{name: "unknown share", ids: []string{"GPU-nope-s01"}, wantErr: "unknown device IDs: GPU-nope-s01"},
		{name: "malformed", ids: []string{"a b"}, wantErr: `unknown device IDs: "a b"`},
		{name: "whole and share mixed", ids: []string{u[1], u[3] + "-s50"}, wantErr: "mixes whole GPUs (" + u[1] + ") and GPU shares (" + u[3] + "-s50)"},
		{name: "shares of two GPUs", ids: []string{u[2] + "-s01", u[3] + "-s50"}, wantErr: "must come from one GPU, got |" + u[2] + ": " + u[2] + "-s01|" + u[3] + ": " + u[3] + "-s50"},
		{name: "duplicate", ids: []string{u[1], u[1]}, wantErr: "requested twice"},
		{name: "whole GPU with share tenants", ids: []string{u[3]}, wantErr: "refusing whole GPU " + u[3] + ": it has share tenants (30 shares held)"},
		{name: "shares of a GPU held whole", ids: shares(u[0], 0, 2), wantErr: "refusing shares " + u[0] + "-s00, " + u[0] + "-s01: GPU " + u[0] + " is held whole"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := p.Reserve(tt.ids)
			if tt.wantErr != "" {
				if err == nil {
					t.Fatalf("no error, want %q", tt.wantErr)
				}
				for _, w := range strings.Split(tt.wantErr, "|") {
					if !strings.Contains(err.Error(), w) {
						t.Fatalf("err = %v, want %q", err, w)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for k, v := range tt.wantEnv {
				if r.Envs[k] != v {
					t.Errorf("%s = %q, want %q", k, r.Envs[k], v)
				}
			}
			if len(tt.wantEnv) == 0 && len(r.Envs) != 0 {
				t.Errorf("envs %v", r.Envs)
			}
			if _, mps := r.Envs["CUDA_MPS_PIPE_DIRECTORY"]; mps || len(r.Mounts) != 0 {
				t.Errorf("MPS settings without MPS: %v %v", r.Envs, r.Mounts)
			}
			if iso := r.Envs["GPUSHARE_ISOLATION"]; strings.Contains(tt.name, "share") && iso != "none" {
				t.Errorf("GPUSHARE_ISOLATION = %q without MPS, want none", iso)
			}
		})
	}
}

// serveMPS listens on the MPS control socket of the pipe directory, as
// nvidia-cuda-mps-control -d does, until the test ends or stop is called.
func serveMPS(t *testing.T, dir string) (stop func()) {
	t.Helper()
	l, err := net.Listen("unixpacket", filepath.Join(dir, "control"))
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	t.Cleanup(func() { l.Close() })
	return func() { l.Close() }
}

func TestReserveMPS(t *testing.T) {
	dir := t.TempDir()
	serveMPS(t, dir)
	f := newFakeNomad(t)
	p := newPlugin(t, f, func(c *Config) { c.MPSEnabled, c.MPSPipeDirectory = true, dir })
	cycle(p, f)
	u := uuids(p)
	r, err := p.Reserve(shares(u[3], 0, 40))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"CUDA_MPS_PIPE_DIRECTORY":           dir,
		"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT":  u[3] + "=16384M",
		"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "40",
		"GPUSHARE_FRACTION":                 "0.4",
		"GPUSHARE_ISOLATION":                "mps",
	}
	for k, v := range want {
		if r.Envs[k] != v {
			t.Errorf("%s = %q, want %q", k, r.Envs[k], v)
		}
	}
	if len(r.Mounts) != 1 || r.Mounts[0].HostPath != dir || r.Mounts[0].TaskPath != dir {
		t.Errorf("mounts %+v", r.Mounts)
	}
	// Whole GPUs get no MPS limits.
	r, err = p.Reserve([]string{u[0]})
	if err != nil || r.Envs["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] != "" || r.Envs["GPUSHARE_ISOLATION"] != "" {
		t.Errorf("whole GPU with MPS: %v %v", r, err)
	}
}

// TestMPSDaemonDown: with mps_enabled and no MPS control daemon answering,
// CUDA would run the shares without MPS and without limits: the share
// family is unhealthy with the reason, and Reserve refuses shares, until
// the daemon answers.
func TestMPSDaemonDown(t *testing.T) {
	dir := t.TempDir()
	serveMPS(t, dir)()
	f := newFakeNomad(t)
	p := newPlugin(t, f, func(c *Config) { c.MPSEnabled, c.MPSPipeDirectory = true, dir })
	u := uuids(p)
	cycle(p, f)
	sg := p.pub.current()[4]
	if iso, _ := sg.Attributes["isolation"].GetString(); iso != "mps" || sg.Devices[0].Healthy ||
		!strings.Contains(sg.Devices[0].HealthDesc, "no MPS control daemon answers at "+filepath.Join(dir, "control")) {
		t.Fatalf("share group while MPS is down: isolation %q, %+v", iso, sg.Devices[0])
	}
	if _, err := p.Reserve(shares(u[3], 0, 10)); err == nil || !strings.Contains(err.Error(), "nvidia-cuda-mps-control -d") {
		t.Fatalf("shares while MPS is down: %v", err)
	}
	if _, err := p.Reserve([]string{u[0]}); err != nil {
		t.Errorf("a whole GPU while MPS is down: %v", err)
	}
	os.Remove(filepath.Join(dir, "control"))
	serveMPS(t, dir)
	cycle(p, f)
	if _, err := p.Reserve(shares(u[3], 0, 10)); err != nil {
		t.Fatalf("shares once MPS answers: %v", err)
	}
}

// TestReserveBetweenReads: two reservations between two Nomad reads cannot
// give one GPU both ways; once a read accounts for them, the record goes.
func TestReserveBetweenReads(t *testing.T) {
	f := newFakeNomad(t)
	p := newPlugin(t, f, nil)
	cycle(p, f)
	u := uuids(p)
	if _, err := p.Reserve([]string{u[2]}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Reserve(shares(u[2], 0, 5)); err == nil || !strings.Contains(err.Error(), "held whole") {
		t.Fatalf("shares after a whole reservation: %v", err)
	}
	if _, err := p.Reserve(shares(u[1], 0, 5)); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Reserve([]string{u[1]}); err == nil || !strings.Contains(err.Error(), "share tenants") {
		t.Fatalf("whole after a share reservation: %v", err)
	}
	// The next read shows neither allocation (they ended): both are free.
	p.observe(context.Background(), loopStateOf(p))
	if _, err := p.Reserve(shares(u[2], 0, 5)); err != nil {
		t.Fatal(err)
	}
}

func TestReserveBeforeFingerprint(t *testing.T) {
	p := New(nil)
	p.reserveWait = 100 * time.Millisecond
	if _, err := p.Reserve([]string{"GPU-x"}); err == nil {
		t.Fatal("Reserve before any fingerprint succeeded")
	}
}

// startPlugin configures a plugin like newPlugin and starts its loop, as
// Nomad does when it launches the plugin (SetConfig, then Fingerprint).
func startPlugin(t *testing.T, f *fakeNomad) *Plugin {
	t.Helper()
	c := DefaultConfig()
	c.Backend, c.SimulatedPreset, c.SimulatedCount = BackendSimulated, "a100", 4
	c.NomadAddress, c.NodeID, c.SwitchSettlePeriod = f.URL, fakeNodeID, "0s"
	c.FingerprintPeriod, c.NomadPollPeriod = "100ms", "100ms"
	p := New(nil)
	if err := p.configure(c); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Shutdown)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if _, err := p.Fingerprint(ctx); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestReserveAfterRestartWaitsForTheFirstRead: the plugin restarts (a
// crash, Nomad relaunches it) while GPU 0 is held whole; shares of GPU 0
// are asked for at once, before it has read Nomad. Reserve waits for the
// first read and refuses; it never takes "not read yet" for "free".
func TestReserveAfterRestartWaitsForTheFirstRead(t *testing.T) {
	f := newFakeNomad(t)
	old := newPlugin(t, f, nil)
	u := uuids(old)
	f.place("w", "gpu", u[0])
	cycle(old, f)
	old.Shutdown()

	f.setDown(true) // the restarted plugin's first reads fail...
	p := startPlugin(t, f)
	refused := make(chan error, 1)
	go func() {
		_, err := p.Reserve(shares(u[0], 0, 10))
		refused <- err
	}()
	// Several reads of Nomad fail while Reserve waits.
	testcluster.Eventually(t, ReserveWait/2, func() error {
		select {
		case err := <-refused:
			t.Fatalf("Reserve answered before any read of Nomad: %v", err)
		default:
		}
		if n := f.refusedRequests(); n < 6 {
			return fmt.Errorf("%d requests to Nomad failed", n)
		}
		return nil
	})
	f.setDown(false) // ...then Nomad answers.
	select {
	case err := <-refused:
		if err == nil || !strings.Contains(err.Error(), "held whole") {
			t.Fatalf("shares of a GPU held whole after a restart: %v", err)
		}
	case <-time.After(ReserveWait):
		t.Fatal("Reserve still waiting after Nomad answered")
	}
}

// TestReserveGivesUpWithoutARead: when Nomad does not answer within
// ReserveWait, Reserve says what it waited for and why it got nothing.
func TestReserveGivesUpWithoutARead(t *testing.T) {
	f := newFakeNomad(t)
	f.setDown(true)
	p := startPlugin(t, f)
	p.reserveWait = 500 * time.Millisecond
	_, err := p.Reserve([]string{"GPU-x"})
	for _, w := range []string{"has not read this node's allocations from the Nomad API", "waited 500ms", "last attempt", "503"} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Fatalf("error %v lacks %q", err, w)
		}
	}
}

// TestReserveRefusesUnhealthyGPUs: a lost GPU is refused with the reason.
func TestReserveRefusesUnhealthyGPUs(t *testing.T) {
	f := newFakeNomad(t)
	p := newPlugin(t, f, nil)
	u := uuids(p)
	p.hw.simulated().SetLost(0, nvml.ERROR_GPU_IS_LOST)
	p.hw.simulated().SetLost(3, nvml.ERROR_GPU_IS_LOST)
	cycle(p, f)
	for _, ids := range [][]string{{u[0]}, shares(u[3], 0, 5)} {
		_, err := p.Reserve(ids)
		if err == nil || !strings.Contains(err.Error(), "is unhealthy") || !strings.Contains(err.Error(), "ERROR_GPU_IS_LOST") {
			t.Errorf("Reserve(%s...) of a lost GPU: %v", ids[0], err)
		}
	}
	if _, err := p.Reserve([]string{u[1]}); err != nil {
		t.Errorf("healthy GPU: %v", err)
	}
}

// TestReserveWhileAllocationsMayBeHidden: with a token that cannot read
// every namespace, a GPU that looks idle may be held: nothing switches,
// and Reserve accepts a GPU only in the family it is offered in now.
func TestReserveWhileAllocationsMayBeHidden(t *testing.T) {
	f := newFakeNomad(t)
	first := newPlugin(t, f, nil)
	cycle(first, f)
	first.Shutdown()
	// The plugin restarts with a token that reads one namespace: it keeps
	// what the servers publish.
	f.setPolicy(`namespace "default" { policy = "read" }`)
	p := newPlugin(t, f, nil)
	u := uuids(p)
	if got := fmt.Sprint(families(p)); got != "[whole whole whole share]" {
		t.Fatalf("families after a restart with a narrow token = %s", got)
	}
	// GPUs 0 and 1 are held whole by visible jobs, GPU 3's landing place
	// fills up: a complete view would switch GPU 2, which looks idle, to
	// shares; it may be held in a namespace the token cannot read.
	f.place("w0", "gpu", u[0])
	f.place("w1", "gpu", u[1])
	f.place("s", "gpu-share", shares(u[3], 0, 70)...)
	for i := 0; i < 3; i++ {
		cycle(p, f)
		if got := fmt.Sprint(families(p)); got != "[whole whole whole share]" {
			t.Fatalf("cycle %d with a narrow token: families = %s", i, got)
		}
	}
	_, err := p.Reserve(shares(u[2], 0, 10))
	for _, w := range []string{"refusing shares of GPU " + u[2], "not offered as share now", `no namespace "*" rule`, "nomad-gpushare-plugin.policy.hcl"} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Fatalf("shares of a whole GPU while allocations may be hidden: %v lacks %q", err, w)
		}
	}
	if _, err := p.Reserve([]string{u[2]}); err != nil {
		t.Errorf("the whole GPU offered whole: %v", err)
	}
	if _, err := p.Reserve(shares(u[3], 70, 10)); err != nil {
		t.Errorf("shares of the GPU offered as shares: %v", err)
	}
	// The policy is fixed (an incomplete verdict is checked on every
	// read): GPU 2 is switched.
	f.setPolicy(`namespace "*" { capabilities = ["read-job"] }`)
	cycle(p, f)
	cycle(p, f)
	cycle(p, f)
	if got := fmt.Sprint(families(p)); got != "[whole whole share share]" {
		t.Fatalf("families once the token reads every namespace = %s", got)
	}
}

// FuzzReserve: no input makes Reserve panic, on GPUs in both families, a
// MIG-enabled GPU and its MIG device.
func FuzzReserve(f *testing.F) {
	fake := newFakeNomad(f)
	p := newPlugin(f, fake, nil)
	p.hw.simulated().SetMIG(1, true)
	mig, err := p.hw.simulated().AddMIGDevice(1, nvml.GPU_INSTANCE_PROFILE_1_SLICE)
	if err != nil {
		f.Fatal(err)
	}
	cycle(p, fake)
	u := append(uuids(p), mig)
	f.Add("GPU-x", "GPU-x-s01", 2)
	f.Add("", "-s", 0)
	f.Add(mig, mig+"-s00", 4)
	f.Fuzz(func(t *testing.T, a, b string, n int) {
		in := []string{a, b}
		if n >= 0 && n < len(u) {
			in = append(in, u[n], u[n]+"-s"+a)
		}
		_, _ = p.Reserve(in) // must never panic
	})
}

// TestCoarseShares: with shares_per_gpu = 4 a share group publishes 4
// instances of 25 units each, says so in its attributes, and a task given
// 2 of them gets half the GPU; what an allocation holds counts in units,
// so a GPU with one such tenant has 75 units left.
func TestCoarseShares(t *testing.T) {
	f := newFakeNomad(t)
	p := newPlugin(t, f, func(c *Config) { c.SharesPerGPU = 4 })
	u := uuids(p)
	cycle(p, f)
	var sg *dev.DeviceGroup
	for _, g := range p.pub.current() {
		if g.Type == vocab.TypeShare && len(g.Devices) > 0 && strings.HasPrefix(g.Devices[0].ID, u[3]) {
			sg = g
		}
	}
	if sg == nil {
		t.Fatalf("no share group for GPU %s", u[3])
	}
	if len(sg.Devices) != 4 || sg.Devices[3].ID != u[3]+"-u25-s03" {
		t.Fatalf("share group has %d instances (last %s), want 4 ending in %s-u25-s03", len(sg.Devices), sg.Devices[len(sg.Devices)-1].ID, u[3])
	}
	if a := sg.Attributes[vocab.SharesAttr]; a == nil || a.Int == nil || *a.Int != 4 {
		t.Fatalf("%s attribute = %v, want 4", vocab.SharesAttr, a)
	}
	f.place("s", "gpu-share", vocab.ShareOf(u[3], 0, 4))
	cycle(p, f)
	r, err := p.Reserve([]string{vocab.ShareOf(u[3], 1, 4), vocab.ShareOf(u[3], 2, 4)})
	if err != nil {
		t.Fatal(err)
	}
	if got := r.Envs["GPUSHARE_FRACTION"]; got != "0.5" {
		t.Errorf("GPUSHARE_FRACTION = %q, want 0.5", got)
	}
	if got := p.holdings.current()[u[3]].ShareUnits; got != 25 {
		t.Errorf("units held on GPU %s = %d, want 25 (one instance of 25)", u[3], got)
	}
}
