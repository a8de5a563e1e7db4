package device

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpushare/nomad-gpushare/device/dynamic"
	"github.com/gpushare/nomad-gpushare/device/gpu/simproc"
	"github.com/gpushare/nomad-gpushare/device/tenants"
	"github.com/gpushare/nomad-gpushare/internal/testcluster"
	"github.com/gpushare/nomad-gpushare/vocab"
	"github.com/hashicorp/nomad/api"
)

// Allocation IDs of the tests (the environment parser wants UUIDs).
const (
	allocA = "aaaaaaaa-0000-4000-8000-000000000001"
	allocB = "bbbbbbbb-0000-4000-8000-000000000002"
)

// stopAlloc marks an allocation stopped by the API: desired status stop,
// as Nomad would until the client has killed it. f.mu must be held.
func (f *fakeNomad) stopAlloc(id string) {
	f.stopped = append(f.stopped, id)
	for _, a := range f.allocs {
		if a.ID == id {
			a.DesiredStatus = api.AllocDesiredStatusStop
		}
	}
}

// stops returns the allocations stopped through the API.
func (f *fakeNomad) stops() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.stopped...)
}

// placeTenant adds a running allocation of job (namespace "default") whose
// task "main" holds the device IDs, with gpushare_limit in its task meta
// when limit is not empty.
func (f *fakeNomad) placeTenant(allocID, job, limit, typ string, deviceIDs ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	group := "main"
	task := &api.Task{Name: "main"}
	if limit != "" {
		task.Meta = map[string]string{vocab.LimitMetaKey: limit}
	}
	f.allocs = append(f.allocs, &api.Allocation{
		ID: allocID, Namespace: "default", JobID: job, TaskGroup: group, ClientStatus: api.AllocClientStatusRunning, DesiredStatus: api.AllocDesiredStatusRun,
		CreateIndex: uint64(len(f.allocs) + 1), CreateTime: time.Now().UnixNano(),
		Job: &api.Job{ID: &job, TaskGroups: []*api.TaskGroup{{Name: &group, Tasks: []*api.Task{task}}}},
		AllocatedResources: &api.AllocatedResources{Tasks: map[string]*api.AllocatedTaskResources{
			"main": {Devices: []*api.AllocatedDeviceResource{{Vendor: "nvidia", Type: typ, Name: "x", DeviceIDs: deviceIDs}}},
		}},
	})
}

// simProcess is a real process that the simulated backend reports as a
// GPU process of an allocation's task "main" ("" for none).
type simProcess struct {
	cmd  *exec.Cmd
	done chan error
}

// startSim starts a process of allocID on gpu using mib, registered in dir.
func startSim(t *testing.T, dir, allocID, gpu string, mib uint64) *simProcess {
	t.Helper()
	cmd := exec.Command("sleep", "600")
	if allocID != "" {
		cmd.Env = []string{"NOMAD_ALLOC_ID=" + allocID, "NOMAD_TASK_NAME=main", "NOMAD_NAMESPACE=default"}
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sp := &simProcess{cmd: cmd, done: make(chan error, 1)}
	go func() { sp.done <- cmd.Wait() }()
	t.Cleanup(func() { cmd.Process.Kill(); <-sp.done; sp.done <- nil })
	// Until exec, the child is a copy of this test with its environment,
	// and in the middle of exec its environment is empty: a real GPU
	// process is one only once it runs its own program in its own
	// environment.
	testcluster.Eventually(t, 10*time.Second, func() error {
		pid := cmd.Process.Pid
		exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
		if err != nil || filepath.Base(exe) != "sleep" {
			return fmt.Errorf("process %d has not run sleep yet", pid)
		}
		env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
		if err != nil || tenants.ParseEnviron(env).AllocID != allocID {
			return fmt.Errorf("process %d has not laid out its environment yet", pid)
		}
		return nil
	})
	start, err := simproc.StartTicks(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	if err := simproc.Write(dir, simproc.State{PID: cmd.Process.Pid, StartTicks: start, GPU: gpu, UsedMiB: mib}); err != nil {
		t.Fatal(err)
	}
	return sp
}

// killed reports whether the process was killed by SIGKILL, waiting for it
// at most a few seconds.
func (sp *simProcess) killed(t *testing.T) bool {
	t.Helper()
	select {
	case err := <-sp.done:
		sp.done <- err
		var ex *exec.ExitError
		return errors.As(err, &ex) && ex.Sys().(syscall.WaitStatus).Signal() == syscall.SIGKILL
	case <-time.After(5 * time.Second):
		return false
	}
}

// alive reports whether the process still runs.
func (sp *simProcess) alive() bool {
	select {
	case err := <-sp.done:
		sp.done <- err
		return false
	default:
		return true
	}
}

// newDynamicPlugin is newPlugin on 4 simulated A100 40GB GPUs with a
// simulated process directory.
func newDynamicPlugin(t *testing.T, f *fakeNomad, mod func(*Config)) (*Plugin, string) {
	t.Helper()
	dir := t.TempDir()
	p := newPlugin(t, f, func(c *Config) {
		c.SimulatedProcessDir = dir
		if mod != nil {
			mod(c)
		}
	})
	return p, dir
}

func reserveOK(t *testing.T, p *Plugin, deviceIDs []string) map[string]string {
	t.Helper()
	r, err := p.Reserve(deviceIDs)
	if err != nil {
		t.Fatalf("Reserve: %v", err)
	}
	return r.Envs
}

func TestReserveTellsRequestAndLimit(t *testing.T) {
	mps := t.TempDir()
	serveMPS(t, mps)
	f := newFakeNomad(t)
	p, _ := newDynamicPlugin(t, f, func(c *Config) { c.MPSEnabled, c.MPSPipeDirectory = true, mps })
	u := uuids(p)
	f.placeTenant(allocA, "nb", "0.75", "gpu-share", shares(u[3], 0, 25)...)
	cycle(p, f)
	env := reserveOK(t, p, shares(u[3], 0, 25))
	want := map[string]string{
		"NVIDIA_VISIBLE_DEVICES": u[3], "GPUSHARE_HOME_GPU": u[3],
		"GPUSHARE_FRACTION": "0.25", "GPUSHARE_LIMIT_FRACTION": "0.75",
		"GPUSHARE_REQUEST_MIB": "10240", "GPUSHARE_LIMIT_MIB": "30720", "GPUSHARE_MEMORY_LIMIT_MIB": "30720",
		"XLA_PYTHON_CLIENT_MEM_FRACTION":   "0.75",
		"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": u[3] + "=30720M", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "75",
	}
	for k, v := range want {
		if env[k] != v {
			t.Errorf("%s = %q, want %q", k, env[k], v)
		}
	}
}

func TestReserveRefusesALimitThatMakesNoSense(t *testing.T) {
	f := newFakeNomad(t)
	p, _ := newDynamicPlugin(t, f, nil)
	u := uuids(p)
	f.placeTenant(allocA, "low", "0.2", "gpu-share", shares(u[3], 0, 25)...)
	f.placeTenant(allocB, "words", "most of it", "gpu-share", shares(u[3], 25, 10)...)
	cycle(p, f)
	for _, c := range []struct {
		ids  []string
		want []string
	}{
		{shares(u[3], 0, 25), []string{`task "main" of job "low"`, `gpushare_limit = "0.2" is below the task's request of 0.25 GPU`, `set it to at least "0.25"`}},
		{shares(u[3], 25, 10), []string{`job "words"`, `gpushare_limit = "most of it" is not a fraction of a GPU`, `"0.75"`}},
	} {
		_, err := p.Reserve(c.ids)
		for _, w := range c.want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("Reserve: %v, want %q", err, w)
			}
		}
	}
}

// twoBurstable is a dynamic plugin with guest_move_timeout moveTimeout
// where two burstable tenants (limit 1.0) of half a GPU each are listed on
// the share landing place u[3] (u[0..2] are whole).
func twoBurstable(t *testing.T, moveTimeout string) (f *fakeNomad, p *Plugin, dir string, u []string) {
	t.Helper()
	f = newFakeNomad(t)
	p, dir = newDynamicPlugin(t, f, func(c *Config) { c.GuestMoveTimeout = moveTimeout })
	u = uuids(p)
	f.placeTenant(allocA, "nb-a", "1.0", "gpu-share", shares(u[3], 0, 50)...)
	f.placeTenant(allocB, "nb-b", "1.0", "gpu-share", shares(u[3], 50, 50)...)
	cycle(p, f)
	return f, p, dir, u
}

func TestBurstableTenantSpreadsAndMovesBackForAWholeBinding(t *testing.T) {
	f, p, dir, u := twoBurstable(t, "4s")
	// Both are listed on u[3]: the first bound spreads to the lowest idle
	// whole GPU, the second is then alone at home.
	env := reserveOK(t, p, shares(u[3], 0, 50))
	if env["NVIDIA_VISIBLE_DEVICES"] != u[0] || env["GPUSHARE_HOME_GPU"] != u[3] {
		t.Fatalf("the first tenant runs on %s (home %s), want a guest on the idle whole GPU %s", env["NVIDIA_VISIBLE_DEVICES"], env["GPUSHARE_HOME_GPU"], u[0])
	}
	if env := reserveOK(t, p, shares(u[3], 50, 50)); env["NVIDIA_VISIBLE_DEVICES"] != u[3] {
		t.Fatalf("the second tenant, alone on its home, runs on %s", env["NVIDIA_VISIBLE_DEVICES"])
	}
	if fams := families(p); fams[0] != "whole" {
		t.Fatalf("the host is published %s, want whole (Nomad sees it free)", fams[0])
	}
	guest := startSim(t, dir, allocA, u[0], 30000)
	p.hw.simulated().ReadProcessesAgain()

	// Nomad binds the host whole: the guest's allocation is stopped, and
	// the binding returns once its process is gone (here: killed by the
	// plugin half-way through the bound, as the fake client never stops
	// it).
	start := time.Now()
	reserveOK(t, p, []string{u[0]})
	if got := f.stops(); len(got) != 1 || got[0] != allocA {
		t.Errorf("allocations stopped: %v, want the guest %s", got, allocA)
	}
	if !guest.killed(t) {
		t.Error("the whole binding returned while the guest's process runs on its GPU")
	}
	t.Logf("whole binding returned %s after it was asked for", time.Since(start).Round(time.Millisecond))
}

func TestAGuestMovesWhenItsHostIsSwitchedToShares(t *testing.T) {
	f, p, dir, u := twoBurstable(t, "2s")
	if env := reserveOK(t, p, shares(u[3], 0, 50)); env["NVIDIA_VISIBLE_DEVICES"] != u[0] {
		t.Fatalf("want a guest on %s, got %s", u[0], env["NVIDIA_VISIBLE_DEVICES"])
	}
	guest := startSim(t, dir, allocA, u[0], 30000)
	// Three share jobs that fit no shared GPU: every idle GPU is opened
	// for shares, the guest's host last.
	for _, j := range []string{"s1", "s2", "s3"} {
		f.block(j, "gpu-share", 60, time.Now())
	}
	cycle(p, f)
	monitorNow(p) // moves the guest in the background
	testcluster.Eventually(t, 10*time.Second, func() error {
		if got := f.stops(); len(got) != 1 || got[0] != allocA {
			return fmt.Errorf("allocations stopped %v, want the guest %s once its host leaves the whole family", got, allocA)
		}
		return nil
	})
	for i := 0; i < 5; i++ {
		cycle(p, f)
	}
	if fams := families(p); fams[0] != "none" {
		t.Errorf("the host's switch completed while its guest still runs there: %v", fams)
	}
	// The fake client never stops the guest's task: half-way through
	// guest_move_timeout its processes are killed, and the switch ends.
	testcluster.Eventually(t, 10*time.Second, func() error {
		monitorNow(p)
		if guest.alive() {
			return fmt.Errorf("the guest still runs on its host")
		}
		return nil
	})
	if !guest.killed(t) {
		t.Fatal("the guest was not killed")
	}
	if k := p.tenancy.Report().Kills; len(k) == 0 || k[len(k)-1].Reason != dynamic.ReasonMove {
		t.Errorf("kills: %+v", k)
	}
	testcluster.Eventually(t, 10*time.Second, func() error {
		monitorNow(p)
		cycle(p, f)
		if fams := families(p); fams[0] != "share" {
			return fmt.Errorf("families %v: the host's switch did not complete once its guest was gone", fams)
		}
		return nil
	})
}

func TestAGuestIsFoundAgainAfterAPluginRestart(t *testing.T) {
	f := newFakeNomad(t)
	p, dir := newDynamicPlugin(t, f, nil)
	u := uuids(p)
	// Placed by a previous plugin: it runs on u[0], its home is u[3].
	f.placeTenant(allocA, "nb-a", "1.0", "gpu-share", shares(u[3], 0, 50)...)
	cycle(p, f)
	startSim(t, dir, allocA, u[0], 30000)
	monitorNow(p)
	r := p.tenancy.Report()
	if len(r.Tenants) != 1 || !r.Tenants[0].Guest || r.Tenants[0].GPU != u[0] || r.Tenants[0].UsedMiB != 30000 || len(r.Outside) != 0 {
		t.Fatalf("report: tenants %+v, outside %+v", r.Tenants, r.Outside)
	}
	obs := gpuObservations(p.hw.view(), p.holdings.current())
	markGuests(obs, p.tenancy.GuestsByHost())
	if obs[u[0]].Guests != 1 {
		t.Errorf("the partition is not told of the guest: %+v", obs[u[0]])
	}
}

// monitorNow runs one monitor cycle on what the simulated processes use
// now.
func monitorNow(p *Plugin) {
	p.hw.simulated().ReadProcessesAgain()
	p.tenancy.Cycle(p.ctx)
}

// TestABusyUsageAddressKeepsTheGPUsOffered: the usage endpoint is tried
// again in the background (package dynamic); the plugin goes on.
func TestABusyUsageAddressKeepsTheGPUsOffered(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	f := newFakeNomad(t)
	p, _ := newDynamicPlugin(t, f, func(c *Config) { c.UsageListen = busy.Addr().String() })
	if fams := families(p); fams[0] == "none" {
		t.Fatalf("the GPUs are not offered while the usage address is busy: %v", fams)
	}
}
