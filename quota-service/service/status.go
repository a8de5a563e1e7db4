package service

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/gpushare/nomad-gpushare/quota-service/actuator"
	"github.com/gpushare/nomad-gpushare/quota-service/nomadwatch"
	"github.com/gpushare/nomad-gpushare/quota-service/quota"
	"github.com/gpushare/nomad-gpushare/quota-service/state"
	"github.com/gpushare/nomad-gpushare/scheduler/cluster"
	"github.com/gpushare/nomad-gpushare/scheduler/plan"
)

// ProjectView is one project's line in /v1/projects.
type ProjectView struct {
	state.ProjectStatus
	Priority        int    `json:"priority"`
	OverQuotaWeight int64  `json:"over_quota_weight"`
	Namespace       string `json:"namespace,omitempty"`
	// Department names the project's department ("": on its own).
	Department string `json:"department,omitempty"`
	// NonPreemptibleAboveGuarantee names the project's non-preemptible
	// jobs that run above its guarantee (Nomad placed them by itself):
	// they count as preemptible (docs/design.md, Reclaim and preempt).
	NonPreemptibleAboveGuarantee []string `json:"nonpreemptible_above_guarantee,omitempty"`
	// NeverVictims are "namespace/job: reason" for the project's jobs the
	// service never suspends because it could not bring them back
	// (docs/design.md, Suspension and resumption).
	NeverVictims []string `json:"never_victims,omitempty"`
	// RecentSurplusGPUHours and SurplusFactor, with time-aware fair
	// share on, are the project's recent use of the surplus (GPU-hours
	// above its guarantee, decayed) and the factor its over-quota weight
	// was multiplied by this cycle.
	RecentSurplusGPUHours float64 `json:"recent_surplus_gpu_hours,omitempty"`
	SurplusFactor         float64 `json:"surplus_factor,omitempty"`
}

// Status is /v1/status.
type Status struct {
	Instance   string        `json:"instance"`
	Leader     bool          `json:"leader"`
	LastCycle  time.Time     `json:"last_cycle"`
	LastRelist time.Time     `json:"last_relist"`
	LastError  string        `json:"last_error,omitempty"`
	Projects   []ProjectView `json:"projects"`
	// Departments group projects one level up (departments.go); a
	// project names its own in its department field.
	Departments []DepartmentView `json:"departments,omitempty"`
	Pending     []string         `json:"pending"`
	// Suspended are the jobs the service stopped and will resume, from
	// their suspension records; each project's suspended_jobs counts its
	// entries here.
	Suspended []SuspendedJob `json:"suspended"`
	Unplaced  []string       `json:"unplaced"`
	// Unplaceable are the pending groups that fit on no node that admits
	// them, even idle, with the reason; they are no demand.
	Unplaceable []string `json:"unplaceable,omitempty"`
	// Shrunk are the elastic groups the service shrank and may grow back
	// (from the shrink records Nomad corroborates).
	Shrunk []ShrunkJob `json:"shrunk,omitempty"`
	// Gangs are the gangs that run in part and what each waits for; a
	// gang suspended whole is in Suspended, its reason saying so.
	Gangs []GangView `json:"gangs,omitempty"`
	// OutOfPlanning are the nodes and GPUs the plan does not use, with the
	// reason (not ready, ineligible, draining, unhealthy, or an allocation
	// the service cannot account for).
	OutOfPlanning []string `json:"out_of_planning,omitempty"`
	// Recent are the last entries of the KV history, newest first: what
	// the leader did, whichever instance answers.
	Recent   []state.Entry `json:"recent_actions"`
	Warnings []string      `json:"warnings,omitempty"`
	// RecordErrors are the suspension records the service does not act
	// on, and why (also under <root>/status/record-errors/ in Consul).
	RecordErrors []state.RecordError `json:"record_errors,omitempty"`
	// Nodes are the GPU nodes with what each GPU holds (the dashboard's
	// map).
	Nodes []NodeView `json:"nodes,omitempty"`
	// Trend is each project's allocated and used GPUs over the last hour,
	// oldest first (trend.go).
	Trend []TrendPoint `json:"trend,omitempty"`
}

// SuspendedJob is a job the service stopped to make room, from its
// suspension record.
type SuspendedJob struct {
	Namespace string `json:"namespace"`
	Job       string `json:"job"`
	// Project is the project the job counts for now.
	Project string `json:"project"`
	// Groups are the task groups' counts it resumes with.
	Groups map[string]int `json:"groups"`
	Reason string         `json:"reason"`
	// ForWorkload and ForProject name the work it made room for.
	ForWorkload string    `json:"for_workload,omitempty"`
	ForProject  string    `json:"for_project,omitempty"`
	Since       time.Time `json:"since"`
	By          string    `json:"by,omitempty"`
}

// ShrunkJob is a job whose elastic groups the service shrank.
type ShrunkJob struct {
	Namespace string `json:"namespace"`
	Job       string `json:"job"`
	Project   string `json:"project"`
	// Groups are the shrunk groups: the owner's count and the count they
	// run at.
	Groups map[string]state.ShrunkGroup `json:"groups"`
	// Reason is the last scale's message, ForWorkload the work the last
	// shrink made room for; Since its time.
	Reason      string    `json:"reason"`
	ForWorkload string    `json:"for_workload,omitempty"`
	Since       time.Time `json:"since"`
}

// shrunkJobs lists the jobs whose shrink stands, by namespace and job.
func shrunkJobs(v *nomadwatch.View) []ShrunkJob {
	var out []ShrunkJob
	for _, r := range v.Shrinks {
		if r.Stands() {
			out = append(out, ShrunkJob{Namespace: r.Namespace, Job: r.Job, Project: r.Project, Groups: r.Groups, Reason: r.Reason, ForWorkload: r.ForWorkload, Since: r.Time})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		return out[i].Namespace < out[j].Namespace || out[i].Namespace == out[j].Namespace && out[i].Job < out[j].Job
	})
	return out
}

// Health is /v1/health.
type Health struct {
	OK     bool   `json:"ok"`
	Leader bool   `json:"leader"`
	Reason string `json:"reason,omitempty"`
}

// recentMax bounds the status's recent actions (read from the history).
const recentMax = 50

// record updates metrics, the HTTP status and, when the cycle acted
// (leader), the per-project status documents and record errors in KV.
func (s *Service) record(ctx context.Context, c *cycleData) {
	now := time.Now()
	sum := summarizePending(c.view)
	views := s.projectViews(c, sum)
	s.setProjectMetrics(c, sum)
	s.setDepartmentMetrics(c)
	departments := s.departmentViews(c)
	s.reportRecordErrors(ctx, c)
	// The usage summary is read only when a trend sample is due, not on
	// every cycle.
	s.mu.Lock()
	due := trendDue(s.status.Trend, now)
	s.mu.Unlock()
	var used map[string]float64
	if due {
		used = s.usedByProject()
	}
	s.mu.Lock()
	s.noteActions(c.rep, sum, now)
	st := &s.status
	st.LastCycle, st.LastRelist, st.LastError = now, c.view.ListedAt, ""
	st.Departments = departments
	st.Projects, st.Pending, st.Suspended, st.Unplaced, st.Warnings = views, sum.pending, sum.suspended, unplacedLines(c, c.res.Unplaced), c.view.Warnings
	st.Unplaceable = unplacedLines(c, c.res.Unplaceable)
	st.RecordErrors = c.view.RecordErrors
	st.Gangs = s.gangViews(c)
	st.Shrunk = shrunkJobs(c.view)
	st.Nodes, st.OutOfPlanning, s.nodesOf = nil, nil, c.view.Snapshot
	st.Trend = sampleTrend(st.Trend, now, views, used)
	s.mu.Unlock()
	if c.acted {
		s.writeProjectStatus(ctx, views, now)
	}
}

// pendingSummary is the cycle's pending work by project and as lines.
type pendingSummary struct {
	shares map[string]cluster.Shares
	count  map[string]int
	// pending are "namespace/job/group" lines, sorted.
	pending []string
	// suspended are the suspended jobs, by namespace and job;
	// suspendedJobs counts them by project.
	suspended     []SuspendedJob
	suspendedJobs map[string]int
}

func summarizePending(v *nomadwatch.View) pendingSummary {
	sum := pendingSummary{shares: map[string]cluster.Shares{}, count: map[string]int{}, suspendedJobs: map[string]int{}}
	for _, p := range v.Snapshot.Pending {
		if p.Shrunk {
			continue // no demand: it grows back when nothing else waits
		}
		sum.shares[p.Project] += p.GPUShares()
		sum.count[p.Project]++
		if !p.Suspended {
			sum.pending = append(sum.pending, p.Job+"/"+p.Group)
		}
	}
	sort.Strings(sum.pending)
	sum.suspended = suspendedJobs(v)
	for _, j := range sum.suspended {
		sum.suspendedJobs[j.Project]++
	}
	return sum
}

// suspendedJobs lists the view's suspended jobs (records whose job is
// stopped), sorted by namespace and job: the one source of both the
// status's list and each project's count.
func suspendedJobs(v *nomadwatch.View) []SuspendedJob {
	out := make([]SuspendedJob, 0, len(v.Records))
	for key, rec := range v.Records {
		if !rec.Resumable() && rec.Verdict != nomadwatch.Unconfirmed {
			continue
		}
		project := rec.Project
		if info := v.Jobs[key]; info != nil {
			project = info.Project
		}
		out = append(out, SuspendedJob{Namespace: rec.Namespace, Job: rec.Job, Project: project, Groups: rec.Groups,
			Reason: rec.Reason, ForWorkload: rec.ForWorkload, ForProject: rec.ForProject, Since: rec.Time, By: rec.By})
	}
	sort.Slice(out, func(i, j int) bool {
		return nomadwatch.Key(out[i].Namespace, out[i].Job) < nomadwatch.Key(out[j].Namespace, out[j].Job)
	})
	return out
}

// projectViews are the per-project lines of the cycle, in the plan's
// project order.
func (s *Service) projectViews(c *cycleData, sum pendingSummary) []ProjectView {
	rejected := s.watcher.Rejected()
	byName := map[string]quota.Settings{}
	for _, st := range c.settings {
		byName[st.Project] = st
	}
	var views []ProjectView
	for _, sh := range c.res.Shares {
		exposed := sh.Exposed
		st := state.ProjectStatus{Project: sh.Name, Guaranteed: sh.Guaranteed.String(), Deserved: sh.Deserved.String(),
			Allocated: sh.Usage.String(), Pending: sum.shares[sh.Name].String(), OverQuota: max(sh.Usage-sh.Guaranteed, 0).String(),
			PendingWorkloads: sum.count[sh.Name], SuspendedJobs: sum.suspendedJobs[sh.Name], Updated: c.view.ListedAt}
		qs := byName[sh.Name]
		if qs.HasLimit {
			st.Limit = qs.Limit.String()
		}
		if fe, ok := rejected[sh.Name]; ok {
			st.QuotaError = fe.Error()
		}
		v := ProjectView{ProjectStatus: st, Priority: qs.Priority, OverQuotaWeight: qs.OverQuotaWeight, Namespace: qs.Namespace, Department: qs.Department,
			NonPreemptibleAboveGuarantee: exposed, NeverVictims: sh.NeverVictims}
		if t := s.surplus.tracker; t != nil {
			v.RecentSurplusGPUHours, v.SurplusFactor = t.Used(sh.Name), c.factors[sh.Name]
		}
		views = append(views, v)
	}
	return views
}

// setProjectMetrics sets the per-project gauges (in GPUs) and the queue.
func (s *Service) setProjectMetrics(c *cycleData, sum pendingSummary) {
	gpus := func(x cluster.Shares) float64 { return float64(x) / float64(cluster.SharesPerGPU) }
	for _, sh := range c.res.Shares {
		s.metrics.Guaranteed.WithLabelValues(sh.Name).Set(gpus(sh.Guaranteed))
		s.metrics.Allocated.WithLabelValues(sh.Name).Set(gpus(sh.Usage))
		s.metrics.Deserved.WithLabelValues(sh.Name).Set(gpus(sh.Deserved))
		s.metrics.Pending.WithLabelValues(sh.Name).Set(gpus(sum.shares[sh.Name]))
		s.metrics.Suspended.WithLabelValues(sh.Name).Set(float64(sum.suspendedJobs[sh.Name]))
	}
	s.metrics.Queue.Set(float64(len(c.view.Snapshot.Pending)))
}

// noteActions counts the cycle's actions in the metrics and observes the
// reclaim latency of workloads no longer pending. s.mu must be held.
func (s *Service) noteActions(rep actuator.Report, sum pendingSummary, now time.Time) {
	for _, d := range rep.Done {
		switch d.Event {
		case state.EventSuspend, state.EventSuspendFinished:
			kind := "reclaim"
			if d.Project == d.ForProject {
				kind = "preempt"
			}
			s.metrics.Reclaims.WithLabelValues(d.Project, kind).Inc()
			if _, ok := s.reclaimFor[d.ForWorkload]; !ok && d.ForWorkload != "" {
				s.reclaimFor[d.ForWorkload] = now
			}
		case state.EventResume:
			s.metrics.Resumes.WithLabelValues(d.Project).Inc()
		}
	}
	stillPending := map[string]bool{}
	for _, w := range sum.pending {
		stillPending[w] = true
	}
	for w, t := range s.reclaimFor {
		if !stillPending[w] {
			s.metrics.ReclaimLatency.Observe(now.Sub(t).Seconds())
			delete(s.reclaimFor, w)
		}
	}
}

// unplacedLines says why each of the workloads the plan could not place
// waits.
func unplacedLines(c *cycleData, unplaced []plan.Unplaced) []string {
	var out []string
	for _, u := range unplaced {
		p := c.view.Snapshot.Pending[u.Workload]
		out = append(out, fmt.Sprintf("%s/%s: %s", p.Job, p.Group, u.Reason))
	}
	return out
}

// outOfPlanning lists the snapshot's unavailable nodes and GPUs with the
// reason.
func outOfPlanning(snap *cluster.Snapshot) []string {
	var out []string
	for _, n := range snap.Nodes {
		if n.Unavailable != "" {
			out = append(out, fmt.Sprintf("node %s: %s", n.Name, n.Unavailable))
			continue
		}
		for g, gpu := range n.GPUs {
			if gpu.Unavailable != "" {
				out = append(out, fmt.Sprintf("node %s GPU %d: %s", n.Name, g, gpu.Unavailable))
			}
		}
	}
	return out
}

// writeProjectStatus writes the project status documents that changed
// (apart from their time) and deletes those of projects gone.
func (s *Service) writeProjectStatus(ctx context.Context, views []ProjectView, now time.Time) {
	keep := map[string]bool{}
	for _, pv := range views {
		keep[pv.Project] = true
		old, ok := s.written[pv.Project]
		cur := pv.ProjectStatus
		if ok {
			old.Updated = cur.Updated
			if old == cur {
				continue
			}
		}
		cur.Updated = now
		if err := s.store.PutProjectStatus(ctx, cur); err != nil {
			s.log.Warn("writing project status failed", "project", pv.Project, "error", err)
			continue
		}
		s.written[pv.Project] = cur
	}
	for p := range s.written {
		if !keep[p] {
			delete(s.written, p)
		}
	}
	if err := s.store.PruneProjectStatus(ctx, keep); err != nil {
		s.log.Warn("pruning project status failed", "error", err)
	}
}

// Status returns the last cycle's status.
func (s *Service) Status() Status {
	s.layOutNodes()
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.status
	st.Projects = append([]ProjectView(nil), st.Projects...)
	st.Suspended = append([]SuspendedJob(nil), st.Suspended...)
	st.Nodes = append([]NodeView(nil), st.Nodes...)
	st.Trend = append([]TrendPoint(nil), st.Trend...)
	st.Recent = append([]state.Entry(nil), st.Recent...)
	return st
}

// layOutNodes lays out the last cycle's GPU map (Status.Nodes) and the
// nodes and GPUs out of planning (Status.OutOfPlanning) if no Status call
// has since that cycle, outside s.mu: the cycle that ends
// meanwhile does not wait for it. Status calls lay out one at a time; a
// map laid out from a snapshot a newer cycle replaced meanwhile stands
// until the next Status call lays out the newer one.
func (s *Service) layOutNodes() {
	s.layoutMu.Lock()
	defer s.layoutMu.Unlock()
	s.mu.Lock()
	snap := s.nodesOf
	s.mu.Unlock()
	if snap == nil {
		return
	}
	nodes, out := gpuMap(snap), outOfPlanning(snap)
	if s.util.collector != nil {
		addMemory(nodes, s.util.collector.Last().Reports)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.status.Nodes, s.status.OutOfPlanning = nodes, out
	if s.nodesOf == snap {
		s.nodesOf = nil
	}
}

// lastError is the last cycle's error ("" when it worked).
func (s *Service) lastError() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.status.LastError
}

// Projects returns the per-project lines of the last cycle.
func (s *Service) Projects() []ProjectView {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]ProjectView(nil), s.status.Projects...)
}

// Health says whether the service works: its last cycle succeeded and is
// recent. A standby instance is healthy when it can read (its read-only
// cycles succeed).
func (s *Service) Health() Health {
	s.mu.Lock()
	st := Status{Leader: s.status.Leader, LastError: s.status.LastError, LastCycle: s.status.LastCycle, LastRelist: s.status.LastRelist}
	s.mu.Unlock()
	h := Health{OK: true, Leader: st.Leader}
	switch {
	case st.LastError != "":
		h.OK, h.Reason = false, st.LastError
	case !st.LastCycle.IsZero() && time.Since(st.LastRelist) > s.cfg.MaxStaleness+s.cfg.PlanInterval:
		h.OK, h.Reason = false, fmt.Sprintf("no successful re-list of Nomad since %s", st.LastRelist.Format(time.RFC3339))
	case !st.Leader:
		h.Reason = "standby: another instance holds the leader lock"
	}
	return h
}

// reportRecordErrors says which suspension records the service does not
// act on: the gpushare_record_errors gauge, an error log line when a
// record's report is new or changed, and (leader) one Consul key each
// under <root>/status/record-errors/, written when the set changed.
func (s *Service) reportRecordErrors(ctx context.Context, c *cycleData) {
	errs := c.view.RecordErrors
	s.metrics.RecordErrors.Set(float64(len(errs)))
	now := map[string]string{}
	for _, e := range errs {
		now[e.Key] = e.Reason
		if s.reported[e.Key] != e.Reason {
			s.log.Error("not acting on a suspension record", "key", e.Key, "reason", e.Reason)
		}
	}
	changed := len(now) != len(s.reported)
	for k, r := range now {
		changed = changed || s.reported[k] != r
	}
	s.reported = now
	if c.acted && (changed || !s.reportWritten) {
		if err := s.store.PutRecordErrors(ctx, errs); err != nil {
			s.log.Warn("writing record errors failed", "error", err)
			return
		}
		s.reportWritten = true
	}
}
