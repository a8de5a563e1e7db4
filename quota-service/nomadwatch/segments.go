package nomadwatch

import (
	"slices"
	"sort"
	"time"

	"github.com/gpushare/nomad-gpushare/internal/feasible"
	"github.com/gpushare/nomad-gpushare/scheduler/cluster"
	"github.com/gpushare/nomad-gpushare/vocab"
	"github.com/gpushare/nomad-gpushare/vocab/nomadread"
	nomadapi "github.com/hashicorp/nomad/api"
)

// A View is assembled node by node (docs/scale.md, The quota service at
// 5,000 nodes): each node and the allocations on it make one segment, the
// part of the snapshot that depends only on them, on their jobs as
// addJobs reads them, and on the time (an allocation leaves its minimum
// runtime, a failed one's reschedule attempts age out). A Builder keeps
// the segments between cycles (segmentMemo) and derives again only those
// of the nodes the events changed, of the nodes that run a job whose
// reading changed, and of the nodes whose time came; a listing adopted
// derives them all again. Assemble without a memo derives them all: the
// check that the kept ones are right (TestIncrementalViewEqualsRebuild).

// nodeData is what one segment is derived from: the node as listed (nil
// when Nomad does not list it) and the allocations on it in ID order, each
// with its resources as the cache read them.
type nodeData struct {
	id     string
	stub   *nomadapi.NodeListStub
	full   *nomadapi.Node
	dev    *nodeDevices
	allocs []*nomadapi.AllocationListStub
	res    []*allocResources
}

// empty says the segment has nothing to derive: no node, no allocation.
func (d *nodeData) empty() bool { return d.stub == nil && len(d.allocs) == 0 }

// jobCounts are a job's allocations that are live and that run.
type jobCounts struct{ live, running int }

// nodeSegment is what one node and its allocations put into a View.
type nodeSegment struct {
	data *nodeData
	// node is the node in the snapshot when hasNode: a GPU node (gpuNode),
	// or one added for an allocation that holds GPUs it does not
	// publish. fact is what the feasibility checks read of it.
	node             cluster.Node
	hasNode, gpuNode bool
	fact             feasible.Node
	// The warnings of each of Assemble's steps.
	nodeWarnings, allocWarnings, settleWarnings []string
	allocs                                      []cluster.Allocation
	// versions are the job versions of its elastic groups' live
	// allocations, by allocation ID (dropLeaving).
	versions map[string]uint64
	projects []string
	counts   map[string]jobCounts
	slots    map[string]map[string]slotCounts
	// jobs are the job Keys of its allocations (what job changes must
	// derive it again).
	jobs []string
	// shareUnit is what nomadread.ShareUnit reads of the node's share
	// groups, 0 when it has none.
	shareUnit int
	// expiry is when (Unix ns) the time changes what it holds; 0: never.
	expiry int64
}

// nodeDataFromInputs groups Assemble's inputs by node, in node ID order.
func nodeDataFromInputs(in Inputs) []*nodeData {
	byID := map[string]*nodeData{}
	get := func(id string) *nodeData {
		d := byID[id]
		if d == nil {
			d = &nodeData{id: id}
			byID[id] = d
		}
		return d
	}
	for _, n := range in.Nodes {
		d := get(n.ID)
		d.stub, d.full, d.dev = n, in.NodeInfo[n.ID], in.Devices[n.ID]
	}
	for _, al := range in.Allocations {
		d := get(al.NodeID)
		d.allocs = append(d.allocs, al)
	}
	out := make([]*nodeData, 0, len(byID))
	for _, d := range byID {
		sortAllocs(d.allocs)
		d.res = make([]*allocResources, len(d.allocs))
		for i, al := range d.allocs {
			if r, ok := in.AllocResources[al.ID]; ok {
				d.res[i] = r
			} else {
				d.res[i] = readAllocResources(al.AllocatedResources)
			}
		}
		out = append(out, d)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].id < out[j].id })
	return out
}

// sortAllocs sorts allocations by node and ID, unless they are already.
func sortAllocs(allocs []*nomadapi.AllocationListStub) {
	byNode := func(x, y *nomadapi.AllocationListStub) int { return compareAllocRefs(refOf(x), refOf(y)) }
	if !slices.IsSortedFunc(allocs, byNode) {
		slices.SortFunc(allocs, byNode)
	}
}

// deriveSegment derives node d's segment with the cycle's jobs (as addJobs
// read them), specs and time, by running Assemble's node and allocation
// steps on d alone.
func deriveSegment(d *nodeData, jobs map[string]*JobInfo, specs map[string]*nomadapi.Job, now time.Time) *nodeSegment {
	seg := &nodeSegment{data: d, counts: map[string]jobCounts{}, slots: map[string]map[string]slotCounts{}}
	a := &assembler{in: segmentInputs(d, specs, now), v: &View{Snapshot: &cluster.Snapshot{}, Jobs: map[string]*JobInfo{}},
		projects: map[string]bool{}, nodes: map[string]*nodeGPUs{}, readDevs: map[string]*nodeDevices{}, jobKeys: map[[2]string]string{}}
	a.snap = a.v.Snapshot
	seg.jobs = segmentJobs(d, jobs, a.v.Jobs)
	a.addNodes()
	seg.gpuNode = len(a.snap.Nodes) > 0
	seg.nodeWarnings, a.v.Warnings = a.v.Warnings, nil
	a.addAllocations()
	seg.allocWarnings, a.v.Warnings = a.v.Warnings, nil
	a.settleNodeResources()
	seg.settleWarnings = a.v.Warnings
	seg.collect(a)
	seg.shareUnit = shareUnitOfNode(d.stub)
	seg.expiry = expiryOf(d, jobs, specs, now)
	return seg
}

// segmentInputs are Assemble's inputs of node d alone.
func segmentInputs(d *nodeData, specs map[string]*nomadapi.Job, now time.Time) Inputs {
	in := Inputs{Devices: map[string]*nodeDevices{}, NodeInfo: map[string]*nomadapi.Node{}, AllocResources: map[string]*allocResources{},
		Allocations: d.allocs, Specs: specs, Now: now}
	if d.stub != nil {
		in.Nodes = []*nomadapi.NodeListStub{d.stub}
		if d.dev != nil {
			in.Devices[d.id] = d.dev
		}
		if d.full != nil {
			in.NodeInfo[d.id] = d.full
		}
	}
	for i, al := range d.allocs {
		in.AllocResources[al.ID] = d.res[i]
	}
	return in
}

// segmentJobs puts into own a copy of the reading of every job of node
// d's allocations (without counts, which the segment makes) and returns
// their Keys, those not listed included.
func segmentJobs(d *nodeData, jobs, own map[string]*JobInfo) []string {
	var keys []string
	seen := map[string]bool{}
	for _, al := range d.allocs {
		key := Key(al.Namespace, al.JobID)
		if seen[key] {
			continue
		}
		seen[key] = true
		keys = append(keys, key)
		if info := jobs[key]; info != nil {
			c := *info
			c.Live, c.Running, c.Queued, c.Pending = 0, 0, 0, nil
			own[key] = &c
		}
	}
	return keys
}

// collect takes what the segment's assembler a made: its node and facts,
// allocations, projects, job counts and slots.
func (seg *nodeSegment) collect(a *assembler) {
	seg.allocs = a.snap.Allocations
	seg.versions = a.elasticVersions
	if len(a.snap.Nodes) > 0 {
		seg.node, seg.hasNode = a.snap.Nodes[0], true
		seg.fact = a.nodeFacts()[0]
	}
	for _, p := range a.snap.Projects {
		seg.projects = append(seg.projects, p.Name)
	}
	for k, info := range a.v.Jobs {
		if info.Live > 0 || info.Running > 0 {
			seg.counts[k] = jobCounts{live: info.Live, running: info.Running}
		}
	}
	for k, groups := range a.countSlots() {
		seg.slots[k] = map[string]slotCounts{}
		for g, c := range groups {
			seg.slots[k][g] = *c
		}
	}
}

// shareUnitOfNode is nomadread.ShareUnit of the node's share groups, or 0
// when it publishes none.
func shareUnitOfNode(n *nomadapi.NodeListStub) int {
	if n == nil || n.NodeResources == nil {
		return 0
	}
	for _, g := range n.NodeResources.Devices {
		if g != nil && g.Vendor == vocab.Vendor && g.Type == vocab.TypeShare {
			return nomadread.ShareUnit(n.NodeResources.Devices)
		}
	}
	return 0
}

// expiryOf is the first time after now at which the time alone changes
// node d's segment: an allocation leaves its job's minimum runtime or
// its move cooldown, or a
// reschedule attempt of a failed one leaves its policy's interval; 0 when
// none will.
func expiryOf(d *nodeData, jobs map[string]*JobInfo, specs map[string]*nomadapi.Job, now time.Time) int64 {
	var first int64
	at := func(t int64) {
		if t > now.UnixNano() && (first == 0 || t < first) {
			first = t
		}
	}
	for _, al := range d.allocs {
		key := Key(al.Namespace, al.JobID)
		if info := jobs[key]; info != nil && info.MinRuntime > 0 {
			at(al.CreateTime + int64(info.MinRuntime))
		}
		if info := jobs[key]; info != nil && info.Movable {
			at(al.CreateTime + int64(info.MoveCooldown))
		}
		if al.ClientStatus != "failed" || al.RescheduleTracker == nil {
			continue
		}
		tg := groupOf(specs[key], al.TaskGroup)
		if tg == nil || tg.ReschedulePolicy == nil || tg.ReschedulePolicy.Interval == nil || *tg.ReschedulePolicy.Interval <= 0 {
			continue
		}
		for _, e := range al.RescheduleTracker.Events {
			at(e.RescheduleTime + int64(*tg.ReschedulePolicy.Interval))
		}
	}
	return first
}

// segmentTotals are what the segments add up to, kept as segments come
// and go.
type segmentTotals struct {
	counts   map[string]jobCounts
	slots    map[string]map[string]*slotCounts
	projects map[string]int
	// slotsMoved is, by job Key, when (a count of addSlots calls) a
	// segment last added or took away slots of the job; absent: never
	// since its slots were last empty.
	slotsMoved map[string]uint64
	moves      uint64
	// touched are the jobs whose slots moved since the memo's update
	// began (the View's), countsTouched those whose counts did.
	touched, countsTouched map[string]bool
}

func newSegmentTotals() *segmentTotals {
	return &segmentTotals{counts: map[string]jobCounts{}, slots: map[string]map[string]*slotCounts{}, projects: map[string]int{},
		slotsMoved: map[string]uint64{}, touched: map[string]bool{}, countsTouched: map[string]bool{}}
}

// add adds segment s (sign 1) or takes it away (sign -1).
func (t *segmentTotals) add(s *nodeSegment, sign int) {
	for k, c := range s.counts {
		t.countsTouched[k] = true
		n := t.counts[k]
		n.live, n.running = n.live+sign*c.live, n.running+sign*c.running
		if n == (jobCounts{}) {
			delete(t.counts, k)
		} else {
			t.counts[k] = n
		}
	}
	for k, groups := range s.slots {
		for g, c := range groups {
			t.addSlots(k, g, c, sign)
		}
	}
	for _, p := range s.projects {
		if t.projects[p] += sign; t.projects[p] == 0 {
			delete(t.projects, p)
		}
	}
}

func (t *segmentTotals) addSlots(key, group string, c slotCounts, sign int) {
	t.moves++
	t.slotsMoved[key], t.touched[key] = t.moves, true
	if t.slots[key] == nil {
		t.slots[key] = map[string]*slotCounts{}
	}
	n := t.slots[key][group]
	if n == nil {
		n = &slotCounts{}
		t.slots[key][group] = n
	}
	n.live, n.settled = n.live+sign*c.live, n.settled+sign*c.settled
	if *n == (slotCounts{}) {
		delete(t.slots[key], group)
		if len(t.slots[key]) == 0 {
			delete(t.slots, key)
			delete(t.slotsMoved, key)
		}
	}
}

// segmentSet is the segments of one View, in node ID order, with their
// totals.
type segmentSet struct {
	segs   []*nodeSegment
	totals *segmentTotals
}

// deriveAll derives every node's segment.
func deriveAll(data []*nodeData, jobs map[string]*JobInfo, specs map[string]*nomadapi.Job, now time.Time) segmentSet {
	set := segmentSet{segs: make([]*nodeSegment, 0, len(data)), totals: newSegmentTotals()}
	for _, d := range data {
		s := deriveSegment(d, jobs, specs, now)
		set.segs = append(set.segs, s)
		set.totals.add(s, 1)
	}
	return set
}

// addSegments puts the segments into the View: the nodes (GPU nodes in ID
// order, then the nodes added for allocations), the allocations in node
// order, the jobs' counts and the projects with work; warnings in
// Assemble's order of steps, with the job steps' (jobWarnings) after the
// nodes'.
func (a *assembler) addSegments(set segmentSet, jobWarnings []string) {
	a.shareUnit = a.shareUnitOfSegments(set.segs)
	a.factsSet = true
	for _, s := range set.segs {
		a.v.Warnings = append(a.v.Warnings, s.nodeWarnings...)
	}
	a.v.Warnings = append(a.v.Warnings, jobWarnings...)
	a.snap.Allocations = a.in.memo.viewAllocs(set.segs)
	for _, s := range set.segs {
		a.v.Warnings = append(a.v.Warnings, s.allocWarnings...)
		for id, v := range s.versions {
			a.noteVersion(id, v)
		}
	}
	a.snap.Nodes, a.facts = a.in.memo.viewNodes(set.segs)
	for _, gpu := range []bool{true, false} {
		for _, s := range set.segs {
			if s.hasNode && s.gpuNode == gpu {
				a.v.Warnings = append(a.v.Warnings, s.settleWarnings...)
			}
		}
	}
	if a.fresh == nil {
		for key, info := range a.v.Jobs {
			c := set.totals.counts[key]
			info.Live, info.Running = c.live, c.running
		}
	} else {
		for key := range set.totals.countsTouched {
			if info := a.writable(key); info != nil {
				c := set.totals.counts[key]
				info.Live, info.Running = c.live, c.running
			}
		}
	}
	for p := range set.totals.projects {
		a.addProject(p)
	}
}

// shareUnitOfSegments is shareUnitOf read from the segments.
func (a *assembler) shareUnitOfSegments(segs []*nodeSegment) int {
	seen := map[int]int{}
	for _, s := range segs {
		if s.shareUnit > 0 {
			seen[s.shareUnit]++
		}
	}
	return a.pickShareUnit(seen)
}
