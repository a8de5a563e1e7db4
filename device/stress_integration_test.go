package device_test

import (
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpushare/nomad-gpushare/internal/localcluster"
	"github.com/gpushare/nomad-gpushare/vocab"
	nomadapi "github.com/hashicorp/nomad/api"
)

// stressJob is one job of the stress test.
type stressJob struct {
	name      string
	whole     bool
	shares    int // share jobs: the count of nvidia/gpu-share
	sleep     int // seconds
	submitted time.Time
	placed    time.Time
	done      bool
}

func (j *stressJob) String() string {
	if j.whole {
		return fmt.Sprintf("%s (whole)", j.name)
	}
	return fmt.Sprintf("%s (%d shares)", j.name, j.shares)
}

// registerStressJob registers a batch job that holds a whole GPU or some
// shares for j.sleep seconds.
func registerStressJob(c *localcluster.Cluster, j *stressJob) error {
	job := nomadapi.NewBatchJob(j.name, j.name, "global", 50)
	job.Datacenters = []string{"dc1"}
	devType, count := "gpu-share", uint64(j.shares)
	if j.whole {
		devType, count = "gpu", 1
	}
	task := nomadapi.NewTask("main", "raw_exec").
		SetConfig("command", "/bin/sleep").
		SetConfig("args", []string{fmt.Sprint(j.sleep)})
	task.Resources = &nomadapi.Resources{CPU: ptr(10), MemoryMB: ptr(16),
		Devices: []*nomadapi.RequestedDevice{{Name: "nvidia/" + devType, Count: &count}}}
	group := nomadapi.NewTaskGroup("main", 1).AddTask(task)
	group.RestartPolicy = &nomadapi.RestartPolicy{Attempts: ptr(0), Mode: ptr("fail")}
	job.AddTaskGroup(group)
	_, _, err := c.Nomad.Jobs().Register(job, nil)
	return err
}

// idleShareNeed mirrors the test node's min_idle_share_gpus and
// share_headroom: how many idle GPUs the policy keeps in share mode given
// the free shares of the in-use share GPUs.
func idleShareNeed(shares map[string]int) int {
	const minIdleShare, headroom = 1, 50
	room := 0
	for _, n := range shares {
		if n > 0 && 100-n > room {
			room = 100 - n
		}
	}
	if room >= headroom {
		return 0
	}
	return minIdleShare
}

// holdings is what the live allocations hold, per GPU UUID.
type holdings struct {
	whole, shares map[string]int
}

func (h holdings) idle(gpu string) bool { return h.whole[gpu] == 0 && h.shares[gpu] == 0 }

// stressRun is the state of one stress test: the jobs, what each poll of
// the allocations showed, and the figures reported at the end.
type stressRun struct {
	t      *testing.T
	c      *localcluster.Cluster
	jobs   []*stressJob
	byName map[string]*stressJob
	gpus   []string // the node's GPU UUIDs

	start, lastDone time.Time
	next, polls     int
	doneCount       int
	violations      int
	failed          map[string]bool

	// fitSince: job|gpu -> since when the GPU fits the pending job by the
	// partition policy. anySince: job -> since when some GPU could serve it
	// in either family, whatever the landing-place rule says.
	fitSince, anySince             map[string]time.Time
	worstFit, worstAny             time.Duration
	worstFitJob, worstAnyJob       string
	worstWait, worstOverHeadroom   time.Duration
	lastProgressLog                time.Time
	doneAtLastLog, polledAtLastLog int
}

// stress submits total jobs in concurrent bursts and polls the allocations
// until all are complete. It fails when a GPU is held whole and shared at
// once, when an allocation failed, and on lack of progress: no job
// completing for liveWindow, a job waiting that long while a GPU that fits
// it by the partition policy stays available, or a job pending twice that
// long (served oldest first, a job waits a few switches at most). Wait
// times are logged, not bounded: speed targets live in benchmarks.
func stress(t *testing.T, c *localcluster.Cluster, total int) {
	r := newStressRun(t, c, total)
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for r.doneCount < total {
		if idle := time.Since(r.lastDone); idle > liveWindow {
			t.Fatalf("no progress: no job completed for %s (%d of %d complete, %d submitted)\n%s",
				idle.Round(time.Second), r.doneCount, total, r.next, r.diagnose())
		}
		r.submitWhenLow()
		h := r.poll()
		r.checkStarved()
		r.checkExclusive(h)
		r.trackFitWaits(h)
		r.trackAnyWaits(h)
		r.logProgress()
		<-tick.C
	}
	r.report()
}

func newStressRun(t *testing.T, c *localcluster.Cluster, total int) *stressRun {
	seed := time.Now().UnixNano()
	rng := rand.New(rand.NewSource(seed))
	t.Logf("seed %d, %d jobs, stall window %s", seed, total, liveWindow)
	r := &stressRun{t: t, c: c, byName: map[string]*stressJob{}, failed: map[string]bool{},
		fitSince: map[string]time.Time{}, anySince: map[string]time.Time{}}
	for i := 0; i < total; i++ {
		j := &stressJob{name: fmt.Sprintf("stress-%03d", i), sleep: 1 + rng.Intn(3)}
		switch x := rng.Float64(); {
		case x < 0.3:
			j.whole = true
		case x < 0.85:
			j.shares = 1 + rng.Intn(50)
		default:
			j.shares = 51 + rng.Intn(50)
		}
		r.jobs = append(r.jobs, j)
		r.byName[j.name] = j
	}
	node, _, err := c.Nomad.Nodes().Info(c.NodeID, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range node.NodeResources.Devices {
		if g.Type == "gpu" {
			for _, d := range g.Instances {
				r.gpus = append(r.gpus, d.ID)
			}
		}
	}
	if len(r.gpus) != 4 {
		t.Fatalf("node GPUs %v", r.gpus)
	}
	r.start = time.Now()
	r.lastDone, r.lastProgressLog = r.start, r.start
	return r
}

// submitWhenLow registers the next burst of jobs once few are pending.
func (r *stressRun) submitWhenLow() {
	const burst, lowWater = 12, 4
	if len(r.pending()) > lowWater || r.next == len(r.jobs) {
		return
	}
	n := min(burst, len(r.jobs)-r.next)
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i, j := range r.jobs[r.next : r.next+n] {
		wg.Add(1)
		go func() {
			defer wg.Done()
			j.submitted = time.Now()
			errs[i] = registerStressJob(r.c, j)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			r.t.Fatalf("registering: %v", err)
		}
	}
	r.next += n
}

// pending lists the submitted jobs not placed yet.
func (r *stressRun) pending() []*stressJob {
	var out []*stressJob
	for _, j := range r.jobs[:r.next] {
		if j.placed.IsZero() {
			out = append(out, j)
		}
	}
	return out
}

// poll lists the allocations: it records placements, completions and
// failures, and returns what the live allocations hold.
func (r *stressRun) poll() holdings {
	stubs, _, err := r.c.Nomad.Allocations().List(&nomadapi.QueryOptions{Params: map[string]string{"resources": "true"}})
	if err != nil {
		r.t.Fatalf("listing allocations: %v", err)
	}
	now := time.Now()
	r.polls++
	h := holdings{whole: map[string]int{}, shares: map[string]int{}}
	for _, a := range stubs {
		j := r.byName[a.JobID]
		if j == nil {
			continue
		}
		r.record(j, a, now)
		if (a.ClientStatus != "pending" && a.ClientStatus != "running") || a.AllocatedResources == nil {
			continue
		}
		for _, tr := range a.AllocatedResources.Tasks {
			for _, d := range tr.Devices {
				for _, raw := range d.DeviceIDs {
					id, err := vocab.Parse(raw)
					if err != nil {
						r.t.Fatalf("allocation %s: %v", a.ID, err)
					}
					if id.IsShare {
						h.shares[id.UUID]++
					} else {
						h.whole[id.UUID]++
					}
				}
			}
		}
	}
	return h
}

// record notes what one allocation of job j says about it.
func (r *stressRun) record(j *stressJob, a *nomadapi.AllocationListStub, now time.Time) {
	if j.placed.IsZero() {
		j.placed = now
		r.worstWait = max(r.worstWait, now.Sub(j.submitted))
		if !j.whole && j.shares > 50 {
			r.worstOverHeadroom = max(r.worstOverHeadroom, now.Sub(j.submitted))
		}
	}
	switch a.ClientStatus {
	case "complete":
		if !j.done {
			j.done = true
			r.doneCount++
			r.lastDone = now
		}
	case "failed", "lost":
		r.failed[a.ID] = true
	}
}

// checkStarved fails the test when a job has waited 2 x liveWindow since
// its submission.
func (r *stressRun) checkStarved() {
	for _, j := range r.pending() {
		if w := time.Since(j.submitted); w > 2*liveWindow {
			r.t.Fatalf("starved: %s pending for %s\n%s", j, w.Round(time.Second), r.diagnose())
		}
	}
}

// checkExclusive fails the test when a GPU is held whole and shared, held
// whole twice, or shared beyond 100 shares.
func (r *stressRun) checkExclusive(h holdings) {
	for _, g := range r.gpus {
		if h.whole[g] > 1 || h.shares[g] > 100 || h.whole[g] > 0 && h.shares[g] > 0 {
			r.violations++
			if r.violations <= 5 {
				r.t.Errorf("%s: GPU %s held whole by %d allocations and by %d shares", time.Since(r.start).Round(time.Millisecond), g, h.whole[g], h.shares[g])
			}
		}
	}
}

// fits reports whether GPU g fits pending job j by the partition policy's
// plain split: a whole job an idle GPU beyond the share landing places, a
// share job the free shares of an in-use share GPU or an idle landing
// place.
func fits(j *stressJob, g string, h holdings, idle, need int) bool {
	if j.whole {
		return h.idle(g) && idle > need
	}
	return h.shares[g] > 0 && h.whole[g] == 0 && 100-h.shares[g] >= j.shares || h.idle(g) && need > 0
}

// trackFitWaits follows, for each pending job, how long a GPU that fits it
// has stayed available; a wait over liveWindow fails the test (the job is
// starved, not slow).
func (r *stressRun) trackFitWaits(h holdings) {
	now := time.Now()
	idle := 0
	for _, g := range r.gpus {
		if h.idle(g) {
			idle++
		}
	}
	need := idleShareNeed(h.shares)
	fitting := map[string]bool{}
	for _, j := range r.pending() {
		for _, g := range r.gpus {
			if !fits(j, g, h, idle, need) {
				continue
			}
			key := j.name + "|" + g
			fitting[key] = true
			since, seen := r.fitSince[key]
			if !seen {
				since = now
				r.fitSince[key] = now
			}
			since = maxTime(since, j.submitted)
			if w := now.Sub(since); w > r.worstFit {
				r.worstFit, r.worstFitJob = w, fmt.Sprintf("%s on GPU %s", j, vocab.ShortUUID(g))
			}
		}
	}
	for k := range r.fitSince {
		if !fitting[k] {
			delete(r.fitSince, k)
		}
	}
	if r.worstFit > liveWindow {
		r.t.Fatalf("starved: %s waited %s while the GPU fit it\n%s", r.worstFitJob, r.worstFit.Round(time.Second), r.diagnose())
	}
}

// trackAnyWaits follows the demand-aware figure: how long a pending job
// waits while some GPU could serve it in either family (an idle GPU, or a
// share GPU with enough free shares). Logged only.
func (r *stressRun) trackAnyWaits(h holdings) {
	now := time.Now()
	for _, j := range r.jobs[:r.next] {
		can := false
		for _, g := range r.gpus {
			can = can || h.idle(g) || !j.whole && h.whole[g] == 0 && h.shares[g] > 0 && 100-h.shares[g] >= j.shares
		}
		if !j.placed.IsZero() || !can {
			delete(r.anySince, j.name)
			continue
		}
		since, seen := r.anySince[j.name]
		if !seen {
			since = now
			r.anySince[j.name] = since
		}
		if w := now.Sub(since); w > r.worstAny {
			r.worstAny, r.worstAnyJob = w, j.String()
		}
	}
}

// logProgress logs the counts every 30 s, so that a slow run shows where
// its time went.
func (r *stressRun) logProgress() {
	if time.Since(r.lastProgressLog) < 30*time.Second {
		return
	}
	r.t.Logf("%s: %d of %d complete (+%d), %d submitted, %d pending, %d polls (+%d)", time.Since(r.start).Round(time.Second),
		r.doneCount, len(r.jobs), r.doneCount-r.doneAtLastLog, r.next, len(r.pending()), r.polls, r.polls-r.polledAtLastLog)
	r.lastProgressLog, r.doneAtLastLog, r.polledAtLastLog = time.Now(), r.doneCount, r.polls
}

func (r *stressRun) report() {
	t := r.t
	t.Logf("%d jobs complete in %s (%d polls); %d failed allocations", len(r.jobs), time.Since(r.start).Round(time.Second), r.polls, len(r.failed))
	t.Logf("worst wait from submission to placement: %s (share jobs over the headroom: %s)", r.worstWait.Round(time.Millisecond), r.worstOverHeadroom.Round(time.Millisecond))
	t.Logf("worst wait while a fitting GPU stayed available: %s, %s (switchBound on an idle machine %s)", r.worstFit.Round(time.Millisecond), r.worstFitJob, switchBound)
	t.Logf("worst wait while some GPU could serve it in either family: %s, %s", r.worstAny.Round(time.Millisecond), r.worstAnyJob)
	t.Logf("exclusivity violations: %d", r.violations)
	if len(r.failed) > 0 {
		t.Errorf("%d allocations failed", len(r.failed))
	}
}

// diagnose describes a stall: each pending job with its evaluations, each
// GPU with its family and holders, and the plugin's last partition
// decisions.
func (r *stressRun) diagnose() string {
	var b strings.Builder
	now := time.Now()
	for _, j := range r.pending() {
		fmt.Fprintf(&b, "pending %s, submitted %s ago:", j, now.Sub(j.submitted).Round(time.Second))
		evals, _, err := r.c.Nomad.Jobs().Evaluations(j.name, nil)
		if err != nil {
			fmt.Fprintf(&b, " evaluations: %v\n", err)
			continue
		}
		sort.Slice(evals, func(a, c int) bool { return evals[a].CreateIndex < evals[c].CreateIndex })
		for _, e := range evals {
			fmt.Fprintf(&b, " [%s %s by %s", e.ID[:8], e.Status, e.TriggeredBy)
			for tg, m := range e.FailedTGAllocs {
				fmt.Fprintf(&b, " %s: filtered %v exhausted %v", tg, m.ConstraintFiltered, m.DimensionExhausted)
			}
			b.WriteString("]")
		}
		b.WriteString("\n")
	}
	h := r.poll()
	for _, g := range r.gpus {
		fam, err := familyOf(r.c, g)
		if err != nil {
			fam = err.Error()
		}
		fmt.Fprintf(&b, "GPU %s: allocatable %s, held whole by %d, %d shares held\n", vocab.ShortUUID(g), fam, h.whole[g], h.shares[g])
	}
	b.WriteString("plugin's last decisions:\n")
	b.WriteString(grepTail(filepath.Join(r.c.Dir, "nomad.log"), "device_mgr.nomad-device-gpushare: partition", 40))
	return b.String()
}

// grepTail returns the last n lines of a file that contain s.
func grepTail(path, s string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(%v)", err)
	}
	var out []string
	for _, line := range strings.Split(string(data), "\n") {
		if strings.Contains(line, s) {
			out = append(out, line)
		}
	}
	if len(out) > n {
		out = out[len(out)-n:]
	}
	return strings.Join(out, "\n")
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
