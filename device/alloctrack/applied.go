package alloctrack

import (
	"context"
	"fmt"

	"github.com/gpushare/nomad-gpushare/internal/feasible"
	"github.com/gpushare/nomad-gpushare/vocab/nomadread"
	"github.com/hashicorp/nomad/api"
)

// Applied says, for each family, whether every placement that a plan made
// from a state older than an index could give this node in that family
// has been applied: see PlansApplied.
type Applied struct {
	Whole, Share bool
	// Why names an evaluation still in the way of each family that is not
	// applied, for logs.
	Why string
}

// liveEvals is the filter (a go-bexpr expression, applied by the
// servers) of the evaluations a scheduler worker may be processing:
// pending ones (queued or being processed) and blocked ones (the servers
// unblock them without a write, and they are written again only once
// processed).
const liveEvals = `Status == "pending" or Status == "blocked"`

// PlansApplied tells, per family, whether every plan made from a state of
// the servers older than index (the node's modify index once the servers
// saw a GPU withdrawn) that could place an instance of that family on this
// node has been applied. It reads the evaluations from the leader; an
// allocation list read after it then holds every such placement.
//
// Why it holds: Nomad's scheduler writes the evaluation it processed
// (complete, failed, or blocked again) only after the plan it made was
// applied, and while it processes one nothing writes it (the servers
// unblock a blocked evaluation in memory, without a write). A plan made
// from a state older than index was made for an evaluation that was
// pending or blocked at index with a modify index below it, and stays so
// until that plan is applied. So once no such evaluation is left whose job
// could ask this node for the family (a device request of that family, in
// a task group of the job's datacenters and node pool; a job whose version
// is not the evaluation's counts for both), no such plan is left either.
// Evaluations created or written at index or later are processed from a
// state at least that new (the worker waits for the evaluation's modify
// index), which shows the GPU withdrawn.
func (t *Tracker) PlansApplied(ctx context.Context, index uint64) (Applied, error) {
	nodeID, err := t.NodeID(ctx)
	if err != nil {
		return Applied{}, err
	}
	q, cancel := t.q(ctx)
	defer cancel()
	q.AllowStale = false
	q.Namespace, q.Filter = "*", liveEvals
	evals, _, err := t.client.Evaluations().List(q)
	if err != nil {
		return Applied{}, fmt.Errorf("list live evaluations at %s: %w", t.client.Address(), err)
	}
	t.mu.Lock()
	node := t.view.node
	t.mu.Unlock()
	if node == nil || node.ID != nodeID {
		return Applied{}, fmt.Errorf("node %s not read yet", nodeID)
	}
	facts := feasible.NodeOf(node)
	out := Applied{Whole: true, Share: true}
	seen := map[string]bool{}
	for _, e := range evals {
		if !out.Whole && !out.Share {
			break // nothing left to prove: read no more jobs
		}
		if e == nil || e.ModifyIndex >= index {
			continue
		}
		k := jobKey(e.Namespace, e.JobID)
		seen[k] = true
		whole, share := t.evalFamilies(ctx, facts, e)
		if whole && out.Whole || share && out.Share {
			out.Why += fmt.Sprintf("evaluation %s of %s (%s, modify index %d < %d); ", e.ID, k, e.Status, e.ModifyIndex, index)
		}
		out.Whole = out.Whole && !whole
		out.Share = out.Share && !share
	}
	for k := range t.fenceJobs {
		if !seen[k] {
			delete(t.fenceJobs, k)
		}
	}
	return out, nil
}

// evalFamilies says in which families the evaluation's job could ask this
// node for instances: both when the job cannot be read at the
// evaluation's version.
func (t *Tracker) evalFamilies(ctx context.Context, facts feasible.Node, e *api.Evaluation) (whole, share bool) {
	k := jobKey(e.Namespace, e.JobID)
	job := t.fenceJobs[k]
	if job == nil || job.JobModifyIndex == nil || *job.JobModifyIndex != e.JobModifyIndex {
		jq, cancel := t.q(ctx)
		jq.Namespace = e.Namespace
		var err error
		job, _, err = t.client.Jobs().Info(e.JobID, jq)
		cancel()
		if err != nil {
			t.debug("cannot read the job of a live evaluation; it counts for both families", "job", k, "error", err)
			return true, true
		}
		if t.fenceJobs == nil {
			t.fenceJobs = jobCache{}
		}
		t.fenceJobs[k] = job
	}
	return jobFamilies(facts, job, e.JobModifyIndex)
}

// jobFamilies says in which families the job (at version, its job modify
// index) asks for devices in a task group the node's datacenter and pool
// admit; both when the job is at another version.
func jobFamilies(facts feasible.Node, job *api.Job, version uint64) (whole, share bool) {
	if job.JobModifyIndex == nil || *job.JobModifyIndex != version {
		return true, true
	}
	if !feasible.InDatacenters(job.Datacenters, facts.Datacenter) || !feasible.InPool(job, facts.Pool) {
		return false, false
	}
	for _, tg := range job.TaskGroups {
		if tg == nil {
			continue
		}
		for _, task := range tg.Tasks {
			if task == nil || task.Resources == nil {
				continue
			}
			for _, d := range task.Resources.Devices {
				if d == nil {
					continue
				}
				r := nomadread.ParseRequest(d)
				whole = whole || r.Whole()
				share = share || r.Share()
			}
		}
	}
	return whole, share
}
