package nomadwatch

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpushare/nomad-gpushare/quota-service/quota"
	"github.com/gpushare/nomad-gpushare/quota-service/state"
	"github.com/gpushare/nomad-gpushare/scheduler/cluster"
	"github.com/gpushare/nomad-gpushare/vocab"
	nomadapi "github.com/hashicorp/nomad/api"
)

// fullInputs copies the whole cache into Assemble's inputs, without a
// memo: the View derived from scratch.
func fullInputs(c *cache) Inputs {
	in := Inputs{NodeInfo: map[string]*nomadapi.Node{}, Devices: map[string]*nodeDevices{}, AllocResources: map[string]*allocResources{}}
	for id, n := range c.nodes {
		in.Nodes = append(in.Nodes, n.stub)
		in.NodeInfo[id], in.Devices[id] = n.full, n.dev
	}
	for _, ref := range c.order {
		a := c.allocs[ref.id]
		in.Allocations = append(in.Allocations, a.stub)
		in.AllocResources[a.stub.ID] = a.res
	}
	for _, j := range c.jobs {
		in.Jobs = append(in.Jobs, j)
	}
	return in
}

// eventWorld makes random events over a few nodes, jobs and allocations,
// and keeps what a Builder adds to the cache: specs, settings, the time.
type eventWorld struct {
	t        testing.TB
	rng      *rand.Rand
	index    uint64
	now      time.Time
	specs    map[string]*nomadapi.Job
	settings []quota.Settings
	// records are the suspension records the Builder read;
	// specChanged the jobs whose spec changed since the last View.
	records     []state.Suspension
	specChanged map[string]bool
	// sent are the events made so far, to replay out of order.
	sent []*nomadapi.Event
	// allocs and jobs are the last allocation and job each event sent,
	// to send again with only the modify index moved.
	allocs map[string]*nomadapi.Allocation
	jobs   map[string]*nomadapi.Job
	// applied says the last step applied an event, and news what the
	// cache said of it (cache.takeNews); quietSilent counts the events
	// that moved only a modify index and were no news.
	applied, news bool
	quietSilent   int
}

const (
	worldNodes  = 6
	worldJobs   = 6
	worldAllocs = 24
)

func (w *eventWorld) pick(n int) int { return w.rng.IntN(n) }

func (w *eventWorld) gpus(node int) []string {
	return []string{fmt.Sprintf("GPU-%d-0", node), fmt.Sprintf("GPU-%d-1", node), fmt.Sprintf("GPU-%d-2", node)}
}

// nodeEvent registers or updates node i: its GPUs whole or in shares
// (of either shares_per_gpu), its status and drain, its CPU and memory.
func (w *eventWorld) nodeEvent(i int) *nomadapi.Event {
	id := fmt.Sprintf("n%d", i)
	var devs []*nomadapi.NodeDeviceResource
	if w.pick(5) > 0 {
		whole := &nomadapi.NodeDeviceResource{Vendor: vocab.Vendor, Type: vocab.TypeWhole, Name: "H100"}
		for k, u := range w.gpus(i) {
			if k == 2 && w.pick(2) == 0 {
				// Nodes that differ in shares_per_gpu change the unit
				// of pending share requests (pickShareUnit).
				per := []int{vocab.DefaultSharesPerGPU, 4}[w.pick(2)]
				g := &nomadapi.NodeDeviceResource{Vendor: vocab.Vendor, Type: vocab.TypeShare, Name: "H100-" + u,
					Attributes: map[string]*nomadapi.Attribute{vocab.SharesAttr: {IntVal: ptr(int64(per))}}}
				for s := 0; s < per; s++ {
					g.Instances = append(g.Instances, &nomadapi.NodeDevice{ID: vocab.Share(u, s), Healthy: true})
				}
				devs = append(devs, g)
				continue
			}
			whole.Instances = append(whole.Instances, &nomadapi.NodeDevice{ID: u, Healthy: w.pick(8) > 0})
		}
		devs = append(devs, whole)
	}
	n := &nomadapi.Node{ID: id, Name: id, Datacenter: []string{"dc1", "dc2"}[w.pick(2)], NodePool: "default", ModifyIndex: w.index,
		Status: []string{"ready", "ready", "down"}[w.pick(3)], Drain: w.pick(6) == 0, SchedulingEligibility: "eligible",
		Attributes: map[string]string{"nomad.version": "1.9.0"}, Meta: map[string]string{"rank": fmt.Sprint(w.pick(3))},
		NodeResources: &nomadapi.NodeResources{Devices: devs, Cpu: nomadapi.NodeCpuResources{CpuShares: int64(4000 * w.pick(3))},
			Memory: nomadapi.NodeMemoryResources{MemoryMB: 16000}}}
	return &nomadapi.Event{Topic: nomadapi.TopicNode, Type: "NodeRegistration", Key: id, Index: w.index, Payload: wire(w.t, "Node", n)}
}

// allocEvent places, updates or stops allocation i: on one of the nodes
// (or one that never registers), holding GPUs of its node or not, or
// changes its status in place (same placement).
func (w *eventWorld) allocEvent(i int) *nomadapi.Event {
	id := fmt.Sprintf("a%02d", i)
	if prev := w.allocs[id]; prev != nil && w.pick(2) == 0 {
		// A client's update of the same placement: its status.
		a := *prev
		a.ClientStatus = []string{"pending", "running", "complete", "failed"}[w.pick(4)]
		a.DesiredStatus = []string{"run", "run", "run", "stop"}[w.pick(4)]
		a.ModifyIndex = w.index
		w.allocs[id] = &a
		return &nomadapi.Event{Topic: nomadapi.TopicAllocation, Type: "AllocationUpdated", Key: id, Index: w.index, Payload: wire(w.t, "Allocation", &a)}
	}
	node := w.pick(worldNodes + 1)
	var held []string
	for _, u := range w.gpus(node) {
		switch w.pick(4) {
		case 0:
			held = append(held, u)
		case 1:
			held = append(held, vocab.Share(u, w.pick(vocab.DefaultSharesPerGPU)))
		}
	}
	typ := vocab.TypeWhole
	if len(held) > 0 && w.pick(2) == 0 {
		typ = vocab.TypeShare
	}
	a := &nomadapi.Allocation{ID: id, Name: fmt.Sprintf("j.g[%d]", w.pick(3)), Namespace: []string{"a", "b"}[w.pick(2)],
		JobID: fmt.Sprintf("j%d", w.pick(worldJobs)), TaskGroup: "g", NodeID: fmt.Sprintf("n%d", node),
		DesiredStatus: []string{"run", "run", "run", "stop"}[w.pick(4)],
		ClientStatus:  []string{"pending", "running", "running", "complete", "failed"}[w.pick(5)],
		CreateIndex:   w.index, ModifyIndex: w.index, AllocModifyIndex: w.index,
		CreateTime: w.now.Add(-time.Duration(w.pick(20)) * time.Minute).UnixNano(),
		AllocatedResources: &nomadapi.AllocatedResources{Tasks: map[string]*nomadapi.AllocatedTaskResources{"t": {
			Cpu: nomadapi.AllocatedCpuResources{CpuShares: int64(500 * w.pick(4))}, Memory: nomadapi.AllocatedMemoryResources{MemoryMB: 1000},
			Devices: []*nomadapi.AllocatedDeviceResource{{Vendor: vocab.Vendor, Type: typ, DeviceIDs: held}}}}}}
	if a.ClientStatus == "failed" && w.pick(2) == 0 {
		a.RescheduleTracker = &nomadapi.RescheduleTracker{Events: []*nomadapi.RescheduleEvent{
			{RescheduleTime: w.now.Add(-time.Duration(w.pick(10)) * time.Minute).UnixNano()}}}
	}
	w.allocs[id] = a
	return &nomadapi.Event{Topic: nomadapi.TopicAllocation, Type: "AllocationUpdated", Key: id, Index: w.index, Payload: wire(w.t, "Allocation", a)}
}

// jobEvent registers, updates or purges job i of a namespace.
func (w *eventWorld) jobEvent(ns string, i int) *nomadapi.Event {
	id := fmt.Sprintf("j%d", i)
	meta := map[string]string{}
	if w.pick(3) == 0 {
		meta[MetaMinRuntime] = []string{"1m", "7m", "soon"}[w.pick(3)]
	}
	if w.pick(4) == 0 {
		meta[MetaPreempt] = "false"
	}
	if w.pick(3) == 0 {
		meta[MetaMovable] = "true"
	}
	j := &nomadapi.Job{ID: ptr(id), Namespace: ptr(ns), Type: ptr([]string{"batch", "service", "system"}[w.pick(3)]),
		Status: ptr([]string{"running", "pending", "dead"}[w.pick(3)]), Stop: ptr(w.pick(5) == 0), Priority: ptr(10 * (1 + w.pick(9))),
		ModifyIndex: ptr(w.index), JobModifyIndex: ptr(w.index), Meta: meta}
	p := wire(w.t, "Job", j)
	typ := "JobRegistered"
	if w.pick(6) == 0 {
		p["Deleted"], typ = true, "JobDeregistered"
	} else if w.pick(2) == 0 {
		w.newSpec(ns, j)
	}
	if typ == "JobRegistered" {
		w.jobs[Key(ns, id)] = j
	}
	return &nomadapi.Event{Topic: nomadapi.TopicJob, Type: typ, Key: id, Index: w.index, Payload: p}
}

// quietEvent sends an allocation or job sent before again with only its
// modify index moved, as a client's task-state update or a job's status
// write does; nil when none was sent yet.
func (w *eventWorld) quietEvent() *nomadapi.Event {
	if w.pick(2) == 0 && len(w.allocs) > 0 {
		a := *w.allocs[slices.Sorted(maps.Keys(w.allocs))[w.pick(len(w.allocs))]]
		a.ModifyIndex, a.ModifyTime = w.index, w.now.UnixNano()+int64(w.index)
		return &nomadapi.Event{Topic: nomadapi.TopicAllocation, Type: "AllocationUpdated", Key: a.ID, Index: w.index, Payload: wire(w.t, "Allocation", &a)}
	}
	if len(w.jobs) == 0 {
		return nil
	}
	j := *w.jobs[slices.Sorted(maps.Keys(w.jobs))[w.pick(len(w.jobs))]]
	j.ModifyIndex = ptr(w.index)
	return &nomadapi.Event{Topic: nomadapi.TopicJob, Type: "JobRegistered", Key: *j.ID, Index: w.index, Payload: wire(w.t, "Job", &j)}
}

// newSpec is a Builder reading job j's spec again: whole GPUs or
// shares, a gang or not, an elastic group or not, a reschedule policy, a
// version.
func (w *eventWorld) newSpec(ns string, j *nomadapi.Job) {
	task := nomadapi.NewTask("t", "raw_exec")
	ask := &nomadapi.RequestedDevice{Name: "nvidia/gpu", Count: ptr(uint64(1 + w.pick(2)))}
	if w.pick(3) == 0 {
		ask = &nomadapi.RequestedDevice{Name: "nvidia/gpu-share", Count: ptr(uint64(1 + w.pick(30)))}
	}
	task.Resources = &nomadapi.Resources{Devices: []*nomadapi.RequestedDevice{ask}}
	spec := nomadapi.NewBatchJob(*j.ID, *j.ID, "global", *j.Priority)
	spec.Type, spec.Namespace, spec.Version, spec.ModifyIndex = j.Type, ptr(ns), ptr(uint64(w.pick(3))), j.ModifyIndex
	tg := nomadapi.NewTaskGroup("g", 1+w.pick(4)).AddTask(task)
	tg.ReschedulePolicy = &nomadapi.ReschedulePolicy{Attempts: ptr(1 + w.pick(2)), Interval: ptr(time.Duration(1+w.pick(10)) * time.Minute)}
	spec.AddTaskGroup(tg)
	spec.Meta = map[string]string{}
	if w.pick(2) == 0 {
		spec.Datacenters = []string{"dc1"}
	}
	if w.pick(3) == 0 {
		spec.Meta[MetaGang] = "true"
	}
	if w.pick(3) == 0 {
		tg.Meta = map[string]string{MetaMinCount: fmt.Sprint(w.pick(3))}
	}
	w.specs[Key(ns, *j.ID)] = spec
	w.specChanged[Key(ns, *j.ID)] = true
}

// newRecords replaces the suspension records: none, or a few of jobs
// that may or may not be listed, suspended, resuming or resumed.
func (w *eventWorld) newRecords() {
	w.records = nil
	for n := w.pick(3); n > 0; n-- {
		ns, id := []string{"a", "b"}[w.pick(2)], fmt.Sprintf("j%d", w.pick(worldJobs))
		r := state.Suspension{Namespace: ns, Job: id, Project: "p" + ns, Time: w.now.Add(-time.Minute),
			Phase:  []state.Phase{state.PhaseSuspended, state.PhaseResuming, state.PhaseResumed}[w.pick(3)],
			Groups: map[string]int{"g": 1 + w.pick(2)}, Version: uint64(w.pick(3))}
		if w.pick(2) == 0 {
			// Stopped untagged, its spec sealed in the record: a job
			// without a spec (gone from Nomad) comes back from it.
			r.StopVersion, r.StopJobModifyIndex = 4, 20
			if err := r.EncodeSpec(spec(ns, id, "nvidia/gpu", 1), testKeys); err != nil {
				w.t.Fatal(err)
			}
		}
		w.records = append(w.records, r)
	}
}

// newSettings gives the namespaces' projects other settings.
func (w *eventWorld) newSettings() {
	w.settings = nil
	for _, ns := range []string{"a", "b"} {
		if w.pick(4) > 0 {
			w.settings = append(w.settings, quota.Settings{Project: []string{"p", "q"}[w.pick(2)] + ns, Namespace: ns, OverQuotaWeight: 1,
				MinRuntime: time.Duration(w.pick(15)) * time.Minute})
		}
	}
}

// listing is what a full listing of Nomad would read now: the cache's
// objects as new entries.
func listingOf(c *cache, at uint64) *listing {
	l := &listing{kinds: allKinds, index: [numKinds]uint64{at, at, at}, nodes: map[string]nodeEntry{}, allocs: map[string]allocEntry{},
		jobs: maps.Clone(c.jobs)}
	for id, n := range c.nodes {
		l.nodes[id] = nodeEntry{stub: n.stub, full: n.full, dev: n.dev}
	}
	for id, a := range c.allocs {
		st := *a.stub
		a.stub = &st
		l.allocs[id] = a
	}
	return l
}

// step makes one random change; it names it for a failure's log.
func (w *eventWorld) step(c *cache, builder *segmentMemo) (string, *segmentMemo) {
	w.index++
	w.applied = false
	var ev *nomadapi.Event
	what := ""
	switch r := w.pick(100); {
	case r < 20:
		ev, what = w.nodeEvent(w.pick(worldNodes)), "node"
	case r < 24:
		id := fmt.Sprintf("n%d", w.pick(worldNodes))
		ev, what = &nomadapi.Event{Topic: nomadapi.TopicNode, Type: "NodeDeregistration", Key: id, Index: w.index}, "node gone"
	case r < 50:
		ev, what = w.allocEvent(w.pick(worldAllocs)), "allocation"
	case r < 60:
		if ev, what = w.quietEvent(), "modify index only"; ev == nil {
			return "nothing sent yet", builder
		}
	case r < 75:
		ev, what = w.jobEvent([]string{"a", "b"}[w.pick(2)], w.pick(worldJobs)), "job"
	case r < 80:
		key := Key([]string{"a", "b"}[w.pick(2)], fmt.Sprintf("j%d", w.pick(worldJobs)))
		if w.pick(4) == 0 {
			// The Builder reads a spec of a job it does not list only
			// for a record; the record gone, the spec goes.
			delete(w.specs, key)
			w.specChanged[key] = true
			return "spec dropped", builder
		}
		if j := c.jobs[key]; j != nil {
			w.newSpec(j.Namespace, &nomadapi.Job{ID: &j.ID, Type: &j.Type, Priority: &j.Priority, ModifyIndex: &j.ModifyIndex})
		} else if w.pick(2) == 0 {
			// A record's job the listing does not show is read too
			// (readUnlisted).
			ns, id, _ := strings.Cut(key, "/")
			w.newSpec(ns, &nomadapi.Job{ID: &id, Type: ptr("batch"), Priority: ptr(50), ModifyIndex: ptr(w.index)})
		}
		return "spec read", builder
	case r < 82:
		w.newSettings()
		return "settings", builder
	case r < 84:
		w.newRecords()
		return "records", builder
	case r < 90:
		w.now = w.now.Add(time.Duration(w.pick(600)) * time.Second)
		return "time", builder
	case r < 94 && len(w.sent) > 0:
		ev, what = w.sent[w.pick(len(w.sent))], "replay"
	case r < 97:
		c.adopt(listingOf(c, w.index))
		return "resync", builder
	default:
		c.allTouched = true
		return "failed build", builder
	}
	w.sent = append(w.sent, ev)
	if err := c.apply(ev); err != nil {
		w.t.Fatalf("%s: %v", what, err)
	}
	w.applied, w.news = true, c.takeNews()
	if what == "modify index only" && !w.news {
		w.quietSilent++
	}
	return what, builder
}

// views assembles the incremental View (with the memo, which it returns)
// and the View from scratch.
func (w *eventWorld) views(c *cache, memo *segmentMemo) (inc, full *View, _ *segmentMemo) {
	finish := func(in Inputs) *View {
		in.Specs, in.Settings, in.Now, in.MoveCooldown = w.specs, w.settings, w.now, 3*time.Minute
		in.Suspensions, in.Keys = w.records, testKeys
		v := Assemble(in)
		slices.Sort(v.Warnings) // the jobs come from a map
		return v
	}
	in, memo := c.viewInputs(memo)
	if in.changedJobs != nil {
		// readSpecs knows what changed only with a memo that is not new.
		in.specsChanged = w.specChanged
	}
	w.specChanged = map[string]bool{}
	inc = finish(in)
	full = finish(fullInputs(c))
	return inc, full, memo
}

// checkIncremental runs steps random changes from seed and compares the
// incremental View with the View from scratch after each, and the View
// after an event that was no news (which wakes no cycle) with the View
// before it. It returns how many events that moved only a modify index
// were no news.
func checkIncremental(t testing.TB, seed uint64, steps int) (quietSilent int) {
	w := &eventWorld{t: t, rng: rand.New(rand.NewPCG(seed, 26)), now: time.Unix(1_000_000, 0), specs: map[string]*nomadapi.Job{},
		allocs: map[string]*nomadapi.Allocation{}, jobs: map[string]*nomadapi.Job{}, specChanged: map[string]bool{}}
	w.newSettings()
	c := newCache()
	var memo *segmentMemo
	var log []string
	var before, lastInc *View
	var lastSnap cluster.Snapshot
	var lastJobs map[string]JobInfo
	for i := 0; i < steps; i++ {
		var what string
		what, memo = w.step(c, memo)
		log = append(log, what)
		var inc, full *View
		inc, full, memo = w.views(c, memo)
		if !reflect.DeepEqual(inc, full) {
			t.Fatalf("seed %d, step %d (%v): the incremental View differs from the rebuild:\nincremental %s\nrebuild     %s",
				seed, i, log[max(0, len(log)-8):], describe(inc), describe(full))
		}
		if lastInc != nil && !reflect.DeepEqual(*lastInc.Snapshot, lastSnap) {
			t.Fatalf("seed %d, step %d (%v): assembling a View changed the last View's snapshot, which shares its lists:\nnow %+v\nwas %+v",
				seed, i, log[max(0, len(log)-8):], *lastInc.Snapshot, lastSnap)
		}
		if lastInc != nil && !reflect.DeepEqual(jobValues(lastInc.Jobs), lastJobs) {
			t.Fatalf("seed %d, step %d (%v): assembling a View changed the last View's jobs, which it shares:\nnow %+v\nwas %+v",
				seed, i, log[max(0, len(log)-8):], jobValues(lastInc.Jobs), lastJobs)
		}
		lastInc, lastSnap, lastJobs = inc, deepCopy(inc.Snapshot), jobValues(inc.Jobs)
		if w.applied && !w.news && before != nil && !reflect.DeepEqual(full, before) {
			t.Fatalf("seed %d, step %d (%v): an event that was no news changed the View:\nbefore %s\nafter  %s",
				seed, i, log[max(0, len(log)-8):], describe(before), describe(full))
		}
		before = full
	}
	return w.quietSilent
}

// jobValues is a copy of jobs that shares no memory with it.
func jobValues(jobs map[string]*JobInfo) map[string]JobInfo {
	out := make(map[string]JobInfo, len(jobs))
	for k, j := range jobs {
		c := *j
		c.Groups, c.MinCounts, c.Pending = maps.Clone(j.Groups), maps.Clone(j.MinCounts), maps.Clone(j.Pending)
		out[k] = c
	}
	return out
}

// deepCopy is a copy of s that shares no memory with it.
func deepCopy(s *cluster.Snapshot) cluster.Snapshot {
	c := cluster.Snapshot{Nodes: slices.Clone(s.Nodes), Allocations: slices.Clone(s.Allocations), Pending: slices.Clone(s.Pending),
		Projects: slices.Clone(s.Projects), Departments: slices.Clone(s.Departments)}
	for i := range c.Nodes {
		c.Nodes[i].GPUs = slices.Clone(c.Nodes[i].GPUs)
	}
	for i := range c.Allocations {
		c.Allocations[i].GPUs, c.Allocations[i].Ask.Models = slices.Clone(c.Allocations[i].GPUs), slices.Clone(c.Allocations[i].Ask.Models)
	}
	for i := range c.Pending {
		c.Pending[i].Nodes, c.Pending[i].Ask.Models = slices.Clone(c.Pending[i].Nodes), slices.Clone(c.Pending[i].Ask.Models)
	}
	return c
}

// describe is a View's snapshot and jobs for a failure's log.
func describe(v *View) string {
	jobs := map[string]JobInfo{}
	for k, j := range v.Jobs {
		jobs[k] = *j
	}
	return fmt.Sprintf("nodes %+v\nallocations %+v\npending %+v\nprojects %+v\njobs %+v\nwarnings %q",
		v.Snapshot.Nodes, v.Snapshot.Allocations, v.Snapshot.Pending, v.Snapshot.Projects, jobs, v.Warnings)
}

// TestIncrementalViewEqualsRebuild: after any sequence of node,
// allocation and job events (applied, replayed out of order, a listing
// adopted, a Build that failed), spec reads, settings changes and time
// passing, the View assembled from the kept segments equals the View
// assembled from scratch.
func TestIncrementalViewEqualsRebuild(t *testing.T) {
	silent := 0
	for seed := uint64(1); seed <= 20; seed++ {
		silent += checkIncremental(t, seed, 150)
	}
	if silent == 0 {
		t.Error("no event that moved only a modify index was taken for no news: every one wakes a cycle")
	}
	t.Logf("%d events that moved only a modify index were no news", silent)
}

// FuzzIncrementalView is TestIncrementalViewEqualsRebuild from any seed.
func FuzzIncrementalView(f *testing.F) {
	f.Add(uint64(0))
	f.Add(uint64(26))
	f.Fuzz(func(t *testing.T, seed uint64) { checkIncremental(t, seed, 100) })
}
