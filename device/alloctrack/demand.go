package alloctrack

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/gpushare/nomad-gpushare/device/partition"
	"github.com/gpushare/nomad-gpushare/internal/feasible"
	"github.com/gpushare/nomad-gpushare/vocab"
	"github.com/gpushare/nomad-gpushare/vocab/nomadread"
	"github.com/hashicorp/nomad/api"
)

// Demand is one device request of an allocation that the Nomad scheduler
// could not place and that this node could serve, in the form the partition
// policy takes. Its Key is stable across re-evaluations:
// namespace/job/group/task/request#n, n counting the group's failed
// allocations; Since is the job's submission time.
type Demand = partition.Demand

// Which waiting demand counts for this node is approximated, not
// re-derived from Nomad's feasibility checks:
//   - the demand is a blocked evaluation's failed task group whose failure
//     names devices (the "missing devices" constraint or an exhausted
//     "devices: ..." dimension); count is its failed allocations
//     (CoalescedFailures + 1) less the allocations of that group that the
//     evaluation itself placed on this node since (see placedByEval);
//   - this node admits the group as Nomad decides it, devices left aside:
//     the job's datacenters and node pool, and the job's, group's and
//     tasks' constraints on the node (feasible.Node.NodeRejection);
//   - the request names vendor nvidia (or none) and type gpu or gpu-share,
//     and if it names a device group, a group of this node of that type.
//
// Device constraints are not evaluated (the family the demand waits for
// may not be published yet): such demand may switch a GPU it cannot use.
// It then still waits, so it keeps that GPU from going back, but it never
// takes more than it asks for, and older demand is served first.

// jobCache keeps job specifications by namespace/ID at the evaluation's job
// modify index, so each job version is read once.
type jobCache map[string]*api.Job

func jobKey(ns, id string) string { return ns + "/" + id }

// blockedDeviceEvals is the filter (a go-bexpr expression, applied by the
// servers) of the evaluation listings: the blocked evaluations with a task
// group that failed for devices (see deviceFailure), so that a node reads
// only what it may serve, not every blocked evaluation of the cluster.
const blockedDeviceEvals = `Status == "blocked" and (any FailedTGAllocs as _, m { "missing devices" in m.ConstraintFiltered or any m.DimensionExhausted as d, _ { d matches "^devices" } })`

// listBlocked lists the blocked evaluations that failed for devices, in
// every namespace; wait, when set, makes it a blocking query.
func (t *Tracker) listBlocked(ctx context.Context, wait *api.QueryOptions) ([]*api.Evaluation, *api.QueryMeta, error) {
	q := wait
	if q == nil {
		var cancel context.CancelFunc
		q, cancel = t.q(ctx)
		defer cancel()
	}
	q.Namespace = "*"
	q.Filter = blockedDeviceEvals
	evals, meta, err := t.client.Evaluations().List(q)
	if err != nil {
		return nil, nil, fmt.Errorf("list blocked evaluations at %s: %w", t.client.Address(), err)
	}
	return evals, meta, nil
}

// blocked returns the blocked evaluations: the last answer of Watch's
// blocking query while it follows them and that answer's request was sent
// after the last change of the allocation list (demand is compared with
// those holdings: an evaluation placed since must not still count as
// waiting), else a listing now, which the view then keeps.
func (t *Tracker) blocked(ctx context.Context) ([]*api.Evaluation, error) {
	t.mu.Lock()
	v := &t.view
	fresh, evals := v.evalsLive && !v.evalsAt.Before(v.allocsChanged), v.evals
	t.mu.Unlock()
	if fresh {
		return evals, nil
	}
	sent := t.now()
	evals, meta, err := t.listBlocked(ctx, nil)
	if err != nil {
		return nil, err
	}
	t.keepEvals(evals, meta.LastIndex, sent)
	return evals, nil
}

// keepEvals makes a listing of the blocked evaluations, whose request was
// sent at sent, the view's unless a newer one is there.
func (t *Tracker) keepEvals(evals []*api.Evaluation, index uint64, sent time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	v := &t.view
	if index >= v.evalsIndex || sent.After(v.evalsAt) {
		v.evals, v.evalsIndex, v.evalsAt = evals, index, later(v.evalsAt, sent)
	}
}

// readDemand takes the blocked evaluations (see blocked) and reads the
// specifications of jobs not in the cache. The cache is trimmed to the
// jobs that wait. Demand is netted against b's allocation list, the one
// the snapshot's usage counts (placedByEval).
func (t *Tracker) readDemand(ctx context.Context, b *basis) ([]Demand, error) {
	evals, err := t.blocked(ctx)
	if err != nil {
		return nil, err
	}
	node, placed := b.node, placedByEval(b.allocs)
	// One blocked evaluation per job is the rule; keep the newest.
	latest := map[string]*api.Evaluation{}
	for _, e := range evals {
		if e == nil || e.Status != "blocked" {
			continue
		}
		k := jobKey(e.Namespace, e.JobID)
		if o := latest[k]; o == nil || e.CreateIndex > o.CreateIndex {
			latest[k] = e
		}
	}
	if t.jobs == nil {
		t.jobs = jobCache{}
	}
	for k := range t.jobs {
		if latest[k] == nil {
			delete(t.jobs, k)
		}
	}
	groups, unit, facts := deviceGroupNames(node), shareUnit(node), feasible.NodeOf(node)
	var out []Demand
	for _, k := range slices.Sorted(maps.Keys(latest)) {
		e := latest[k]
		if !anyDeviceFailure(e.FailedTGAllocs) {
			continue
		}
		job := t.jobs[k]
		if job == nil || job.JobModifyIndex == nil || *job.JobModifyIndex != e.JobModifyIndex {
			jq, jcancel := t.q(ctx)
			jq.Namespace = e.Namespace
			job, _, err = t.client.Jobs().Info(e.JobID, jq)
			jcancel()
			if err != nil {
				// Deregistered meanwhile, or a transient error: skip the
				// job this time.
				t.debug("cannot read job of a blocked evaluation", "job", k, "error", err)
				continue
			}
			t.jobs[k] = job
		}
		out = append(out, jobDemand(k, job, admitted(facts, job, e.FailedTGAllocs), placed[e.ID], groups, unit)...)
	}
	return out, nil
}

// placedByEval counts the allocations of a node by the evaluation that
// placed them and their task group: evaluation ID -> group -> count.
//
// A blocked evaluation keeps its ID, its create index and the failures it
// was created with (FailedTGAllocs) when Nomad unblocks it: the scheduler
// places what now fits, with the evaluation's ID as the allocations'
// EvalID, then re-blocks the same evaluation unchanged or marks it
// complete, in a later write than the plan's. Until that write reaches the
// listing (seconds: the evaluations are read apart from the allocations),
// the evaluation still lists failures that this node already runs, and
// counting both would open a GPU for demand already served. So its
// failures are netted against the allocations it placed here, terminal
// ones too (each served one failure); the allocations of the run that
// created it (placed by the evaluation before it, in a plan written after
// it) carry the other ID and are not netted. What it placed on other
// nodes still counts until the listing catches up.
func placedByEval(allocs []*api.Allocation) map[string]map[string]int {
	out := map[string]map[string]int{}
	for _, a := range allocs {
		if a == nil || a.EvalID == "" {
			continue
		}
		if out[a.EvalID] == nil {
			out[a.EvalID] = map[string]int{}
		}
		out[a.EvalID][a.TaskGroup]++
	}
	return out
}

// admitted is the failed task groups of job that this node admits.
func admitted(facts feasible.Node, job *api.Job, failed map[string]*api.AllocationMetric) map[string]*api.AllocationMetric {
	out := map[string]*api.AllocationMetric{}
	for _, tg := range job.TaskGroups {
		if tg == nil || tg.Name == nil || failed[*tg.Name] == nil {
			continue
		}
		if facts.NodeRejection(job, tg) == "" {
			out[*tg.Name] = failed[*tg.Name]
		}
	}
	return out
}

func (t *Tracker) debug(msg string, args ...any) {
	if t.cfg.Logger != nil {
		t.cfg.Logger.Debug(msg, args...)
	}
}

func anyDeviceFailure(m map[string]*api.AllocationMetric) bool {
	for _, am := range m {
		if deviceFailure(am) {
			return true
		}
	}
	return false
}

// deviceFailure reports whether a task group failed (also) for devices.
func deviceFailure(am *api.AllocationMetric) bool {
	if am == nil {
		return false
	}
	if am.ConstraintFiltered["missing devices"] > 0 {
		return true
	}
	for dim := range am.DimensionExhausted {
		if strings.HasPrefix(dim, "devices") {
			return true
		}
	}
	return false
}

// deviceGroupNames lists the node's gpushare device group names by type.
// MIG device groups are left out: a request naming one waits for a MIG
// device, which no switch of a whole GPU provides.
func deviceGroupNames(node *api.Node) map[string]map[string]bool {
	out := map[string]map[string]bool{vocab.TypeWhole: {}, vocab.TypeShare: {}}
	if node.NodeResources == nil {
		return out
	}
	for _, g := range node.NodeResources.Devices {
		if g != nil && g.Vendor == vocab.Vendor && out[g.Type] != nil && !isMIGGroup(g) {
			out[g.Type][g.Name] = true
		}
	}
	return out
}

// shareUnit is how many units one share instance of the node stands for.
func shareUnit(node *api.Node) int {
	if node.NodeResources == nil {
		return 1
	}
	return nomadread.ShareUnit(node.NodeResources.Devices)
}

// isMIGGroup reports whether the plugin published the group for MIG
// devices.
func isMIGGroup(g *api.NodeDeviceResource) bool {
	a := g.Attributes[vocab.SharingAttr]
	return a != nil && a.StringVal != nil && *a.StringVal == vocab.SharingMIG
}

// requestFamily says which gpushare family a device request asks for, if
// any: a request that names a device group must name one of this node's.
func requestFamily(req vocab.Request, groups map[string]map[string]bool) (typ string, ok bool) {
	if !req.Whole() && !req.Share() {
		return "", false
	}
	if req.Name != "" && !groups[req.Type][req.Name] {
		return "", false
	}
	return req.Type, true
}

// jobDemand turns the failed task groups of a job into demand, less what
// the blocked evaluation already placed here (placed, by group); a share
// request of n instances asks for n*unit units.
func jobDemand(k string, job *api.Job, failed map[string]*api.AllocationMetric, placed map[string]int, groups map[string]map[string]bool, unit int) []Demand {
	var since time.Time
	if job.SubmitTime != nil {
		since = time.Unix(0, *job.SubmitTime)
	}
	var out []Demand
	for _, tg := range job.TaskGroups {
		if tg == nil || tg.Name == nil {
			continue
		}
		am := failed[*tg.Name]
		if !deviceFailure(am) {
			continue
		}
		waiting := am.CoalescedFailures + 1 - placed[*tg.Name]
		for _, task := range tg.Tasks {
			if task == nil || task.Resources == nil {
				continue
			}
			for ri, req := range task.Resources.Devices {
				if req == nil {
					continue
				}
				r := nomadread.ParseRequest(req)
				typ, ok := requestFamily(r, groups)
				n := r.Count
				if !ok || n <= 0 {
					continue
				}
				for a := range waiting {
					d := Demand{Key: fmt.Sprintf("%s/%s/%s/%d#%d", k, *tg.Name, task.Name, ri, a), Since: since}
					if typ == vocab.TypeWhole {
						d.Whole = n
					} else {
						d.Shares = n * unit
					}
					out = append(out, d)
				}
			}
		}
	}
	return out
}
