package nomadwatch

import (
	"maps"
	"slices"
	"time"

	"github.com/gpushare/nomad-gpushare/scheduler/cluster"
	nomadapi "github.com/hashicorp/nomad/api"
)

// Pending demand is what Nomad will actually place (docs/design.md,
// Suspension and resumption): for a registered job that is not stopped,
// each task group's count less the allocations that hold its places. A
// job's summary counts queued instances only once Nomad has evaluated it
// (a job just registered, or registered again by a resume, shows none), so
// the count is read from the spec and the allocations instead. System and
// sysbatch jobs have no count; their summary's queued instances are used.

// slotCounts are what a task group's allocations hold: live ones (desired
// to run, pending or running) and settled ones (finished, of the current
// version, that Nomad will not replace: a batch instance that completed, an
// instance that failed past its reschedule policy).
type slotCounts struct {
	live, settled int
}

// countSlots tallies the allocations of every job by task group.
func (a *assembler) countSlots() map[string]map[string]*slotCounts {
	out := map[string]map[string]*slotCounts{}
	for _, al := range a.in.Allocations {
		key := a.jobKey(al.Namespace, al.JobID)
		spec := a.in.Specs[key]
		if spec == nil {
			continue
		}
		live := al.DesiredStatus == "run" && (al.ClientStatus == "pending" || al.ClientStatus == "running")
		if !live && !settled(spec, al, a.in.Now) {
			continue
		}
		if out[key] == nil {
			out[key] = map[string]*slotCounts{}
		}
		c := out[key][al.TaskGroup]
		if c == nil {
			c = &slotCounts{}
			out[key][al.TaskGroup] = c
		}
		if live {
			c.live++
		} else {
			c.settled++
		}
	}
	return out
}

// settled says a finished allocation keeps its place: Nomad will not
// place another instance for it (scheduler/reconciler, shouldFilter).
func settled(spec *nomadapi.Job, al *nomadapi.AllocationListStub, now time.Time) bool {
	if al.DesiredStatus != "run" || al.JobVersion != jobVersion(spec) || al.NextAllocation != "" || al.FollowupEvalID != "" {
		return false
	}
	batch := spec.Type != nil && (*spec.Type == "batch" || *spec.Type == "sysbatch")
	switch al.ClientStatus {
	case "complete":
		return batch
	case "failed":
		return !reschedulable(groupOf(spec, al.TaskGroup), al.RescheduleTracker, now)
	}
	return false
}

// reschedulable says the group's reschedule policy allows another attempt
// after the ones tracker holds.
func reschedulable(tg *nomadapi.TaskGroup, tracker *nomadapi.RescheduleTracker, now time.Time) bool {
	if tg == nil || tg.ReschedulePolicy == nil {
		return false
	}
	p := tg.ReschedulePolicy
	if p.Unlimited != nil && *p.Unlimited {
		return true
	}
	if p.Attempts == nil || *p.Attempts <= 0 {
		return false
	}
	used := 0
	if tracker != nil {
		var interval time.Duration
		if p.Interval != nil {
			interval = *p.Interval
		}
		for _, e := range tracker.Events {
			if interval <= 0 || now.Sub(time.Unix(0, e.RescheduleTime)) < interval {
				used++
			}
		}
	}
	return used < *p.Attempts
}

// addPending adds the pending demand, in job order: what Nomad will still
// place of every registered job that is not stopped, and every GPU group
// of a resumable suspended job at its count. With the Builder's memo, a
// job's demand is kept while what it is derived from stays the same
// (keptDemand), and only the jobs whose demand may differ from nothing
// are visited (demandKeys).
func (a *assembler) addPending() {
	stubs := a.in.listed().byKey
	m := a.in.memo
	keys, all := a.demandKeys()
	for _, key := range keys {
		if info := a.v.Jobs[key]; info != nil && (info.Queued != 0 || info.Pending != nil) {
			a.writable(key) // the last View's demand goes
		}
		switch r := a.v.Records[key]; {
		case a.v.Jobs[key] == nil:
			m.forgetDemand(key) // the job left the View
		case r != nil && r.Resumable():
			m.forgetDemand(key)
			a.addSuspendedDemand(key, r)
		case r == nil && a.v.Shrinks[key] == nil && m.listedJob(key) != nil:
			a.addKeptDemand(key, m.listedJob(key))
		default:
			m.forgetDemand(key)
			a.addJobDemand(key, stubs[key])
		}
	}
	if all {
		m.pruneDemand()
	}
	if m != nil {
		m.pendingHint = len(a.snap.Pending)
		m.noteDemandInputs(a.shareUnit, a.v)
	}
}

// demandKeys are the jobs whose demand to add, sorted, and whether they
// are all of the View's jobs. With a memo that kept every job's demand
// at the last View, at the same share unit, they are only the jobs
// whose demand added something then (keptDemand.adds) and those whose
// demand may have changed since: read anew or dropped (segmentMemo.reread),
// their slots moved (segmentTotals.touched), or named by a suspension
// or shrink record now or at the last View. Every other job's kept
// demand adds nothing and stays valid: its reading, slots and share unit
// are those it was derived from.
func (a *assembler) demandKeys() ([]string, bool) {
	m := a.in.memo
	if m == nil || !m.demandKept || m.demandUnit != a.shareUnit {
		return a.jobOrder(), true
	}
	look := make(map[string]bool, len(m.adding)+len(m.reread)+len(m.totals.touched)+len(m.demandRecords))
	for _, set := range []map[string]bool{m.adding, m.reread, m.totals.touched, m.demandRecords} {
		for key := range set {
			look[key] = true
		}
	}
	for key := range a.v.Records {
		look[key] = true
	}
	for key := range a.v.Shrinks {
		look[key] = true
	}
	return slices.Sorted(maps.Keys(look)), false
}

// jobOrder is the View's job Keys, sorted: the last View's order while
// the jobs are the same.
func (a *assembler) jobOrder() []string {
	m := a.in.memo
	if m != nil && len(m.jobOrder) == len(a.v.Jobs) {
		same := true
		for key := range a.v.Jobs {
			if !m.ordered[key] {
				same = false
				break
			}
		}
		if same {
			return m.jobOrder
		}
	}
	keys := slices.Sorted(maps.Keys(a.v.Jobs))
	if m != nil {
		m.jobOrder, m.ordered = keys, make(map[string]bool, len(keys))
		for _, key := range keys {
			m.ordered[key] = true
		}
	}
	return keys
}

// addJobDemand adds what Nomad will still place of job key (listed as
// stub, nil when it is not), and the instances its shrink holds back.
func (a *assembler) addJobDemand(key string, stub *nomadapi.JobListStub) {
	info, spec := a.v.Jobs[key], a.in.Specs[key]
	if spec == nil || info.Stop || info.Status == "dead" {
		return
	}
	var submit int64
	switch r := a.v.Records[key]; {
	case r != nil && (r.Verdict == Resumed || r.Verdict == ResumeLanded):
		// A job the service resumed keeps the place it had while
		// suspended, so that the order that resumed it keeps its GPUs
		// for it until Nomad places it (a resumed job is pending before
		// Nomad evaluates it, and Nomad will place it whatever the plan
		// says).
		submit = r.Time.Unix()
	case stub != nil:
		submit = stub.SubmitTime / int64(time.Second)
	case spec.SubmitTime != nil:
		submit = *spec.SubmitTime / int64(time.Second)
	}
	for _, tg := range spec.TaskGroups {
		if tg.Name != nil {
			a.addPendingGroup(key, tg, waiting(spec, stub, tg, a.slots[key][*tg.Name]), submit,
				pendingKind{gang: info.Gang, minCount: info.MinCounts[*tg.Name]})
		}
	}
	a.addShrunkDemand(key, spec, submit)
}

// waiting is the number of instances of tg Nomad will still place.
func waiting(spec *nomadapi.Job, stub *nomadapi.JobListStub, tg *nomadapi.TaskGroup, c *slotCounts) int {
	if spec.Type != nil && (*spec.Type == "system" || *spec.Type == "sysbatch") {
		if stub == nil || stub.JobSummary == nil {
			return 0
		}
		return stub.JobSummary.Summary[*tg.Name].Queued
	}
	if tg.Count == nil {
		return 0
	}
	n := *tg.Count
	if c != nil {
		n -= c.live + c.settled
	}
	return max(n, 0)
}

// addSuspendedDemand adds every GPU group of a resumable job at its count:
// the groups of the version the service will register again.
func (a *assembler) addSuspendedDemand(key string, r *Record) {
	spec := r.Spec
	if spec == nil {
		spec = r.Current
	}
	gang := a.gang(key, spec)
	for _, tg := range spec.TaskGroups {
		if tg.Name != nil && tg.Count != nil {
			a.addPendingGroup(key, tg, *tg.Count, r.Time.Unix(), pendingKind{suspended: true, gang: gang})
		}
	}
}

// pendingKind is what a pending group is besides its job and ask: part
// of a suspended job, of a gang, shrunk instances of an elastic group,
// and the group's elastic minimum (see cluster.Pending).
type pendingKind struct {
	suspended, gang, shrunk bool
	minCount                int
}

// addPendingGroup adds count instances of one task group of job key as
// pending work, if it asks for GPUs. Shrunk instances are no instances
// waiting for placement (JobInfo.Queued).
func (a *assembler) addPendingGroup(key string, tg *nomadapi.TaskGroup, count int, submit int64, kind pendingKind) {
	if count <= 0 {
		return
	}
	info := a.writable(key)
	ask, ok, err := GroupAsk(tg, a.shareUnit)
	if err != nil {
		a.warn("job %s: %v", key, err)
		return
	}
	if !ok {
		return
	}
	if !kind.shrunk {
		info.Queued += count
		if info.Pending == nil {
			info.Pending = map[string]int{}
		}
		info.Pending[*tg.Name] += count
	}
	a.addProject(info.Project)
	a.snap.Pending = append(a.snap.Pending, cluster.Pending{Project: info.Project, Job: key, Group: *tg.Name,
		Priority: info.Priority, Preemptible: info.Preemptible, Ask: ask, Count: count, Submit: submit,
		Suspended: kind.suspended, Gang: kind.gang, Shrunk: kind.shrunk, MinCount: kind.minCount})
}
