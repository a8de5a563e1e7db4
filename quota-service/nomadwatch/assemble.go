// Package nomadwatch builds the planner's model.Snapshot from Nomad and
// tells the service when to plan again.
//
// Build lists nodes (with their device resources), allocations (with their
// allocated device IDs) and jobs (with their summaries) in all namespaces,
// and assembles a View: the snapshot plus what the actuator needs to act on
// it (job versions, group counts). Only GPU work counts (docs/design.md,
// Units and device families): a node's GPUs are the physical GPUs named by
// its "nvidia/gpu" and "nvidia/gpu-share" device instances (package
// device/ids), an allocation's usage is the whole GPUs and shares it was
// given, and pending demand is the queued count of each task group times
// its device asks ("nvidia/gpu" count = whole GPUs, "nvidia/gpu-share"
// count = shares of one GPU). CPU-only work is left out of the demand, but
// it counts against its node: a node's CPU and memory in the snapshot are
// its capacity less Nomad's reserved resources and less what allocations
// outside the snapshot hold, and GPU allocations and pending groups carry
// their tasks' CPU and memory asks, so the planner never counts on a node
// that lacks CPU or memory. CPU is in Nomad's units (MHz) throughout; the
// model's CPUMilli only needs one unit.
//
// Watch follows Nomad's event stream (Job, Allocation, Evaluation and Node
// topics) and signals a re-plan on every change and after every reconnect,
// since the stream's buffer may have dropped events in the gap.
package nomadwatch

import (
	"fmt"
	"sort"
	"time"

	"github.com/gpushare/nomad-gpushare/quota-service/quota"
	"github.com/gpushare/nomad-gpushare/quota-service/state"
	"github.com/gpushare/nomad-gpushare/scheduler/model"
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
	Groups         map[string]int
	// Running is the number of its allocations that run.
	Running int
	// Live is the number of its allocations placed and not finished
	// (desired to run, client status pending or running).
	Live int
	// Queued is the number of its allocations waiting for placement.
	Queued int
}

// Key is the job's snapshot name, "namespace/id".
func Key(namespace, id string) string { return namespace + "/" + id }

// View is one consistent reading of Nomad.
type View struct {
	Snapshot *model.Snapshot
	// Jobs by Key.
	Jobs map[string]*JobInfo
	// Suspended are the records whose job is stopped in Nomad (they are
	// in Snapshot.Pending, Suspended set).
	Suspended map[string]state.Suspension
	// Unfinished are records whose job still runs and is not marked
	// stopped: a suspension to finish.
	Unfinished []state.Suspension
	// Stale are records whose job runs again or is gone: to delete.
	Stale []state.Suspension
	// Warnings are things left out of the snapshot, for logs.
	Warnings []string
	// Unaccounted names running GPU allocations the snapshot could not
	// place on a node's GPUs (the node is not ready, or its GPUs are not
	// published as the allocation holds them). Nomad shows this for a
	// while after an agent restart or while a node reconnects; a view
	// with such allocations undercounts usage and must not be acted on.
	Unaccounted []string
	ListedAt    time.Time
}

// Inputs are the raw listings Assemble works on.
type Inputs struct {
	Nodes       []*nomadapi.NodeListStub
	Allocations []*nomadapi.AllocationListStub
	Jobs        []*nomadapi.JobListStub
	// Specs are full job specs by Key, for jobs with queued work and
	// for suspended jobs.
	Specs       map[string]*nomadapi.Job
	Settings    []quota.Settings
	Suspensions []state.Suspension
	Now         time.Time
}

// Assemble turns listings into a View. It never fails: records it cannot
// use are left out with a warning.
func Assemble(in Inputs) *View {
	a := newAssembler(in)
	a.addNodes()
	a.addJobs()
	a.addAllocations()
	a.settleNodeResources()
	a.classifySuspensions()
	a.addPending()
	sort.Slice(a.snap.Projects, func(i, j int) bool { return a.snap.Projects[i].Name < a.snap.Projects[j].Name })
	return a.v
}

// assembler holds the tables of one Assemble call.
type assembler struct {
	in       Inputs
	v        *View
	snap     *model.Snapshot
	resolver *projectResolver
	// projects are the names in snap.Projects.
	projects map[string]bool
	// nodes are the nodes with GPUs, by ID and in snapshot order.
	nodes     map[string]*nodeGPUs
	nodeOrder []*nodeGPUs
}

func newAssembler(in Inputs) *assembler {
	v := &View{Snapshot: &model.Snapshot{}, Jobs: map[string]*JobInfo{}, Suspended: map[string]state.Suspension{}, ListedAt: in.Now}
	a := &assembler{in: in, v: v, snap: v.Snapshot, resolver: newResolver(in.Settings),
		projects: map[string]bool{}, nodes: map[string]*nodeGPUs{}}
	for _, s := range in.Settings {
		a.snap.Projects = append(a.snap.Projects, s.Model())
		a.projects[s.Project] = true
	}
	return a
}

// addProject adds a project that has work but no quota settings.
func (a *assembler) addProject(name string) {
	if !a.projects[name] {
		a.projects[name] = true
		a.snap.Projects = append(a.snap.Projects, model.Project{Name: name})
	}
}

func (a *assembler) warn(format string, args ...any) {
	a.v.Warnings = append(a.v.Warnings, fmt.Sprintf(format, args...))
}

// unaccounted records a running GPU allocation left out of the snapshot.
func (a *assembler) unaccounted(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	a.v.Warnings = append(a.v.Warnings, msg)
	a.v.Unaccounted = append(a.v.Unaccounted, msg)
}

// addJobs records every job that can run (not parameterized or periodic
// parents), with its version and group counts where its spec was read.
func (a *assembler) addJobs() {
	for _, j := range a.in.Jobs {
		if j.ParameterizedJob || j.Periodic {
			continue
		}
		info := &JobInfo{Namespace: j.Namespace, ID: j.ID, Priority: j.Priority, JobModifyIndex: j.JobModifyIndex,
			Stop: j.Stop, Status: j.Status, Preemptible: jobPreemptible(j.Meta), Groups: map[string]int{},
			Project: a.resolver.Project(j.Namespace, j.Meta)}
		if spec := a.in.Specs[Key(j.Namespace, j.ID)]; spec != nil {
			if spec.Version != nil {
				info.Version = *spec.Version
			}
			for _, tg := range spec.TaskGroups {
				if tg.Name != nil && tg.Count != nil {
					info.Groups[*tg.Name] = *tg.Count
				}
			}
		}
		a.v.Jobs[Key(j.Namespace, j.ID)] = info
	}
}

// classifySuspensions sorts the suspension records by what their job
// does now: stopped (suspended), still running and not marked stopped
// (unfinished), registered again and waiting (the record stays), or
// running again or gone (stale).
func (a *assembler) classifySuspensions() {
	v := a.v
	for _, rec := range a.in.Suspensions {
		key := Key(rec.Namespace, rec.Job)
		info := v.Jobs[key]
		switch {
		case info == nil:
			v.Stale = append(v.Stale, rec)
		case !info.Stop && !rec.Stopped:
			v.Unfinished = append(v.Unfinished, rec)
		case !info.Stop && (info.Running > 0 || info.Status == "dead"):
			v.Stale = append(v.Stale, rec) // running again (resumed, or started by hand), or done
		case !info.Stop:
			// Registered again, not running yet: the record stays
			// until the job runs.
		default:
			v.Suspended[key] = rec
		}
	}
}

// addPending adds the pending demand, in job order: the queued instances
// of live jobs' GPU groups, and every GPU group of a suspended job at its
// recorded count.
func (a *assembler) addPending() {
	jobKeys := make([]string, 0, len(a.v.Jobs))
	for k := range a.v.Jobs {
		jobKeys = append(jobKeys, k)
	}
	sort.Strings(jobKeys)
	stubs := map[string]*nomadapi.JobListStub{}
	for _, j := range a.in.Jobs {
		stubs[Key(j.Namespace, j.ID)] = j
	}
	for _, key := range jobKeys {
		spec := a.in.Specs[key]
		if spec == nil {
			continue
		}
		for _, tg := range spec.TaskGroups {
			if tg.Name != nil {
				a.addPendingGroup(key, stubs[key], tg)
			}
		}
	}
}

// addPendingGroup adds one task group of job key as pending work, if it
// asks for GPUs and has instances waiting.
func (a *assembler) addPendingGroup(key string, stub *nomadapi.JobListStub, tg *nomadapi.TaskGroup) {
	info := a.v.Jobs[key]
	ask, ok, err := groupAsk(tg)
	if err != nil {
		a.warn("job %s: %v", key, err)
		return
	}
	if !ok {
		return
	}
	rec, suspended := a.v.Suspended[key]
	count := 0
	submit := stub.SubmitTime / int64(time.Second)
	switch {
	case suspended:
		count = rec.Groups[*tg.Name]
		submit = rec.Time.Unix()
	case !info.Stop && stub.JobSummary != nil:
		if s, ok := stub.JobSummary.Summary[*tg.Name]; ok {
			count = s.Queued
		}
	}
	if count <= 0 {
		return
	}
	info.Queued += count
	a.addProject(info.Project)
	a.snap.Pending = append(a.snap.Pending, model.Pending{Project: info.Project, Job: key, Group: *tg.Name,
		Priority: info.Priority, Preemptible: info.Preemptible, Ask: ask, Count: count, Submit: submit, Suspended: suspended})
}
