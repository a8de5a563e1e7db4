package service

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gpushare/nomad-gpushare/scheduler/cluster"
	"github.com/gpushare/nomad-gpushare/scheduler/plan"
)

// DefaultGangPartialHold is the default bound on how long a gang runs in
// part while the plan expects Nomad to place the rest (Config.GangPartialHold).
// It leaves room for a GPU to change device family on its node and for
// Nomad's blocked evaluations to be retried.
const DefaultGangPartialHold = 2 * time.Minute

// partialGang is a gang job of the snapshot that runs in part: some of its
// GPU allocations run and some of its instances wait for Nomad.
type partialGang struct {
	project, job string
	// allocations are the IDs of its running allocations.
	allocations []string
	// waiting are the positions in Snapshot.Pending of its waiting part.
	waiting []int
	// placed and wanted count its instances: placed and in all.
	placed, wanted int
}

// partialGangs lists the gangs of snap that run in part, in the order of
// their first allocation, from the gangs running in its allocations
// (runningGangsOf). Shrunk instances of elastic groups and a suspended
// job's demand are no waiting part.
func partialGangs(snap *cluster.Snapshot, running *runningGangs) []partialGang {
	waiting := map[string][]int{}
	wanted := map[string]int{}
	for i, p := range snap.Pending {
		if _, ok := running.byJob[p.Job]; ok && p.Gang && !p.Suspended && !p.Shrunk {
			waiting[p.Job] = append(waiting[p.Job], i)
			wanted[p.Job] += p.Count
		}
	}
	var out []partialGang
	for _, job := range running.order {
		if w := waiting[job]; len(w) > 0 {
			r := running.byJob[job]
			out = append(out, partialGang{project: r.project, job: job, allocations: r.allocations, waiting: w,
				placed: len(r.allocations), wanted: wanted[job] + len(r.allocations)})
		}
	}
	return out
}

// runningGangs are the gang jobs with allocations in a list of
// allocations (of), in the order of their first allocation. A cycle
// whose snapshot has the same list (cluster.SameList: the Builder keeps
// it while no allocation changed) takes the last cycle's instead of
// walking 100,000 allocations again.
type runningGangs struct {
	of    []cluster.Allocation
	order []string
	byJob map[string]runningGang
}

// runningGang is one gang job's allocations, read only (plan actions
// name them).
type runningGang struct {
	project     string
	allocations []string
}

// runningGangsOf reads the gangs running in allocs; last is returned when
// it was read from the same list.
func runningGangsOf(allocs []cluster.Allocation, last *runningGangs) *runningGangs {
	if last != nil && cluster.SameList(last.of, allocs) {
		return last
	}
	r := &runningGangs{of: allocs, byJob: map[string]runningGang{}}
	for _, al := range allocs {
		if !al.Gang || al.System {
			continue
		}
		g, ok := r.byJob[al.Job]
		if !ok {
			g.project = al.Project
			r.order = append(r.order, al.Job)
		}
		if n := len(g.allocations); n == 0 || g.allocations[n-1] != al.ID {
			g.allocations = append(g.allocations, al.ID) // an allocation in several shapes is listed once per shape
		}
		r.byJob[al.Job] = g
	}
	return r
}

// boundPartialGangs keeps the gangs that run in part to
// Config.GangPartialHold: a gang the plan would complete, but that Nomad
// has left in part for longer, is suspended whole now, as one the plan
// cannot complete (docs/design.md, Gangs and elastic groups). The plan's
// actions for its waiting part (placements and the suspensions that make
// room for them) are dropped. The clock starts when a cycle first sees the
// gang in part, on the leader and on standbys alike, so a new leader
// keeps the clock its standby ran.
func (s *Service) boundPartialGangs(c *cycleData, now time.Time) {
	seen := map[string]bool{}
	s.gangsRunning = runningGangsOf(c.view.Snapshot.Allocations, s.gangsRunning)
	c.gangs = partialGangs(c.view.Snapshot, s.gangsRunning)
	for _, g := range c.gangs {
		seen[g.job] = true
		since, ok := s.partialSince[g.job]
		if !ok {
			s.partialSince[g.job] = now
			continue
		}
		if now.Sub(since) < s.cfg.GangPartialHold || suspends(c.res, g.job) {
			continue
		}
		reason := fmt.Sprintf("%s: %d of its %d GPU instances ran since %s and Nomad did not place the rest within %s",
			plan.GangReason, g.placed, g.wanted, since.UTC().Format("15:04:05Z"), s.cfg.GangPartialHold)
		c.res.Actions = slices.DeleteFunc(c.res.Actions, func(a plan.Action) bool { return slices.Contains(g.waiting, a.Workload) })
		c.res.Actions = append(c.res.Actions, plan.Action{Kind: plan.Suspend, Project: g.project, Job: g.job,
			Allocations: slices.Clone(g.allocations), Workload: -1, Reason: reason, Cause: plan.CauseGang})
		c.res.GangsWaiting = append(c.res.GangsWaiting, plan.GangWait{Project: g.project, Job: g.job, Workload: g.waiting[0], Reason: reason})
	}
	for job := range s.partialSince {
		if !seen[job] {
			delete(s.partialSince, job)
		}
	}
}

// suspends says whether res suspends job.
func suspends(res plan.Result, job string) bool {
	return slices.ContainsFunc(res.Actions, func(a plan.Action) bool { return a.Kind == plan.Suspend && a.Job == job })
}

// GangView is a gang that runs in part, in /v1/status.
type GangView struct {
	Namespace string `json:"namespace"`
	Job       string `json:"job"`
	Project   string `json:"project"`
	// Placed and Wanted count its GPU instances: running and in all.
	Placed int `json:"placed"`
	Wanted int `json:"wanted"`
	// Since is when the service first saw it in part.
	Since time.Time `json:"since"`
	// WaitsFor says what the gang waits for: the rest of it to be placed
	// (and until when), or why the plan suspends it whole.
	WaitsFor string `json:"waits_for"`
	// For names the job ("namespace/job") of the gang that takes its
	// GPUs, when it waits whole for one earlier in fairness order.
	For string `json:"for,omitempty"`
}

// gangViews are the status lines of the gangs that run in part.
func (s *Service) gangViews(c *cycleData) []GangView {
	waiting, forJob := map[string]string{}, map[string]string{}
	for _, w := range c.res.GangsWaiting {
		waiting[w.Job] = w.Reason
	}
	for _, a := range c.res.Actions {
		if a.Kind == plan.Suspend && a.Workload >= 0 && waiting[a.Job] != "" {
			forJob[a.Job] = c.view.Snapshot.Pending[a.Workload].Job
		}
	}
	var out []GangView
	for _, g := range c.gangs {
		ns, id, _ := strings.Cut(g.job, "/")
		since := s.partialSince[g.job]
		why, ok := waiting[g.job]
		if !ok {
			why = fmt.Sprintf("Nomad to place the rest; suspended whole at %s if it has not", since.Add(s.cfg.GangPartialHold).UTC().Format(time.RFC3339))
		}
		out = append(out, GangView{Namespace: ns, Job: id, Project: g.project, Placed: g.placed, Wanted: g.wanted, Since: since, WaitsFor: why, For: forJob[g.job]})
	}
	return out
}
