package device_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpushare/nomad-gpushare/internal/localcluster"
	"github.com/gpushare/nomad-gpushare/internal/testcluster"
	"github.com/gpushare/nomad-gpushare/vocab/nodeusage"
	nomadapi "github.com/hashicorp/nomad/api"
)

// The simulated H100s of the dynamic node: 81920 MiB; half a GPU is 40960.
const (
	gpuMiB  = 81920
	halfMiB = gpuMiB / 2
	// wholeJobBound is the liveness bound for a whole-GPU job
	// arriving on a GPU that hosts a guest (it takes seconds).
	wholeJobBound = 30 * time.Second
)

// dynamicNode is a real Nomad agent with the plugin on a simulated 2 x H100
// node whose workloads are gpushare-simload processes: the plugin sees them
// as NVML processes, and kills and moves act on them.
type dynamicNode struct {
	*testcluster.SimNode
	c       *localcluster.Cluster
	control string // control files of the simulated workloads
}

func startDynamicNode(t *testing.T) *dynamicNode {
	t.Helper()
	sn := testcluster.StartSimNode(t, 2)
	n := &dynamicNode{SimNode: sn, c: sn.Cluster, control: t.TempDir()}
	os.Chmod(n.control, 0o777)
	return n
}

// simJob describes a service job whose task runs gpushare-simload.
type simJob struct {
	name   string
	shares uint64 // nvidia/gpu-share instances; 0 with whole
	whole  bool
	limit  string // gpushare_limit ("" for none)
	args   []string
	// restarts the task may make (restart policy, mode fail).
	restarts int
}

func (n *dynamicNode) submit(t *testing.T, j simJob) {
	t.Helper()
	job := nomadapi.NewServiceJob(j.name, j.name, "global", 50)
	job.Datacenters = []string{"dc1"}
	task := nomadapi.NewTask("main", "raw_exec").SetConfig("command", n.Simload).
		SetConfig("args", append([]string{"-state-dir", n.StateDir}, j.args...))
	dev := &nomadapi.RequestedDevice{Name: "nvidia/gpu-share", Count: ptr(j.shares)}
	if j.whole {
		dev = &nomadapi.RequestedDevice{Name: "nvidia/gpu", Count: ptr(uint64(1))}
	}
	task.Resources = &nomadapi.Resources{CPU: ptr(20), MemoryMB: ptr(16), Devices: []*nomadapi.RequestedDevice{dev}}
	task.KillTimeout = ptr(2 * time.Second)
	if j.limit != "" {
		task.Meta = map[string]string{"gpushare_limit": j.limit}
	}
	group := nomadapi.NewTaskGroup("main", 1).AddTask(task)
	group.RestartPolicy = &nomadapi.RestartPolicy{Attempts: ptr(j.restarts), Interval: ptr(10 * time.Minute), Delay: ptr(time.Second), Mode: ptr("fail")}
	group.ReschedulePolicy = &nomadapi.ReschedulePolicy{Attempts: ptr(0), Unlimited: ptr(false)}
	job.AddTaskGroup(group)
	if _, _, err := n.c.Nomad.Jobs().Register(job, nil); err != nil {
		t.Fatalf("registering %s: %v", j.name, err)
	}
}

// report reads the plugin's usage report.
func (n *dynamicNode) report() (nodeusage.Report, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return nodeusage.Fetch(ctx, http.DefaultClient, n.UsageURL)
}

// tenant returns the report's line of the job's running allocation.
func tenantOf(r nodeusage.Report, allocID string) (nodeusage.Tenant, bool) {
	for _, tn := range r.Tenants {
		if tn.AllocID == allocID {
			return tn, true
		}
	}
	return nodeusage.Tenant{}, false
}

// running waits (liveWindow) for the job's allocation to run and returns
// it; a failed allocation fails the test.
func (n *dynamicNode) running(t *testing.T, job string) *nomadapi.Allocation {
	t.Helper()
	return runningAfter(t, n.c, job, time.Now())
}

// using waits until the plugin charges the job's running allocation with
// mib on its GPU, and returns its report line.
func (n *dynamicNode) using(t *testing.T, job string, mib uint64) nodeusage.Tenant {
	t.Helper()
	var got nodeusage.Tenant
	testcluster.Eventually(t, liveWindow, func() error {
		a, _, err := runningAllocation(n.c, job)
		if err != nil || a == nil {
			return fmt.Errorf("%s not running: %v", job, err)
		}
		r, err := n.report()
		if err != nil {
			return err
		}
		tn, ok := tenantOf(r, a.ID)
		if !ok || tn.UsedMiB != mib {
			return fmt.Errorf("%s (allocation %s) uses %d MiB in the report (listed: %v), want %d", job, a.ID, tn.UsedMiB, ok, mib)
		}
		got = tn
		return nil
	})
	return got
}

// clear stops every job and waits until no simulated process is left.
func (n *dynamicNode) clear(t *testing.T) {
	t.Helper()
	jobs, _, err := n.c.Nomad.Jobs().List(nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range jobs {
		n.c.Nomad.Jobs().Deregister(j.ID, true, nil)
	}
	testcluster.Eventually(t, liveWindow, func() error {
		r, err := n.report()
		if err != nil {
			return err
		}
		if len(r.Tenants) > 0 || len(r.Outside) > 0 {
			return fmt.Errorf("%d tenants and %d other processes left", len(r.Tenants), len(r.Outside))
		}
		return nil
	})
}

// invariantWatch polls the plugin's report until stopped and collects
// what breaks the rules: a GPU whose tenants cannot all reach their
// request while no borrower is left to kill, and a tenant killed to
// reclaim memory while within its request.
func (n *dynamicNode) invariantWatch() (stop func() (violations []string, polls int)) {
	done := make(chan struct{})
	var mu sync.Mutex
	var violations []string
	polls := 0
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		for {
			select {
			case <-done:
				return
			case <-time.After(200 * time.Millisecond):
			}
			r, err := n.report()
			if err != nil {
				continue
			}
			mu.Lock()
			polls++
			for _, g := range r.GPUs {
				if g.ShortMiB > 0 {
					violations = append(violations, fmt.Sprintf("%s: GPU %s lacks %d MiB for its tenants' requests", r.At.Format("15:04:05.000"), g.UUID, g.ShortMiB))
				}
			}
			for _, k := range r.Kills {
				if k.Reason == "reclaim" && k.UsedMiB <= k.RequestMiB {
					violations = append(violations, fmt.Sprintf("tenant %s/%s killed within its request: %+v", k.Job, k.AllocID, k))
				}
			}
			mu.Unlock()
		}
	}()
	return func() ([]string, int) {
		close(done)
		<-finished
		mu.Lock()
		defer mu.Unlock()
		return violations, polls
	}
}

// TestDynamicFractionsOnRealNomad runs dynamic fractions and the
// node-level scheduler under a real Nomad agent on a simulated 2 x H100
// node. The subtests run in order; each leaves the node without jobs.
func TestDynamicFractionsOnRealNomad(t *testing.T) {
	n := startDynamicNode(t)
	defer func() {
		if t.Failed() {
			logPluginLines(t, n.c)
		}
	}()
	t.Run("two bursting tenants, a whole-GPU job arrives, one tenant moves back", func(t *testing.T) { twoGPUStory(t, n) })
	n.clear(t)
	t.Run("a borrower above its request is killed when the owner grows, never the owner", func(t *testing.T) { borrowerGivesBack(t, n) })
	n.clear(t)
	t.Run("a tenant above its limit is killed", func(t *testing.T) { aboveLimitKilled(t, n) })
	t.Run("a limit below the request is refused at placement", func(t *testing.T) { nonsenseLimitRefused(t, n) })
	n.clear(t)
	t.Run("processes of no allocation are reported", func(t *testing.T) { outsideReported(t, n) })
}

// twoGPUStory is the seeds' story: two notebooks of request 0.5 and limit
// 1.0 land on one GPU in Nomad's view; the node runs one as a guest on the
// idle GPU so that both burst to a whole GPU; a whole-GPU job arrives on
// that GPU; the guest moves back next to the other; the whole job runs
// alone on its GPU; both notebooks keep their request; nothing is lost.
func twoGPUStory(t *testing.T, n *dynamicNode) {
	watch := n.invariantWatch()
	burst := []string{"-mib", "70000", "-sm", "60", "-restart-mib", "30000", "-restart-sm", "20"}
	// Submitted together: both wait for the first share GPU, and their
	// blocked evaluations are still listed a moment after they run there;
	// the plugin nets them against the allocations they placed, so it
	// opens no other GPU for shares, which would leave no idle GPU for a
	// guest.
	n.submit(t, simJob{name: "nb-a", shares: 50, limit: "1.0", args: burst, restarts: 5})
	n.submit(t, simJob{name: "nb-b", shares: 50, limit: "1.0", args: burst, restarts: 5})
	a, b := n.using(t, "nb-a", 70000), n.using(t, "nb-b", 70000)
	if a.GPU == b.GPU || a.Home != b.Home || a.Guest == b.Guest {
		t.Fatalf("both tenants should burst on GPUs of their own, one as a guest: %+v and %+v", a, b)
	}
	if a.RequestMiB != halfMiB || a.LimitMiB != gpuMiB {
		t.Errorf("request %d MiB, limit %d MiB; want %d and %d", a.RequestMiB, a.LimitMiB, halfMiB, gpuMiB)
	}
	guest, resident := a, b
	if b.Guest {
		guest, resident = b, a
	}
	if fam, err := familyOf(n.c, guest.GPU); err != nil || fam != "whole" {
		t.Fatalf("the guest's host %s is %q for Nomad, want whole (free): %v", guest.GPU, fam, err)
	}

	submitted := time.Now()
	n.submit(t, simJob{name: "train", whole: true, args: []string{"-mib", "60000", "-sm", "90", "-require-exclusive"}})
	var w *nomadapi.Allocation
	testcluster.Eventually(t, wholeJobBound, func() error {
		var err error
		w, _, err = runningAllocation(n.c, "train")
		if err == nil && w == nil {
			err = fmt.Errorf("train not running %s after submission", time.Since(submitted).Round(time.Second))
		}
		return err
	})
	t.Logf("the whole-GPU job runs %s after submission", time.Since(submitted).Round(100*time.Millisecond))
	if u, _ := gpuOf(t, w); u != guest.GPU {
		t.Fatalf("train got GPU %s, want the guest's host %s", u, guest.GPU)
	}
	n.using(t, "train", 60000)

	// Both notebooks end up on the other GPU, each within its request
	// once the burst memory is given back, and nothing is lost.
	testcluster.Eventually(t, liveWindow, func() error { return bothBackHome(n, resident.GPU) })
	r, _ := n.report()
	for _, k := range r.Kills {
		t.Logf("kill: %s %s on %s, %s: %s", k.Reason, k.Job, k.GPU, k.At.Format("15:04:05.000"), k.Detail)
	}
	for _, m := range r.Moves {
		t.Logf("move: %s (%s) from %s to its home %s, %s: %s", m.Job, m.AllocID, m.Host, m.Home, m.At.Format("15:04:05.000"), m.Why)
	}
	if len(r.Moves) != 1 || r.Moves[0].AllocID != guest.AllocID || r.Moves[0].Error != "" {
		t.Errorf("moves %+v, want one: the guest %s", r.Moves, guest.AllocID)
	}
	if w, _, _ = runningAllocation(n.c, "train"); w == nil || w.TaskStates["main"].Restarts != 0 || w.TaskStates["main"].Failed {
		t.Errorf("the whole-GPU job did not run alone on its GPU from its start: %s", taskEvents(w))
	}
	if v, polls := watch(); len(v) > 0 {
		t.Errorf("rules broken (%d polls): %s", polls, strings.Join(v, "; "))
	}
}

// bothBackHome checks that nb-a and nb-b run on gpu within their request,
// with train alone on the other GPU.
func bothBackHome(n *dynamicNode, gpu string) error {
	r, err := n.report()
	if err != nil {
		return err
	}
	for _, job := range []string{"nb-a", "nb-b"} {
		a, count, err := runningAllocation(n.c, job)
		if err != nil || a == nil || count == 0 {
			return fmt.Errorf("%s has no running allocation (%v)", job, err)
		}
		tn, ok := tenantOf(r, a.ID)
		if !ok || tn.GPU != gpu || tn.Guest || tn.UsedMiB > tn.RequestMiB || tn.RequestMiB != halfMiB {
			return fmt.Errorf("%s: %+v, want it on %s within its request of %d MiB", job, tn, gpu, halfMiB)
		}
	}
	for _, g := range r.GPUs {
		if g.UUID != gpu && (len(g.Guests) > 0 || g.UsedMiB != 60000) {
			return fmt.Errorf("the whole job's GPU %s: %+v", g.UUID, g)
		}
	}
	return nil
}

// borrowerGivesBack: a borrower (request 0.25, limit 1.0) uses 50000 MiB
// next to an owner (request 0.5) that uses 5000 MiB; the owner grows to
// 30000 MiB, into the headroom its request is owed: the borrower is
// killed, restarts within its request, and the owner is never touched.
func borrowerGivesBack(t *testing.T, n *dynamicNode) {
	watch := n.invariantWatch()
	n.submit(t, simJob{name: "borrower", shares: 25, limit: "1.0", args: []string{"-mib", "50000", "-restart-mib", "10000"}, restarts: 3})
	b := n.using(t, "borrower", 50000)
	control := filepath.Join(n.control, "owner")
	os.WriteFile(control, []byte("mib=5000 sm=30"), 0o644)
	n.submit(t, simJob{name: "owner", shares: 50, args: []string{"-control", control}})
	o := n.using(t, "owner", 5000)
	if o.GPU != b.GPU {
		t.Fatalf("owner on %s, borrower on %s: want one GPU", o.GPU, b.GPU)
	}
	grew := time.Now()
	os.WriteFile(control, []byte("mib=30000 sm=60"), 0o644)
	var kill nodeusage.Kill
	testcluster.Eventually(t, liveWindow, func() error {
		r, err := n.report()
		if err != nil {
			return err
		}
		for _, k := range r.Kills {
			if k.AllocID == b.AllocID && k.Reason == "reclaim" && k.Enforced {
				kill = k
				return nil
			}
		}
		return fmt.Errorf("borrower %s not killed yet; kills %+v", b.AllocID, r.Kills)
	})
	t.Logf("borrower killed %s after the owner's control file changed (the simulated workload reads it every 100 ms): %s",
		kill.At.Sub(grew).Round(time.Millisecond), kill.Detail)
	n.using(t, "borrower", 10000)
	owner, _, _ := runningAllocation(n.c, "owner")
	if owner == nil || owner.ID != o.AllocID || owner.TaskStates["main"].Restarts != 0 {
		t.Errorf("the owner was disturbed: %s", taskEvents(owner))
	}
	r, _ := n.report()
	for _, k := range r.Kills {
		if k.AllocID == o.AllocID {
			t.Errorf("the owner was killed: %+v", k)
		}
	}
	if v, polls := watch(); len(v) > 0 {
		t.Errorf("rules broken (%d polls): %s", polls, strings.Join(v, "; "))
	}
}

// aboveLimitKilled: a tenant with limit 0.5 (40960 MiB) that uses 45000 MiB
// is killed, with reason "limit", and restarts within it.
func aboveLimitKilled(t *testing.T, n *dynamicNode) {
	n.submit(t, simJob{name: "capped", shares: 25, limit: "0.5", args: []string{"-mib", "45000", "-restart-mib", "10000"}, restarts: 3})
	a := n.running(t, "capped")
	testcluster.Eventually(t, liveWindow, func() error {
		r, err := n.report()
		if err != nil {
			return err
		}
		for _, k := range r.Kills {
			if k.AllocID == a.ID && k.Reason == "limit" && k.UsedMiB == 45000 && k.LimitMiB == halfMiB {
				return nil
			}
		}
		return fmt.Errorf("no limit kill of %s yet: %+v", a.ID, r.Kills)
	})
	n.using(t, "capped", 10000)
}

// nonsenseLimitRefused: a limit below the request fails the task at
// placement, with the meta key and the fix in its events.
func nonsenseLimitRefused(t *testing.T, n *dynamicNode) {
	n.submit(t, simJob{name: "nonsense", shares: 25, limit: "0.2", args: []string{"-mib", "1000"}})
	testcluster.Eventually(t, liveWindow, func() error {
		_, _, err := runningAllocation(n.c, "nonsense")
		if err == nil {
			return fmt.Errorf("nonsense has not failed")
		}
		for _, want := range []string{`gpushare_limit = "0.2" is below the task's request of 0.25 GPU`, `set it to at least "0.25"`} {
			if !strings.Contains(err.Error(), want) {
				return fmt.Errorf("failure %q lacks %q", err, want)
			}
		}
		return nil
	})
}

// outsideReported: a GPU process that no Nomad allocation started is
// reported, with its GPU memory, in the report and the metrics.
func outsideReported(t *testing.T, n *dynamicNode) {
	r, err := n.report()
	if err != nil || len(r.GPUs) != 2 {
		t.Fatalf("report: %+v, %v", r, err)
	}
	gpu := r.GPUs[0].UUID
	cmd := exec.Command(n.Simload, "-state-dir", n.StateDir, "-gpu", gpu, "-mib", "1234")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	testcluster.Eventually(t, liveWindow, func() error {
		r, err := n.report()
		if err != nil {
			return err
		}
		for _, o := range r.Outside {
			if o.PID == cmd.Process.Pid && o.GPU == gpu && o.UsedMiB == 1234 && o.Why == "belongs to no Nomad allocation" {
				return nil
			}
		}
		return fmt.Errorf("process %d not reported: %+v", cmd.Process.Pid, r.Outside)
	})
	resp, err := http.Get(n.UsageURL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if want := fmt.Sprintf(`gpushare_outside_memory_used_mib{gpu=%q} 1234`, gpu); !strings.Contains(string(body), want) {
		t.Errorf("metrics lack %s", want)
	}
}
