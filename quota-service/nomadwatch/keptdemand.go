package nomadwatch

import (
	"maps"
	"slices"

	"github.com/gpushare/nomad-gpushare/scheduler/cluster"
)

// keptDemand is one job's pending demand as addJobDemand derived it, and
// what it was derived from: the job's reading by addJobs (its listing,
// spec and settings), the allocations of its task groups (when their
// slots last moved) and the share unit. A job with a suspension or
// shrink record is derived every View.
type keptDemand struct {
	entry      *jobEntry
	slotsMoved uint64
	shareUnit  int
	// What the derivation added: pending groups (before constrainPending
	// restricts them), warnings, and the counts on the job's JobInfo.
	pending  []cluster.Pending
	warnings []string
	queued   int
	byGroup  map[string]int
	seen     uint64
}

// listedJob is job key's reading of this View by addJobs, nil without a
// memo or when the job was not listed.
func (m *segmentMemo) listedJob(key string) *jobEntry {
	if m == nil {
		return nil
	}
	if e := m.jobs[key]; e != nil && e.info != nil {
		return e // addJobs dropped the readings of jobs not listed
	}
	return nil
}

// pruneDemand forgets the kept demand of jobs this View did not derive.
func (m *segmentMemo) pruneDemand() {
	if m == nil {
		return
	}
	for key, k := range m.demands {
		if k.seen != m.cycle {
			m.forgetDemand(key)
		}
	}
}

// forgetDemand forgets job key's kept demand.
func (m *segmentMemo) forgetDemand(key string) {
	if m == nil {
		return
	}
	delete(m.demands, key)
	delete(m.adding, key)
}

// keep keeps k as job key's demand.
func (m *segmentMemo) keep(key string, k *keptDemand) {
	m.demands[key] = k
	if k.adds() {
		m.adding[key] = true
	} else {
		delete(m.adding, key)
	}
}

// adds says the kept demand adds something to a View: pending groups or
// warnings (replayDemand adds nothing else without them).
func (k *keptDemand) adds() bool { return len(k.pending) > 0 || len(k.warnings) > 0 }

// noteDemandInputs notes, after a View's demand was added, the share unit
// and the jobs with records it was added with (demandKeys).
func (m *segmentMemo) noteDemandInputs(shareUnit int, v *View) {
	m.demandKept, m.demandUnit = true, shareUnit
	clear(m.demandRecords)
	for key := range v.Records {
		m.demandRecords[key] = true
	}
	for key := range v.Shrinks {
		m.demandRecords[key] = true
	}
}

// addKeptDemand adds job key's demand (e is its reading): the kept one
// while what it was derived from is the same, else derived again and
// kept.
func (a *assembler) addKeptDemand(key string, e *jobEntry) {
	m, moved := a.in.memo, a.slotsMoved[key]
	if k := m.demands[key]; k != nil && k.entry == e && k.shareUnit == a.shareUnit && k.slotsMoved == moved {
		k.seen = m.cycle
		a.replayDemand(key, k)
		return
	}
	np, nw := len(a.snap.Pending), len(a.v.Warnings)
	a.addJobDemand(key, e.stub)
	info := a.v.Jobs[key]
	m.keep(key, &keptDemand{entry: e, slotsMoved: moved, shareUnit: a.shareUnit, pending: slices.Clone(a.snap.Pending[np:]),
		warnings: slices.Clone(a.v.Warnings[nw:]), queued: info.Queued, byGroup: maps.Clone(info.Pending), seen: m.cycle})
}

// replayDemand adds kept demand k of job key as addJobDemand did.
func (a *assembler) replayDemand(key string, k *keptDemand) {
	a.v.Warnings = append(a.v.Warnings, k.warnings...)
	if len(k.pending) == 0 {
		return
	}
	info := a.v.Jobs[key]
	a.addProject(info.Project)
	if a.snap.Pending == nil {
		a.snap.Pending = make([]cluster.Pending, 0, max(a.in.memo.pendingHint, len(k.pending)))
	}
	a.snap.Pending = append(a.snap.Pending, k.pending...)
	info = a.writable(key)
	info.Queued += k.queued
	info.Pending = maps.Clone(k.byGroup)
}
