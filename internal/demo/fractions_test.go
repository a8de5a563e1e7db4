package demo

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpushare/nomad-gpushare/internal/localcluster"
	"github.com/gpushare/nomad-gpushare/internal/testcluster"
	"github.com/gpushare/nomad-gpushare/quota-service/service"
	"github.com/gpushare/nomad-gpushare/vocab/nodeusage"
	nomadapi "github.com/hashicorp/nomad/api"
)

// The story's figures (jobspecs/demo/fractions): a simulated H100 has
// 81,920 MiB; a notebook asks for half and bursts to 70,000 MiB.
const (
	storyRequestMiB = 40960
	storyBurstMiB   = 70000
	storyTrainMiB   = 60000
	// storyBound is a liveness bound for each step (the plugin acts
	// within seconds; the machine may be busy).
	storyBound = 2 * time.Minute
)

// fractionsStory plays the dynamic-fractions story as the welcome tells a
// person to, with the job files and the variables of the demo's env file,
// and checks what they would see: in the node's usage report, both
// notebooks burst, one as a guest on the idle GPU, and the dashboard's GPU
// map shows the guest and what it borrows; the whole-GPU job then runs
// alone on the guest's GPU, the guest moves home, both notebooks keep
// their request and none is lost.
func fractionsStory(t *testing.T, c *localcluster.Cluster, root, dir, welcome, quotaURL string) {
	t.Helper()
	for _, step := range fractionStory {
		if !strings.Contains(welcome, step.command) {
			t.Fatalf("the welcome does not print the story's step %q:\n%s", step.command, welcome)
		}
	}
	usageURL := regexp.MustCompile(`curl -s (http://127\.0\.0\.1:\d+)` + nodeusage.Path).FindStringSubmatch(welcome)
	if usageURL == nil {
		t.Fatalf("the welcome names no usage report:\n%s", welcome)
	}
	vars := envVars(t, filepath.Join(dir, "env"))
	sim := fractionVars{Simload: vars["NOMAD_VAR_simload"], ProcessDir: vars["NOMAD_VAR_process_dir"]}
	if sim.Simload == "" || sim.ProcessDir == "" {
		t.Fatalf("the env file does not set the story's variables: %v", vars)
	}
	story := &storyRun{t: t, c: c, usage: usageURL[1], quota: quotaURL}
	defer func() {
		if t.Failed() {
			for _, l := range strings.Split(c.NomadLogTail(1<<20), "\n") {
				if strings.Contains(l, "gpushare") && (strings.Contains(l, "switch") || strings.Contains(l, "guest") || strings.Contains(l, "assigning") || strings.Contains(l, "move")) {
					t.Log(l)
				}
			}
		}
	}()

	for _, job := range storyStoppedFirst {
		if _, _, err := c.Nomad.Jobs().Deregister(job, false, nil); err != nil {
			t.Fatalf("stopping %s: %v", job, err)
		}
	}
	// Stopped once the plugin no longer counts them: Nomad marks an
	// allocation to stop at once, its task ends later.
	testcluster.Eventually(t, storyBound, func() error {
		for _, tn := range story.report().Tenants {
			if slices.Contains(storyStoppedFirst, tn.Job) {
				return fmt.Errorf("%s still holds its GPU", tn.Job)
			}
		}
		return nil
	})
	// The GPUs they held settle (seconds): two idle whole GPUs, one to
	// host the guest and one to be the next landing place for shares.
	testcluster.Eventually(t, storyBound, func() error { return story.idleWholeGPUs(2) })
	story.submit(root, storyNotebookA, sim)
	story.submit(root, storyNotebookB, sim)
	a, b := story.using("notebook-a", storyBurstMiB), story.using("notebook-b", storyBurstMiB)
	if a.Home != b.Home || a.Guest == b.Guest || a.GPU == b.GPU {
		t.Fatalf("both notebooks should be bound to one GPU and burst on GPUs of their own, one as a guest: %+v and %+v", a, b)
	}
	guest, resident := a, b
	if b.Guest {
		guest, resident = b, a
	}
	story.dashboardShowsGuest(guest)
	// The notebooks filled the shared GPU, so the plugin opens another
	// idle GPU for shares, guest-free ones first: once that settles, the
	// guest's host is the one GPU Nomad sees free whole. (A whole-GPU job
	// that comes earlier may take the GPU being opened; it runs at once
	// all the same.)
	testcluster.Eventually(t, storyBound, func() error { return story.onlyIdleWholeGPU(guest.GPU) })

	submitted := time.Now()
	story.submit(root, storyWholeGPU, sim)
	train := story.using("train", storyTrainMiB)
	t.Logf("the whole-GPU job runs %s after submission", time.Since(submitted).Round(100*time.Millisecond))
	if train.GPU != guest.GPU {
		t.Errorf("train runs on %s, want the guest's GPU %s", train.GPU, guest.GPU)
	}
	testcluster.Eventually(t, storyBound, func() error { return story.backHome(resident.GPU) })
	r := story.report()
	if len(r.Moves) != 1 || r.Moves[0].AllocID != guest.AllocID || r.Moves[0].Error != "" {
		t.Errorf("moves %+v, want one: the guest %s", r.Moves, guest.AllocID)
	}
	if w := story.running("train"); w == nil || w.TaskStates["train"] == nil || w.TaskStates["train"].Restarts != 0 {
		t.Errorf("the whole-GPU job did not run alone on its GPU from its start")
	}
}

// storyRun is the story's view of the demo.
type storyRun struct {
	t            *testing.T
	c            *localcluster.Cluster
	usage, quota string
}

// submit runs a story job file with the env file's variables, as `nomad
// job run` does.
func (s *storyRun) submit(root, file string, vars fractionVars) {
	s.t.Helper()
	src, err := os.ReadFile(filepath.Join(root, file))
	if err != nil {
		s.t.Fatal(err)
	}
	job, err := s.c.Nomad.Jobs().ParseHCLOpts(&nomadapi.JobsParseRequest{JobHCL: string(src), Variables: vars.hcl(), Canonicalize: true})
	if err != nil {
		s.t.Fatalf("parsing %s: %v", file, err)
	}
	if _, _, err := s.c.Nomad.Jobs().Register(job, nil); err != nil {
		s.t.Fatalf("submitting %s: %v", file, err)
	}
}

// running is the job's running allocation, nil when none.
func (s *storyRun) running(job string) *nomadapi.Allocation {
	allocs, _, err := s.c.Nomad.Jobs().Allocations(job, false, nil)
	if err != nil {
		return nil
	}
	for _, stub := range allocs {
		if stub.ClientStatus == nomadapi.AllocClientStatusRunning && stub.DesiredStatus == nomadapi.AllocDesiredStatusRun {
			a, _, err := s.c.Nomad.Allocations().Info(stub.ID, nil)
			if err == nil {
				return a
			}
		}
	}
	return nil
}

func (s *storyRun) report() nodeusage.Report {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r, err := nodeusage.Fetch(ctx, http.DefaultClient, s.usage)
	if err != nil {
		s.t.Fatalf("reading the usage report: %v", err)
	}
	return r
}

// using waits until the report charges the job's running allocation with
// mib, and returns its line.
func (s *storyRun) using(job string, mib uint64) nodeusage.Tenant {
	s.t.Helper()
	var got nodeusage.Tenant
	testcluster.Eventually(s.t, storyBound, func() error {
		a := s.running(job)
		if a == nil {
			return fmt.Errorf("%s is not running", job)
		}
		r := s.report()
		for _, tn := range r.Tenants {
			if tn.AllocID == a.ID && tn.UsedMiB == mib {
				got = tn
				return nil
			}
		}
		return fmt.Errorf("the usage report does not show %s (%s) using %d MiB: %s", job, a.ID, mib, describe(r))
	})
	return got
}

// idleWhole lists the healthy whole GPUs the node publishes that no
// tenant holds at home.
func (s *storyRun) idleWhole() ([]string, error) {
	held := map[string]bool{}
	for _, tn := range s.report().Tenants {
		held[tn.Home] = true
	}
	nodes, _, err := s.c.Nomad.Nodes().List(nil)
	if err != nil || len(nodes) != 1 {
		return nil, fmt.Errorf("listing the node: %d nodes, %v", len(nodes), err)
	}
	node, _, err := s.c.Nomad.Nodes().Info(nodes[0].ID, nil)
	if err != nil {
		return nil, err
	}
	var idle []string
	for _, d := range node.NodeResources.Devices {
		if d.Type != "gpu" {
			continue
		}
		for _, inst := range d.Instances {
			if inst.Healthy && !held[inst.ID] {
				idle = append(idle, inst.ID)
			}
		}
	}
	return idle, nil
}

// idleWholeGPUs succeeds when the node publishes n idle whole GPUs.
func (s *storyRun) idleWholeGPUs(n int) error {
	idle, err := s.idleWhole()
	if err == nil && len(idle) < n {
		err = fmt.Errorf("idle GPUs published whole: %v, want %d", idle, n)
	}
	return err
}

// onlyIdleWholeGPU succeeds when gpu is the one idle whole GPU published.
func (s *storyRun) onlyIdleWholeGPU(gpu string) error {
	idle, err := s.idleWhole()
	if err == nil && (len(idle) != 1 || idle[0] != gpu) {
		err = fmt.Errorf("idle GPUs published whole: %v, want only the guest's host %s", idle, gpu)
	}
	return err
}

// backHome checks that both notebooks run on gpu within their request.
func (s *storyRun) backHome(gpu string) error {
	r := s.report()
	for _, job := range []string{"notebook-a", "notebook-b"} {
		a := s.running(job)
		if a == nil {
			return fmt.Errorf("%s is not running", job)
		}
		found := false
		for _, tn := range r.Tenants {
			if tn.AllocID != a.ID {
				continue
			}
			found = true
			if tn.GPU != gpu || tn.Guest || tn.UsedMiB > tn.RequestMiB || tn.RequestMiB != storyRequestMiB {
				return fmt.Errorf("%s: %+v, want it on %s within its request of %d MiB", job, tn, gpu, storyRequestMiB)
			}
		}
		if !found {
			return fmt.Errorf("%s (%s) is not in the usage report", job, a.ID)
		}
	}
	return nil
}

// dashboardShowsGuest waits until the quota service's GPU map (what the
// dashboard draws) lists the guest under the GPU it runs on, with the
// memory it borrows, and under its home GPU as a guest elsewhere.
func (s *storyRun) dashboardShowsGuest(guest nodeusage.Tenant) {
	s.t.Helper()
	testcluster.Eventually(s.t, storyBound, func() error {
		resp, err := http.Get(s.quota + "v1/status")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		var st service.Status
		if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
			return err
		}
		var onHost, atHome bool
		for _, n := range st.Nodes {
			for _, g := range n.GPUs {
				for _, tn := range g.Guests {
					onHost = onHost || (g.UUID == guest.GPU && tn.Job == guest.Job && tn.Memory != nil && tn.Memory.BorrowedMiB == storyBurstMiB-storyRequestMiB)
				}
				for _, tn := range g.Tenants {
					atHome = atHome || (g.UUID == guest.Home && tn.Job == guest.Job && tn.Memory != nil && tn.Memory.GuestOn != nil)
				}
			}
		}
		if !onHost || !atHome {
			return fmt.Errorf("the GPU map does not show %s as a guest on %s borrowing %d MiB (on its host: %t, at home: %t)",
				guest.Job, guest.GPU, storyBurstMiB-storyRequestMiB, onHost, atHome)
		}
		return nil
	})
}

// envVars reads the export lines of the demo's env file.
func envVars(t *testing.T, path string) map[string]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	vars := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		name, value, ok := strings.Cut(strings.TrimPrefix(sc.Text(), "export "), "=")
		if !ok || strings.HasPrefix(name, "#") {
			continue
		}
		if v, err := strconv.Unquote(value); err == nil {
			value = v
		}
		vars[name] = value
	}
	return vars
}

// describe is the report's GPUs, tenants and recent kills and moves, for
// a failure message.
func describe(r nodeusage.Report) string {
	var b strings.Builder
	for _, g := range r.GPUs {
		fmt.Fprintf(&b, "\n  GPU %d %s: %d of %d MiB used, guests %v", g.Index, g.UUID, g.UsedMiB, g.TotalMiB, g.Guests)
	}
	for _, tn := range r.Tenants {
		fmt.Fprintf(&b, "\n  tenant %s/%s (%s): home %s, on %s, guest %t, %d MiB used (request %d, limit %d)",
			tn.Namespace, tn.Job, tn.AllocID, tn.Home, tn.GPU, tn.Guest, tn.UsedMiB, tn.RequestMiB, tn.LimitMiB)
	}
	for _, k := range r.Kills {
		fmt.Fprintf(&b, "\n  kill %s %s: %s", k.At.Format("15:04:05.000"), k.Job, k.Detail)
	}
	for _, m := range r.Moves {
		fmt.Fprintf(&b, "\n  move %s %s: %s %s", m.At.Format("15:04:05.000"), m.Job, m.Why, m.Error)
	}
	for _, e := range r.Errors {
		fmt.Fprintf(&b, "\n  error %s", e)
	}
	return b.String()
}
