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
// their first allocation. Shrunk instances of elastic groups and a
// suspended job's demand are no waiting part.
func partialGangs(snap *cluster.Snapshot) []partialGang {
	byJob := map[string]*partialGang{}
	var order []string
	for _, al := range snap.Allocations {
		if !al.Gang || al.System {
			continue
		}
		g := byJob[al.Job]
		if g == nil {
			g = &partialGang{project: al.Project, job: al.Job}
			byJob[al.Job] = g
			order = append(order, al.Job)
		}
		if n := len(g.allocations); n == 0 || g.allocations[n-1] != al.ID {
			g.allocations = append(g.allocations, al.ID) // an allocation in several shapes is listed once per shape
			g.placed++
		}
	}
	for i, p := range snap.Pending {
		if g := byJob[p.Job]; g != nil && p.Gang && !p.Suspended && !p.Shrunk {
			g.waiting = append(g.waiting, i)
			g.wanted += p.Count
		}
	}
	var out []partialGang
	for _, job := range order {
		if g := byJob[job]; len(g.waiting) > 0 {
			g.wanted += g.placed
			out = append(out, *g)
		}
	}
	return out
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
	c.gangs = partialGangs(c.view.Snapshot)
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
			Allocations: g.allocations, Workload: -1, Reason: reason, Cause: plan.CauseGang})
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
