// Package nomadwatch keeps the service's view of Nomad and builds the
// planner's cluster.Snapshot from it.
//
// The view (cache.go; docs/design.md, The service's view of Nomad) holds
// every node (its attributes, meta and device inventory, decoded once per
// node modify index), every allocation desired to run (with its allocated
// device IDs, without task states) and every job (with its summary and
// meta) in all namespaces. Follow keeps it from Nomad's event stream
// (follow.go); Build lists Nomad in full without the stream, once per
// stream connection, when Nomad's indexes show changes the stream did not
// deliver, and every ResyncInterval (refresh.go, listing.go). Build then
// assembles a View: the snapshot plus what the actuator needs to act on it
// (job specs, the suspension records with their verdicts). Only GPU work
// counts (docs/design.md, Units and device families): a node's GPUs are the
// physical GPUs named by its "nvidia/gpu" and "nvidia/gpu-share" device
// instances (package vocab), an allocation's usage is the whole GPUs
// and shares it was given, wherever they land, and pending demand is what
// Nomad will still place of each task group (demand.go) times its device
// asks ("nvidia/gpu" count = whole GPUs, "nvidia/gpu-share" count = share
// instances of one GPU, each of 100/shares_per_gpu shares: shareUnitOf).
// Each suspension record is read against Nomad's job
// (records.go; docs/design.md, Suspension and resumption).
//
// The snapshot plans on what Nomad will really do. A node that is not
// ready, ineligible or draining, and a node holding an allocation the
// snapshot cannot account for (a GPU it does not publish, more shares than
// a GPU has), is out of planning with the reason (cluster.Node.Unavailable);
// so is a GPU unhealthy for a reason other than the plugin's own switch
// between device families (see withdrawnPrefixes). A pending group may run
// only on the nodes its job's datacenters, node pool and constraints (on
// node attributes and meta, and on device attributes) admit
// (constrainPending). CPU-only work is left out of the demand, but
// it counts against its node: a node's CPU and memory in the snapshot are
// its capacity less Nomad's reserved resources and less what allocations
// outside the snapshot hold, and GPU allocations and pending groups carry
// their tasks' CPU and memory asks, so the planner never counts on a node
// that lacks CPU or memory. CPU is in Nomad's units (MHz) throughout; the
// model's CPUMilli only needs one unit.
//
// Follow signals a re-plan after every batch of events and every
// (re)connect or break of the stream.
package nomadwatch

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"time"

	"github.com/gpushare/nomad-gpushare/internal/feasible"
	"github.com/gpushare/nomad-gpushare/quota-service/quota"
	"github.com/gpushare/nomad-gpushare/quota-service/recordkey"
	"github.com/gpushare/nomad-gpushare/quota-service/state"
	"github.com/gpushare/nomad-gpushare/scheduler/cluster"
	nomadapi "github.com/hashicorp/nomad/api"
)

const (
	// MetaPreempt is the job meta key that opts a job out of suspension
	// ("false").
	MetaPreempt = "gpushare.preemptible"
)

// JobInfo is what the actuator needs to know about one job.
type JobInfo struct {
	Namespace      string
	ID             string
	Project        string
	Priority       int
	Version        uint64
	JobModifyIndex uint64
	Stop           bool
	Status         string
	Preemptible    bool
	// Type is the job's type: service, batch, system or sysbatch.
	Type   string
	Groups map[string]int
	// Gang says that the job's GPU task groups run all together or not
	// at all (MetaGang).
	Gang bool
	// MinCounts are the elastic groups' minimums (MetaMinCount).
	MinCounts map[string]int
	// MinRuntime is how long its allocations run before reclaim for a
	// project above its guarantee or preemption inside its project may
	// take the job (its project's min_runtime, shortened by
	// MetaMinRuntime).
	MinRuntime time.Duration
	// Movable says that the job may be moved to make room (MetaMovable),
	// once its allocation has run MoveCooldown (Inputs.MoveCooldown):
	// a job moves at most once per cooldown.
	Movable      bool
	MoveCooldown time.Duration
	// Running is the number of its allocations that run.
	Running int
	// Live is the number of its allocations placed and not finished
	// (desired to run, client status pending or running).
	Live int
	// Queued is the number of its instances waiting for placement
	// (resumable suspended jobs: all of them); Pending the same by task
	// group.
	Queued  int
	Pending map[string]int
}

// System reports whether the job runs on every node (system or sysbatch):
// it is never suspended.
func (j *JobInfo) System() bool { return j.Type == "system" || j.Type == "sysbatch" }

// Key is the job's snapshot name, "namespace/id".
func Key(namespace, id string) string { return namespace + "/" + id }

// View is one consistent reading of Nomad. It is read only once built: a
// Builder's next View shares its snapshot's lists, its jobs' JobInfos
// and its specs where they did not change.
type View struct {
	Snapshot *cluster.Snapshot
	// Jobs by Key.
	Jobs map[string]*JobInfo
	// Records are the suspension records by job Key, each with its
	// verdict (records.go). Resumable ones are in Snapshot.Pending with
	// Suspended set.
	Records map[string]*Record
	// RecordErrors are the records the service does not act on, and why.
	RecordErrors []state.RecordError
	// Unverified are the records the service cannot prove it wrote and
	// that Nomad does not let it rebuild: Consul's modify index by job
	// Key, so that a suspension of the job may replace the key. They
	// carry no verdict and no hold.
	Unverified map[string]uint64
	// Shrinks are the shrink records by job Key, each with its verdict
	// (elastic.go).
	Shrinks map[string]*ShrinkRecord
	// Keys are the record keys of the cycle (Inputs.Keys).
	Keys *recordkey.Keyring
	// Specs are the full job specs read (Inputs.Specs).
	Specs map[string]*nomadapi.Job
	// Seq numbers a Builder's Views, from 1 (0: a View not built by a
	// Builder). SpecsChanged, when not nil, holds every job Key whose
	// spec in Specs may differ from the one in the Builder's View
	// numbered Seq-1 (set, dropped or read again since); nil: any may.
	Seq          uint64
	SpecsChanged map[string]bool
	// Warnings are things left out of the snapshot or out of planning,
	// for logs and the status.
	Warnings []string
	ListedAt time.Time
}

// Inputs are the raw listings Assemble works on.
type Inputs struct {
	Nodes []*nomadapi.NodeListStub
	// NodeInfo are the full nodes by ID (attributes and meta, for
	// constraints); a node missing here is judged by its stub.
	NodeInfo map[string]*nomadapi.Node
	// Devices are the nodes' device inventories as the cache read them
	// (by node ID); a node missing here is read from its stub.
	Devices     map[string]*nodeDevices
	Allocations []*nomadapi.AllocationListStub
	// AllocResources are the allocations' resources as the cache read
	// them (by allocation ID); an allocation missing here is read from
	// its stub.
	AllocResources map[string]*allocResources
	Jobs           []*nomadapi.JobListStub
	// Specs are full job specs by Key: of every registered job that is
	// not stopped and not finished, and of every suspension record's job.
	Specs    map[string]*nomadapi.Job
	Settings []quota.Settings
	// Departments are the departments in force: every one a project of
	// Settings names (quota.Watcher.InForce).
	Departments []quota.Department
	// Suspensions are the suspension records the service proved it
	// wrote; Unverified those that decoded but did not verify;
	// RecordErrors those that did not decode. Keys verified them and
	// check the proofs on version tags (nil: no tag is proven).
	Suspensions  []state.Suspension
	Unverified   []state.Unverified
	RecordErrors []state.RecordError
	Keys         *recordkey.Keyring
	// ScaledAt is, by job Key, the times (Unix ns) of the scaling events
	// Nomad keeps of each suspended job whose job modify index moved while
	// it was stopped (Builder.readScaledAt).
	ScaledAt map[string][]int64
	// Shrinks are the shrink records the service proved it wrote;
	// ShrinkErrors those it did not (reported, never acted on).
	Shrinks      []state.Shrink
	ShrinkErrors []state.RecordError
	// Tagged are the stopped jobs, by Key, whose current version carries
	// a tag named like the service's (TagPrefix) and that no record
	// names: a record lost, or one the service cannot verify.
	Tagged map[string]*nomadapi.Job
	// Unlisted holds, for a record whose job the listing left out, what
	// reading the job directly gave: nil when Nomad does not know it
	// (404), else the error (an ACL refusal is no proof of absence). A
	// job the direct read found is in Specs.
	Unlisted map[string]error
	Now      time.Time
	// MoveCooldown is how long a movable job's allocation runs before
	// the plan may move it (Options.MoveCooldown).
	MoveCooldown time.Duration
	// memo, when set, holds the segments of the last View (the
	// Builder's); changed are the nodes the cache changed since, whose
	// segments must be derived again. Nodes, NodeInfo, Devices,
	// Allocations and AllocResources are then not read.
	memo    *segmentMemo
	changed []*nodeData
	// changedJobs are, with a memo that is not new, the jobs whose
	// listing came, changed or went since the memo's last View (nil with
	// a new memo: every job is new to it).
	changedJobs map[string]bool
	// specsChanged are, with changedJobs, the jobs whose spec in Specs
	// may differ from the memo's last View's (nil: any may).
	specsChanged map[string]bool
	// jobs are Jobs with their Keys (listed).
	jobs jobList
}

// Assemble turns listings into a View. It never fails: records it cannot
// use are left out with a warning.
func Assemble(in Inputs) *View {
	a := newAssembler(in)
	a.addJobs()
	jobWarnings := a.v.Warnings
	a.v.Warnings = nil
	set := a.segments()
	a.slots, a.slotsMoved = set.totals.slots, set.totals.slotsMoved
	a.addSegments(set, jobWarnings)
	a.dropLeaving()
	a.classifyRecords()
	a.judgeShrinks()
	a.addPending()
	a.constrainPending()
	sort.Slice(a.snap.Projects, func(i, j int) bool { return a.snap.Projects[i].Name < a.snap.Projects[j].Name })
	if m := a.in.memo; m != nil {
		m.noteView(a.v, a.vanished)
	}
	return a.v
}

// assembler holds the tables of one Assemble call.
type assembler struct {
	in       Inputs
	v        *View
	snap     *cluster.Snapshot
	resolver *projectResolver
	// projects are the names in snap.Projects.
	projects map[string]bool
	// nodes are the nodes with GPUs, by ID and in snapshot order.
	nodes     map[string]*nodeGPUs
	nodeOrder []*nodeGPUs
	// jobKeys are the job Keys made, by namespace and job ID (jobKey).
	jobKeys map[[2]string]string
	// readDevs are the device inventories read from stubs (devicesOf).
	readDevs map[string]*nodeDevices
	// shareUnit is the shares one instance of a share request stands for
	// (shareUnitOf).
	shareUnit int
	// minRuntimes are the projects' min_runtime settings.
	minRuntimes map[string]time.Duration
	// facts are what the feasibility checks read of the snapshot's
	// nodes, in snapshot order, when the segments gave them (factsSet).
	facts    []feasible.Node
	factsSet bool
	// slots are the allocations of every job by task group, as the
	// segments count them (countSlots).
	slots map[string]map[string]*slotCounts
	// slotsMoved says when each job's slots last moved
	// (segmentTotals.slotsMoved).
	slotsMoved map[string]uint64
	// elasticVersions are the job versions of the elastic groups' live
	// allocations, by allocation ID (dropLeaving).
	elasticVersions map[string]uint64
	// fresh, when set, says which of the View's jobs are this View's
	// own objects: the others are the last View's, shared and read only,
	// until writable copies them (addChangedJobs). Nil: all are.
	fresh map[string]bool
	// vanished are the jobs addVanishedJob added.
	vanished []string
}

// noteVersion records the job version of an elastic group's allocation.
func (a *assembler) noteVersion(id string, version uint64) {
	if a.elasticVersions == nil {
		a.elasticVersions = map[string]uint64{}
	}
	a.elasticVersions[id] = version
}

func newAssembler(in Inputs) *assembler {
	v := &View{Snapshot: &cluster.Snapshot{}, Jobs: map[string]*JobInfo{}, Records: map[string]*Record{}, Specs: in.Specs, ListedAt: in.Now,
		Unverified: map[string]uint64{}, Keys: in.Keys, Shrinks: map[string]*ShrinkRecord{}}
	a := &assembler{in: in, v: v, snap: v.Snapshot, resolver: newResolver(in.Settings),
		projects: map[string]bool{}, nodes: map[string]*nodeGPUs{}, readDevs: map[string]*nodeDevices{}, jobKeys: map[[2]string]string{}}
	a.minRuntimes = map[string]time.Duration{}
	for _, s := range in.Settings {
		a.snap.Projects = append(a.snap.Projects, s.Model())
		a.projects[s.Project] = true
		a.minRuntimes[s.Project] = s.MinRuntime
	}
	for _, d := range in.Departments {
		a.snap.Departments = append(a.snap.Departments, d.Model())
	}
	return a
}

// pickShareUnit is what one instance of a pending nvidia/gpu-share
// request stands for, in shares: 100 over the plugin's shares_per_gpu,
// read from the nodes' share groups (nomadread.ShareUnit; seen counts the
// nodes by unit). A pending job is on no node, so one value must hold for
// the cluster; when nodes differ, the most common wins (ties: the finer)
// and a warning says so.
func (a *assembler) pickShareUnit(seen map[int]int) int {
	unit := 1
	for u, c := range seen {
		if c > seen[unit] || c == seen[unit] && u < unit {
			unit = u
		}
	}
	if len(seen) > 1 {
		a.warn("GPU nodes publish different shares_per_gpu (shares per instance: %v); pending share requests are read at %d shares per instance: set one shares_per_gpu on every node", seen, unit)
	}
	return unit
}

// segments are the View's node segments: derived again where the
// Builder's memo says they changed, else all derived from the inputs.
func (a *assembler) segments() segmentSet {
	if a.in.memo != nil {
		return a.in.memo.update(a.in.changed, a.v.Jobs, a.in.Specs, a.in.specsChanged, a.in.Now)
	}
	return deriveAll(nodeDataFromInputs(a.in), a.v.Jobs, a.in.Specs, a.in.Now)
}

// jobKey is Key(namespace, id), made once per job: a cycle looks up the
// job of every allocation twice.
func (a *assembler) jobKey(namespace, id string) string {
	ref := [2]string{namespace, id}
	if k, ok := a.jobKeys[ref]; ok {
		return k
	}
	k := Key(namespace, id)
	a.jobKeys[ref] = k
	return k
}

// addProject adds a project that has work but no quota settings.
func (a *assembler) addProject(name string) {
	if !a.projects[name] {
		a.projects[name] = true
		a.snap.Projects = append(a.snap.Projects, cluster.Project{Name: name})
	}
}

// gang is gangOf(spec) for job key; a bad value is a warning and no gang.
func (a *assembler) gang(key string, spec *nomadapi.Job) bool {
	g, err := gangOf(spec)
	if err != nil {
		a.warn("job %s: %v; it is planned as a job that is not a gang", key, err)
	}
	return g
}

func (a *assembler) warn(format string, args ...any) {
	a.v.Warnings = append(a.v.Warnings, fmt.Sprintf(format, args...))
}

// addJobs records every job that can run (not parameterized or periodic
// parents), with its version and group counts where its spec was read.
// With the Builder's memo, a job's reading is kept while its listing, its
// spec and the settings stay the same.
func (a *assembler) addJobs() {
	m := a.in.memo
	if m != nil {
		gen := m.settingsGen
		m.noteSettings(a.in.Settings)
		if m.viewJobs != nil && gen == m.settingsGen && a.in.changedJobs != nil && a.in.specsChanged != nil {
			a.addChangedJobs()
			return
		}
	}
	jobs := a.in.listed()
	if len(a.v.Jobs) == 0 {
		a.v.Jobs = make(map[string]*JobInfo, len(jobs.stubs))
	}
	// The View's copies of the readings, in one array: a cycle makes
	// one for each of the 11,000 jobs at 5,000 nodes.
	copies := make([]JobInfo, 0, len(jobs.stubs))
	for i, j := range jobs.stubs {
		key := jobs.keys[i]
		spec := a.in.Specs[key]
		var info *JobInfo
		var warnings []string
		if m != nil {
			info, warnings = m.job(key, j, spec, a.readJob)
		} else {
			info, warnings = a.readJob(key, j, spec)
		}
		a.v.Warnings = append(a.v.Warnings, warnings...)
		if info != nil {
			copies = append(copies, *info)
			a.v.Jobs[key] = &copies[len(copies)-1]
		}
	}
	if m != nil {
		m.pruneJobs()
	}
}

// addChangedJobs starts the View's jobs from the last View's and reads
// again only the jobs whose listing or spec changed, and those the last
// View's records added (a vanished job's): with the same settings, every
// other job's reading is the one the last View had. A job's counts and
// demand change later only through writable; the View's warnings are
// every listed job's, the kept ones by Key.
func (a *assembler) addChangedJobs() {
	m, jobs := a.in.memo, a.in.listed()
	a.v.Jobs, a.fresh = maps.Clone(m.viewJobs), map[string]bool{}
	look := maps.Clone(a.in.changedJobs)
	maps.Copy(look, a.in.specsChanged)
	maps.Copy(look, m.vanished)
	for key := range look {
		delete(a.v.Jobs, key)
		j := jobs.byKey[key]
		if j == nil {
			m.dropJob(key)
			continue
		}
		if info, _ := m.job(key, j, a.in.Specs[key], a.readJob); info != nil {
			c := *info
			counts := m.totals.counts[key]
			c.Live, c.Running = counts.live, counts.running
			a.v.Jobs[key], a.fresh[key] = &c, true
		}
	}
	for _, key := range slices.Sorted(maps.Keys(m.warned)) {
		a.v.Warnings = append(a.v.Warnings, m.jobs[key].warnings...)
	}
}

// writable is job key's JobInfo in the View, for this View to change:
// the last View's, shared with it, is copied first, without its demand
// (Queued, Pending), which addPending adds again.
func (a *assembler) writable(key string) *JobInfo {
	info := a.v.Jobs[key]
	if info == nil || a.fresh == nil || a.fresh[key] {
		return info
	}
	c := *info
	c.Queued, c.Pending = 0, nil
	a.v.Jobs[key], a.fresh[key] = &c, true
	return &c
}

// readJob reads one job's listing and spec: nil for a job that does not
// run itself (a parameterized or periodic parent), and the warnings.
func (a *assembler) readJob(key string, j *nomadapi.JobListStub, spec *nomadapi.Job) (*JobInfo, []string) {
	if j.ParameterizedJob || j.Periodic {
		return nil, nil
	}
	before := a.v.Warnings
	a.v.Warnings = nil
	defer func() { a.v.Warnings = before }()
	info := &JobInfo{Namespace: j.Namespace, ID: j.ID, Priority: j.Priority, JobModifyIndex: j.JobModifyIndex,
		Stop: j.Stop, Status: j.Status, Preemptible: jobPreemptible(j.Meta), Type: j.Type, Groups: map[string]int{},
		Project: a.resolver.Project(j.Namespace, j.Meta)}
	info.MinRuntime = a.minRuntime(info.Project, key, j.Meta)
	info.Movable, info.MoveCooldown = jobMovable(j.Meta), a.in.MoveCooldown
	if spec != nil {
		if spec.Version != nil {
			info.Version = *spec.Version
		}
		for _, tg := range spec.TaskGroups {
			if tg.Name != nil && tg.Count != nil {
				info.Groups[*tg.Name] = *tg.Count
			}
		}
		info.Gang = a.gang(key, spec)
		var err error
		if info.MinCounts, err = minCounts(spec); err != nil {
			a.warn("job %s: %v; it is planned as a group that is not elastic", key, err)
		}
	}
	return info, a.v.Warnings
}
