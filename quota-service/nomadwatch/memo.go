package nomadwatch

import (
	"maps"
	"reflect"
	"slices"
	"time"

	"github.com/gpushare/nomad-gpushare/internal/feasible"
	"github.com/gpushare/nomad-gpushare/quota-service/quota"
	"github.com/gpushare/nomad-gpushare/scheduler/cluster"
	nomadapi "github.com/hashicorp/nomad/api"
)

// segmentMemo keeps the node segments of the last View between cycles,
// so that a cycle derives again only what changed (segments.go).
type segmentMemo struct {
	segs map[string]*nodeSegment
	// ids are the keys of segs, sorted, and order their segments in
	// that order; expiring are the segments whose time comes
	// (nodeSegment.expiry), by ID.
	ids      []string
	order    []*nodeSegment
	expiring map[string]*nodeSegment
	// prints are what each job's segments read of it, by job Key, as of
	// the last View; users are the nodes whose segments read each job.
	prints map[string]jobPrint
	users  map[string]map[string]bool
	totals *segmentTotals
	// jobs are addJobs' readings of the jobs, kept while their listing,
	// spec and the settings (settingsGen) stay the same; cycle counts
	// the Views, so that jobs no longer listed go.
	jobs map[string]*jobEntry
	// warned are the jobs whose reading has warnings.
	warned map[string]bool
	// viewJobs are the last View's jobs (read only), and vanished the
	// jobs its records added (addChangedJobs).
	viewJobs map[string]*JobInfo
	vanished map[string]bool
	// reread are the jobs whose reading this View made anew or dropped
	// (job, pruneJobs), and specOnly the jobs the last View had a spec
	// of but no reading: a print can change only for those
	// (staleByJobs).
	reread      map[string]bool
	specOnly    []string
	settings    []quota.Settings
	settingsGen uint64
	cycle       uint64
	// admissions are constrainPending's, by admissionKey, kept while
	// the nodes whose facts changed (moved: before, after) judge them as
	// before and no node joined or left the snapshot's nodes (reordered).
	admissions map[string]*keptAdmission
	// groupKeys are the last View's pending groups' task groups and
	// admission keys (constrainPending).
	groupKeys map[specGroup]groupKey
	moved     [][2]feasible.Node
	reordered bool
	// allocs are the segments' allocations in segment order, as the
	// last View's snapshot took them, while allocsKept: no segment's
	// allocations changed since (a segment derived again with equal
	// ones keeps the old list). Views share the list: read only.
	allocs     []cluster.Allocation
	allocsKept bool
	// nodes and facts are the segments' nodes and what the feasibility
	// checks read of them, in snapshot order, as the last View took
	// them, while nodesKept: no node joined, left or moved between the
	// snapshot's two parts, and every segment derived again has an equal
	// node from the same node data (keepNode). Views share them: read
	// only.
	nodes     []cluster.Node
	facts     []feasible.Node
	nodesKept bool
	// demands are addPending's, by job Key (keptDemand); jobOrder the
	// last View's job Keys, sorted, and ordered the same as a set.
	demands  map[string]*keptDemand
	jobOrder []string
	ordered  map[string]bool
	// pendingHint is the number of pending groups of the last View, the
	// room addPending makes first.
	pendingHint int
	// adding are the jobs whose kept demand adds something to a View
	// (keptDemand.adds); demandKept says the last View kept every job's
	// demand it could (at share unit demandUnit, with the records of
	// the jobs demandRecords), so that demandKeys may visit only the
	// jobs whose demand may differ from nothing.
	adding        map[string]bool
	demandKept    bool
	demandUnit    int
	demandRecords map[string]bool
	// list is the cache's jobs as of this View (viewInputs keeps it).
	list jobList
	// specs are readSpecs' specs of the listed jobs as of the last View,
	// and recorded and tags the records' keys and tags it read them
	// with (a View's Specs is a copy, with the records' unlisted jobs).
	specs    map[string]*nomadapi.Job
	recorded map[string]bool
	tags     map[string]string
}

// jobEntry is one job's reading by addJobs, and what it was read from.
type jobEntry struct {
	stub        *nomadapi.JobListStub
	spec        *nomadapi.Job
	settingsGen uint64
	info        *JobInfo
	warnings    []string
	seen        uint64
}

func newSegmentMemo() *segmentMemo {
	return &segmentMemo{segs: map[string]*nodeSegment{}, expiring: map[string]*nodeSegment{}, prints: map[string]jobPrint{}, users: map[string]map[string]bool{},
		totals: newSegmentTotals(), jobs: map[string]*jobEntry{}, warned: map[string]bool{}, reread: map[string]bool{}, admissions: map[string]*keptAdmission{},
		demands: map[string]*keptDemand{}, adding: map[string]bool{}, demandRecords: map[string]bool{}}
}

// noteSettings starts a View's jobs: settings other than the last View's
// make every job's reading stale.
func (m *segmentMemo) noteSettings(settings []quota.Settings) {
	m.cycle++
	clear(m.reread)
	if m.cycle == 1 || !reflect.DeepEqual(settings, m.settings) {
		m.settings = slices.Clone(settings)
		m.settingsGen++
	}
}

// job is job key's reading (read with read when stale).
func (m *segmentMemo) job(key string, j *nomadapi.JobListStub, spec *nomadapi.Job,
	read func(string, *nomadapi.JobListStub, *nomadapi.Job) (*JobInfo, []string)) (*JobInfo, []string) {
	e := m.jobs[key]
	if e == nil || e.stub != j || e.spec != spec || e.settingsGen != m.settingsGen {
		e = &jobEntry{stub: j, spec: spec, settingsGen: m.settingsGen}
		e.info, e.warnings = read(key, j, spec)
		m.jobs[key] = e
		m.reread[key] = true
		if len(e.warnings) > 0 {
			m.warned[key] = true
		} else {
			delete(m.warned, key)
		}
	}
	e.seen = m.cycle
	return e.info, e.warnings
}

// pruneJobs forgets the jobs this View did not list.
func (m *segmentMemo) pruneJobs() {
	for key, e := range m.jobs {
		if e.seen != m.cycle {
			m.dropJob(key)
		}
	}
}

// dropJob forgets job key's reading (the job is no longer listed).
func (m *segmentMemo) dropJob(key string) {
	delete(m.jobs, key)
	delete(m.warned, key)
	m.reread[key] = true
}

// noteView keeps what the next View starts from: the jobs of v, which
// is done (read only from now on), and the jobs its records added.
func (m *segmentMemo) noteView(v *View, vanished []string) {
	m.viewJobs = v.Jobs
	m.vanished = make(map[string]bool, len(vanished))
	for _, key := range vanished {
		m.vanished[key] = true
	}
}

// jobPrint is what a segment reads of a job: its reading by addJobs
// (without the counts segments make) and its spec.
type jobPrint struct {
	listed                  bool
	project, typ            string
	priority                int
	preemptible, gang, stop bool
	minRuntime              time.Duration
	movable                 bool
	moveCooldown            time.Duration
	minCounts               map[string]int
	spec                    *nomadapi.Job
}

func printOf(info *JobInfo, spec *nomadapi.Job) jobPrint {
	p := jobPrint{spec: spec}
	if info != nil {
		p.listed, p.project, p.typ, p.priority = true, info.Project, info.Type, info.Priority
		p.preemptible, p.gang, p.stop, p.minRuntime, p.minCounts = info.Preemptible, info.Gang, info.Stop, info.MinRuntime, info.MinCounts
		p.movable, p.moveCooldown = info.Movable, info.MoveCooldown
	}
	return p
}

func (p jobPrint) equal(q jobPrint) bool {
	return p.listed == q.listed && p.project == q.project && p.typ == q.typ && p.priority == q.priority &&
		p.preemptible == q.preemptible && p.gang == q.gang && p.stop == q.stop && p.minRuntime == q.minRuntime &&
		p.movable == q.movable && p.moveCooldown == q.moveCooldown &&
		p.spec == q.spec && maps.Equal(p.minCounts, q.minCounts)
}

// update derives again the segments of the changed nodes, of the nodes
// that run a job whose print changed, and of the nodes whose time came,
// and returns the View's segments.
//
// specsChanged, when set, are the jobs whose spec may differ from the
// last View's (Inputs.specsChanged); nil: any may.
func (m *segmentMemo) update(changed []*nodeData, jobs map[string]*JobInfo, specs map[string]*nomadapi.Job, specsChanged map[string]bool, now time.Time) segmentSet {
	clear(m.totals.touched)
	clear(m.totals.countsTouched)
	stale := map[string]*nodeData{}
	for _, d := range changed {
		stale[d.id] = d
	}
	m.staleByJobs(stale, jobs, specs, specsChanged)
	for id, s := range m.expiring {
		if s.expiry <= now.UnixNano() && stale[id] == nil {
			stale[id] = s.data
		}
	}
	for id, d := range stale {
		old, s := m.replace(id, d, jobs, specs, now)
		m.noteFacts(old, s)
		m.keepNode(old, s)
	}
	return segmentSet{segs: slices.Clone(m.order), totals: m.totals}
}

// staleByJobs adds to stale the nodes whose segments read a job whose
// print changed, and keeps the new prints: of every job listed or with a
// spec, and of every job that had a print and has neither now. A job's
// print is made of its reading and its spec, and a reading is kept while
// its spec is the same (job): only the jobs read anew or dropped, and
// those with a spec but no reading, now or in the last View, need
// looking at. A job has a spec but no reading now only if it had at the
// last View or its spec (specsChanged) or reading (reread) changed since;
// without specsChanged, every spec is looked at.
func (m *segmentMemo) staleByJobs(stale map[string]*nodeData, jobs map[string]*JobInfo, specs map[string]*nomadapi.Job, specsChanged map[string]bool) {
	check := func(key string) {
		p := printOf(jobs[key], specs[key])
		if !p.listed && p.spec == nil {
			if _, ok := m.prints[key]; !ok {
				return
			}
			delete(m.prints, key)
		} else if old, ok := m.prints[key]; ok && old.equal(p) {
			return
		} else {
			m.prints[key] = p
		}
		for id := range m.users[key] {
			if stale[id] == nil {
				stale[id] = m.segs[id].data
			}
		}
	}
	for key := range m.reread {
		check(key)
	}
	was := m.specOnly
	m.specOnly = nil
	specOnly := func(key string) {
		if specs[key] != nil && jobs[key] == nil && !slices.Contains(m.specOnly, key) {
			check(key)
			m.specOnly = append(m.specOnly, key)
		}
	}
	if specsChanged == nil {
		for key := range specs {
			specOnly(key)
		}
	} else {
		for _, set := range []map[string]bool{specsChanged, m.reread} {
			for key := range set {
				specOnly(key)
			}
		}
		for _, key := range was {
			specOnly(key)
		}
	}
	for _, key := range was {
		check(key)
	}
}

// keepAdmissions forgets the admissions no pending group used.
func (m *segmentMemo) keepAdmissions(used map[string]bool) {
	for key := range m.admissions {
		if !used[key] {
			delete(m.admissions, key)
		}
	}
}

// noteFacts notes what a segment derived again (old, now) did to the
// snapshot's nodes: a node that joined or left them, or moved to the
// other part (GPU nodes, nodes added for allocations), reorders them; a
// node read again may judge admissions otherwise.
func (m *segmentMemo) noteFacts(old, now *nodeSegment) {
	placed := func(s *nodeSegment) (bool, bool) { return s != nil && s.hasNode, s != nil && s.gpuNode }
	oh, og := placed(old)
	nh, ng := placed(now)
	switch {
	case oh != nh || og != ng:
		m.reordered = true
	case !nh:
	case old.data.stub != now.data.stub || old.data.full != now.data.full || old.data.dev != now.data.dev:
		m.moved = append(m.moved, [2]feasible.Node{old.fact, now.fact})
	}
}

// reviseAdmissions forgets the admissions that the nodes read again
// since judge otherwise, all of them when the snapshot's nodes changed.
func (m *segmentMemo) reviseAdmissions() {
	defer func() { m.moved, m.reordered = nil, false }()
	if m.reordered {
		clear(m.admissions)
		return
	}
	for key, k := range m.admissions {
		for _, mv := range m.moved {
			before, after := mv[0], mv[1]
			w1, m1 := before.Rejection(k.spec, k.tg)
			w2, m2 := after.Rejection(k.spec, k.tg)
			if w1 != w2 || !slices.Equal(m1, m2) {
				delete(m.admissions, key)
				break
			}
		}
	}
}

// replace derives node id's segment again from d (nil or empty: the
// segment goes) and returns the old segment and the new (either nil).
func (m *segmentMemo) replace(id string, d *nodeData, jobs map[string]*JobInfo, specs map[string]*nomadapi.Job, now time.Time) (*nodeSegment, *nodeSegment) {
	old := m.segs[id]
	if old != nil {
		m.totals.add(old, -1)
		for _, k := range old.jobs {
			delete(m.users[k], id)
			if len(m.users[k]) == 0 {
				delete(m.users, k)
			}
		}
		delete(m.segs, id)
		delete(m.expiring, id)
		if i, ok := slices.BinarySearch(m.ids, id); ok {
			m.ids = slices.Delete(m.ids, i, i+1)
			m.order = slices.Delete(m.order, i, i+1)
		}
	}
	if d == nil || d.empty() {
		m.keepAllocs(old, nil)
		return old, nil
	}
	s := deriveSegment(d, jobs, specs, now)
	m.keepAllocs(old, s)
	m.segs[id] = s
	if s.expiry != 0 {
		m.expiring[id] = s
	}
	i, _ := slices.BinarySearch(m.ids, id)
	m.ids = slices.Insert(m.ids, i, id)
	m.order = slices.Insert(m.order, i, s)
	m.totals.add(s, 1)
	for _, k := range s.jobs {
		if m.users[k] == nil {
			m.users[k] = map[string]bool{}
		}
		m.users[k][id] = true
	}
	return old, s
}

// keepAllocs notes what replacing segment old with now (either nil) does
// to the snapshot's allocations: now takes old's list when the two hold
// the same allocations, so that the View's list stays kept.
func (m *segmentMemo) keepAllocs(old, now *nodeSegment) {
	var before, after []cluster.Allocation
	if old != nil {
		before = old.allocs
	}
	if now != nil {
		after = now.allocs
	}
	switch {
	case len(before) == 0 && len(after) == 0:
	case cluster.EqualAllocations(before, after):
		now.allocs = before
	default:
		m.allocsKept = false
	}
}

// keepNode notes what a segment derived again (old, now: either nil)
// does to the snapshot's nodes: they stay the last View's while its node
// is equal and read from the same node data (its facts are made from that
// data alone).
func (m *segmentMemo) keepNode(old, now *nodeSegment) {
	oh, nh := old != nil && old.hasNode, now != nil && now.hasNode
	switch {
	case !oh && !nh:
	case oh && nh && old.gpuNode == now.gpuNode && old.data.stub == now.data.stub && old.data.full == now.data.full &&
		old.data.dev == now.data.dev && cluster.EqualNode(old.node, now.node):
	default:
		m.nodesKept = false
	}
}

// viewNodes are the snapshot's nodes of segments segs and their facts:
// the GPU nodes in segment order, then the nodes added for allocations.
// The kept lists while no node changed (keepNode), else new ones, kept
// for the next View.
func (m *segmentMemo) viewNodes(segs []*nodeSegment) ([]cluster.Node, []feasible.Node) {
	if m != nil && m.nodesKept {
		return m.nodes, m.facts
	}
	nodes := make([]cluster.Node, 0, len(segs))
	facts := make([]feasible.Node, 0, len(segs))
	for _, gpu := range []bool{true, false} {
		for _, s := range segs {
			if s.hasNode && s.gpuNode == gpu {
				nodes, facts = append(nodes, s.node), append(facts, s.fact)
			}
		}
	}
	nodes, facts = slices.Clip(nodes), slices.Clip(facts) // shared: an append must copy
	if m != nil {
		m.nodes, m.facts, m.nodesKept = nodes, facts, true
	}
	return nodes, facts
}

// viewAllocs is the snapshot's allocations of segments segs (in View
// order): the kept list while no segment's allocations changed, else a
// new one, kept for the next View, that the segments then point into.
func (m *segmentMemo) viewAllocs(segs []*nodeSegment) []cluster.Allocation {
	if m != nil && m.allocsKept {
		return m.allocs
	}
	var n int
	for _, s := range segs {
		n += len(s.allocs)
	}
	allocs := make([]cluster.Allocation, 0, n)
	for _, s := range segs {
		allocs = append(allocs, s.allocs...)
	}
	// Each segment takes its part of the new list instead of its own
	// (read only, clipped: an append copies), so that the allocations
	// are held once, not by the segments and the View both.
	off := 0
	for _, s := range segs {
		k := len(s.allocs)
		if k > 0 {
			s.allocs = allocs[off : off+k : off+k]
		}
		off += k
	}
	if m != nil {
		m.allocs, m.allocsKept = allocs, true
	}
	return allocs
}
