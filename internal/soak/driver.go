package soak

import (
	"context"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"time"

	consulapi "github.com/hashicorp/consul/api"
	nomadapi "github.com/hashicorp/nomad/api"

	"github.com/gpushare/nomad-gpushare/quota-service/kvlayout"
	"github.com/gpushare/nomad-gpushare/quota-service/nomadwatch"
	"github.com/gpushare/nomad-gpushare/quota-service/state"
	"github.com/gpushare/nomad-gpushare/vocab"
)

// ownerState is what the owner last did to a job.
type ownerState int

const (
	// active: registered by its owner and neither stopped nor purged
	// since; its task has not been told to end.
	active ownerState = iota
	// finished: its task was told to exit (or fail).
	finished
	// ownerStopped: its owner stopped it.
	ownerStopped
	// purged: its owner purged it.
	purged
)

func (s ownerState) String() string {
	return [...]string{"active", "finished", "owner-stopped", "purged"}[s]
}

// kind is the shape of a job the driver submits.
type kind struct {
	name string
	// whole and shares each group's task asks; groups and count the
	// groups and each group's instances.
	whole, shares, groups, count int
	// limit is the task's gpushare_limit ("" none); minCount makes the
	// groups elastic; gang makes the job a gang.
	limit    string
	minCount int
	gang     bool
}

// single says whether the job is one allocation of one GPU or less: the
// work the restore check follows.
func (k kind) single() bool {
	return k.groups == 1 && k.count == 1 && (k.whole == 1 && k.shares == 0 || k.whole == 0 && k.shares > 0)
}

// job is one job the driver owns.
type job struct {
	ns, id string
	kind   kind
	rev    int
	state  ownerState
	// busy is set while an owner action on it is in flight; seq counts
	// its actions; uncertain says the last one failed, so Nomad may or
	// may not have applied it.
	busy      bool
	seq       uint64
	uncertain bool
	submitted time.Time
}

// jobTable is the driver's jobs, shared with the checker.
type jobTable struct {
	mu   sync.Mutex
	jobs map[string]*job // ns/id
}

// jobSnap is what the checker reads of one job.
type jobSnap struct {
	ns, id    string
	kind      kind
	state     ownerState
	seq       uint64
	busy      bool
	uncertain bool
}

func (t *jobTable) snapshot() map[string]jobSnap {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make(map[string]jobSnap, len(t.jobs))
	for k, j := range t.jobs {
		out[k] = jobSnap{ns: j.ns, id: j.id, kind: j.kind, state: j.state, seq: j.seq, busy: j.busy, uncertain: j.uncertain}
	}
	return out
}

// driver submits random work and acts as the jobs' owners.
type driver struct {
	rng      *rand.Rand
	nomad    *nomadapi.Client
	consul   *consulapi.Client
	layout   kvlayout.Layout
	control  string
	hist     *History
	table    *jobTable
	projects []string
	gpus     int
	maxJobs  int
	next     int

	// quotas are the projects' guarantees as last written valid; a
	// project whose last document was bad is absent.
	qmu        sync.Mutex
	quotas     map[string]float64
	lastQuota  time.Time
	submitted  int
	quotaEdits int

	// store reads the suspension records; avoid lists the known
	// findings whose trigger the driver leaves out (Config.Avoid).
	store *state.Store
	avoid map[string]bool
}

// Known findings of the soak: bugs in the quota service it found that
// are not fixed yet. Config.Avoid keeps the driver from the owner action
// that triggers one; the checker names a violation that is a case of one
// (knownFinding), and Result.Known lists those. Fixed ones leave the
// matching: a recurrence is a plain violation. (Fixed: an instance
// panicked in nomadwatch's adoptTagged on a spec cached without the
// service's tag, after an owner's stop of a resumed job or a failover; a
// new leader closed its own suspension as owner-stopped, taking a stale
// untagged spec for a removed tag; an owner's scale of a suspended job
// was taken for a stop, so the job never came back: it now stays
// suspended and resumes at the owner's counts; and so were a scale right
// after the service's stop, seen in the job's spec before its listing,
// and a scale to the same count after an adopted one, which makes no new
// version.)
const (
	// FindingScaleSuspended names the owner's scale of a suspended job,
	// which Config.Avoid can still leave out (fixed: no violation is
	// matched to it any more).
	FindingScaleSuspended = "scale-suspended"
)

// knownFinding names the known finding a violation's message is a case
// of, "" when none. No finding is open.
func knownFinding(msg string) string {
	_ = msg
	return ""
}

// recordPhase is the phase of j's verified suspension record, "" when it
// has none, "?" when the store cannot be read.
func (d *driver) recordPhase(j *job) state.Phase {
	recs, err := d.store.Suspensions(context.Background())
	if err != nil {
		return "?"
	}
	for _, r := range recs.Verified {
		if r.Namespace == j.ns && r.Job == j.id {
			return r.Phase
		}
	}
	return ""
}

var kinds = []struct {
	weight int
	k      kind
}{
	{6, kind{name: "whole1", whole: 1, groups: 1, count: 1}},
	{2, kind{name: "whole2", whole: 2, groups: 1, count: 1}},
	{5, kind{name: "share", shares: 25, groups: 1, count: 1}},
	{4, kind{name: "share-limit", shares: 40, groups: 1, count: 1, limit: "1.0"}},
	{2, kind{name: "multigroup", whole: 1, groups: 2, count: 1}},
	{2, kind{name: "gang", whole: 1, groups: 2, count: 1, gang: true}},
	{2, kind{name: "elastic", whole: 1, groups: 1, count: 3, minCount: 1}},
}

func (d *driver) pickKind() kind {
	total := 0
	for _, k := range kinds {
		total += k.weight
	}
	n := d.rng.Intn(total)
	for _, k := range kinds {
		if n < k.weight {
			k := k.k
			if k.name == "share" || k.name == "share-limit" {
				k.shares = []int{10, 25, 30, 50}[d.rng.Intn(4)]
			}
			return k
		}
		n -= k.weight
	}
	panic("unreachable")
}

// nomadJob is the spec of j: a batch job whose task loops until its
// control file exists, then exits 0, or 1 when its fail file exists.
func (d *driver) nomadJob(j *job) *nomadapi.Job {
	nj := nomadapi.NewBatchJob(j.id, j.id, "global", 50)
	nj.Namespace = &j.ns
	nj.Datacenters = []string{"dc1"}
	nj.Meta = map[string]string{"soak.rev": strconv.Itoa(j.rev)}
	if j.kind.gang {
		nj.Meta[nomadwatch.MetaGang] = "true"
	}
	done := filepath.Join(d.control, j.ns+"-"+j.id)
	script := fmt.Sprintf("while [ ! -e %[1]s ] && [ ! -e %[1]s.fail ]; do sleep 0.3; done; [ ! -e %[1]s.fail ]", done)
	for g := range j.kind.groups {
		task := nomadapi.NewTask("work", "raw_exec").SetConfig("command", "/bin/sh").SetConfig("args", []string{"-c", script})
		task.Resources = &nomadapi.Resources{CPU: ptr(20), MemoryMB: ptr(16)}
		task.KillTimeout = ptr(time.Second)
		if j.kind.whole > 0 {
			task.Resources.Devices = append(task.Resources.Devices, &nomadapi.RequestedDevice{Name: "nvidia/gpu", Count: ptr(uint64(j.kind.whole))})
		}
		if j.kind.shares > 0 {
			task.Resources.Devices = append(task.Resources.Devices, &nomadapi.RequestedDevice{Name: "nvidia/gpu-share", Count: ptr(uint64(j.kind.shares))})
		}
		if j.kind.limit != "" {
			task.Meta = map[string]string{vocab.LimitMetaKey: j.kind.limit}
		}
		tg := nomadapi.NewTaskGroup(fmt.Sprintf("g%d", g+1), j.kind.count).AddTask(task)
		if j.kind.minCount > 0 {
			tg.Meta = map[string]string{nomadwatch.MetaMinCount: strconv.Itoa(j.kind.minCount)}
		}
		tg.RestartPolicy = &nomadapi.RestartPolicy{Attempts: ptr(0), Mode: ptr("fail")}
		tg.ReschedulePolicy = &nomadapi.ReschedulePolicy{Attempts: ptr(0), Unlimited: ptr(false)}
		nj.AddTaskGroup(tg)
	}
	return nj
}

// act runs one owner action on j: mark busy, do, record the outcome.
func (d *driver) act(j *job, what string, do func() error, after ownerState) {
	d.table.mu.Lock()
	j.busy = true
	j.seq++
	d.table.mu.Unlock()
	err := do()
	d.table.mu.Lock()
	j.busy = false
	j.seq++
	if err != nil {
		j.uncertain = true
	} else {
		j.uncertain = false
		j.state = after
	}
	d.table.mu.Unlock()
	if err != nil {
		d.hist.Add("owner %s %s/%s (%s): failed: %v", what, j.ns, j.id, j.kind.name, err)
		return
	}
	d.hist.Add("owner %s %s/%s (%s)", what, j.ns, j.id, j.kind.name)
}

// endedByDrain notes that a node drain ended job k's task (Nomad does
// not migrate a batch job's allocation): an active job counts as told to
// end, so Nomad's collector may take it.
func (d *driver) endedByDrain(k string) {
	d.table.mu.Lock()
	j := d.table.jobs[k]
	ended := j != nil && j.state == active
	if ended {
		j.state = finished
		j.seq++
	}
	d.table.mu.Unlock()
	if ended {
		d.hist.Add("operator drain ended %s (%s): Nomad stopped its allocation and does not migrate a batch job's", k, j.kind.name)
	}
}

func (d *driver) register(j *job) error {
	_, _, err := d.nomad.Jobs().Register(d.nomadJob(j), &nomadapi.WriteOptions{Namespace: j.ns})
	return err
}

// step does one random thing.
func (d *driver) step() {
	d.table.mu.Lock()
	var live, ended []*job
	for _, j := range d.table.jobs {
		switch j.state {
		case active:
			live = append(live, j)
		case ownerStopped, purged:
			ended = append(ended, j)
		}
	}
	d.table.mu.Unlock()
	sort.Slice(live, func(a, b int) bool { return live[a].id < live[b].id })
	sort.Slice(ended, func(a, b int) bool { return ended[a].id < ended[b].id })
	n := d.rng.Intn(100)
	switch {
	case n < 45 && len(live) < d.maxJobs:
		d.submit()
	case n < 60 && len(live) > 0:
		j := live[d.rng.Intn(len(live))]
		fail := d.rng.Intn(4) == 0
		name := filepath.Join(d.control, j.ns+"-"+j.id)
		what := "finish"
		if fail {
			name += ".fail"
			what = "fail"
		}
		d.act(j, what, func() error { return os.WriteFile(name, nil, 0o644) }, finished)
	case n < 67 && len(live) > 0:
		j := live[d.rng.Intn(len(live))]
		d.act(j, "stop", func() error {
			_, _, err := d.nomad.Jobs().Deregister(j.id, false, &nomadapi.WriteOptions{Namespace: j.ns})
			return err
		}, ownerStopped)
	case n < 71 && len(live) > 0:
		j := live[d.rng.Intn(len(live))]
		d.act(j, "purge", func() error {
			_, _, err := d.nomad.Jobs().Deregister(j.id, true, &nomadapi.WriteOptions{Namespace: j.ns})
			return err
		}, purged)
	case n < 79 && len(ended) > 0:
		// start again (`nomad job start`, or run the file again after a purge)
		j := ended[d.rng.Intn(len(ended))]
		d.act(j, "start", func() error { return d.register(j) }, active)
	case n < 83 && len(live) > 0:
		// a new version: the owner edits the job and runs it again
		j := live[d.rng.Intn(len(live))]
		d.act(j, "re-register", func() error { j.rev++; return d.register(j) }, active)
	case n < 91 && len(live) > 0:
		var elastic []*job
		for _, j := range live {
			if j.kind.minCount > 0 {
				elastic = append(elastic, j)
			}
		}
		if len(elastic) == 0 {
			return
		}
		j := elastic[d.rng.Intn(len(elastic))]
		if ph := d.recordPhase(j); d.avoid[FindingScaleSuspended] && (ph == state.PhaseStopping || ph == state.PhaseSuspended || ph == "?") {
			d.hist.Add("owner scale %s/%s skipped: its record is stopping or suspended (known finding %s)", j.ns, j.id, FindingScaleSuspended)
			return
		}
		count := j.kind.minCount + d.rng.Intn(3)
		d.act(j, fmt.Sprintf("scale g1 to %d", count), func() error {
			_, _, err := d.nomad.Jobs().Scale(j.id, "g1", &count, "soak owner scale", false, nil, &nomadapi.WriteOptions{Namespace: j.ns})
			return err
		}, active)
	case n < 95:
		d.editQuotas(d.rng.Intn(4) == 0)
	}
}

func (d *driver) submit() {
	ns := d.projects[d.rng.Intn(len(d.projects))]
	d.next++
	j := &job{ns: ns, id: fmt.Sprintf("j%03d", d.next), kind: d.pickKind(), submitted: time.Now()}
	d.table.mu.Lock()
	d.table.jobs[ns+"/"+j.id] = j
	d.table.mu.Unlock()
	d.act(j, "submit", func() error { return d.register(j) }, active)
	d.submitted++
}

// editQuotas writes new guarantees for every project, summing to at most
// the cluster's GPUs less one, or (bad) a document the service must
// reject for one project.
func (d *driver) editQuotas(bad bool) {
	d.qmu.Lock()
	defer d.qmu.Unlock()
	d.quotaEdits++
	if bad {
		p := d.projects[d.rng.Intn(len(d.projects))]
		doc := []string{`{"guaranteed": `, `{"guaranteed": -3}`, `not json`, `{"guaranteed": "two"}`}[d.rng.Intn(4)]
		if _, err := d.consul.KV().Put(&consulapi.KVPair{Key: d.layout.Quota(p), Value: []byte(doc)}, nil); err != nil {
			d.hist.Add("quota %s bad document: failed: %v", p, err)
			return
		}
		delete(d.quotas, p)
		d.lastQuota = time.Now()
		d.hist.Add("quota %s bad document %q", p, doc)
		return
	}
	left := d.gpus - 1
	g := map[string]int{}
	for _, p := range d.rng.Perm(len(d.projects)) {
		n := d.rng.Intn(min(left, 4) + 1)
		g[d.projects[p]] = n
		left -= n
	}
	for _, p := range d.projects {
		doc := fmt.Sprintf(`{"guaranteed": %d, "priority": %d, "over_quota_weight": 1}`, g[p], 1+d.rng.Intn(10))
		if _, err := d.consul.KV().Put(&consulapi.KVPair{Key: d.layout.Quota(p), Value: []byte(doc)}, nil); err != nil {
			delete(d.quotas, p)
			d.hist.Add("quota %s: failed: %v", p, err)
			continue
		}
		d.quotas[p] = float64(g[p])
	}
	d.lastQuota = time.Now()
	d.hist.Add("quotas %v", g)
}

func (d *driver) quotaView() (map[string]float64, time.Time) {
	d.qmu.Lock()
	defer d.qmu.Unlock()
	out := make(map[string]float64, len(d.quotas))
	for k, v := range d.quotas {
		out[k] = v
	}
	return out, d.lastQuota
}

func ptr[T any](v T) *T { return &v }
