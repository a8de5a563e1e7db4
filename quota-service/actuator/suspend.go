package actuator

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/gpushare/nomad-gpushare/quota-service/nomadwatch"
	"github.com/gpushare/nomad-gpushare/quota-service/state"
	"github.com/gpushare/nomad-gpushare/scheduler/cluster"
	"github.com/gpushare/nomad-gpushare/scheduler/plan"
	nomadapi "github.com/hashicorp/nomad/api"
)

// suspendFor carries out one suspension of the plan unless it is held
// back: record (with the job's spec), then stop, then tag. A recorded
// suspension that was never stopped (a leader died in between) is finished
// here, when the current plan suspends the same job.
func (ap *applying) suspendFor(ctx context.Context, act plan.Action) {
	var w cluster.Pending // none, for a suspension that holds a project to its limit
	forWorkload := ""
	if act.Workload >= 0 {
		w = ap.v.Snapshot.Pending[act.Workload]
		forWorkload = w.Job + "/" + w.Group
	}
	spec := ap.v.Specs[act.Job]
	if spec == nil || spec.Version == nil || spec.JobModifyIndex == nil {
		ap.skip(act, "suspend %s: job not in the view", act.Job)
		return
	}
	if spec.Stop != nil && *spec.Stop {
		// Its owner stopped it after the listing the plan read: its
		// allocations still ran there. Nothing is the service's to stop.
		ap.skip(act, "suspend %s: the job is stopped already (its owner's stop)", act.Job)
		return
	}
	r := ap.v.Records[act.Job]
	if why := ap.holdSuspend(r, act.ForGuarantee || ap.withinGuarantee[w.Project]); why != "" {
		ap.skip(act, "suspend %s (for %q): %s", act.Job, forWorkload, why)
		return
	}
	if why := ap.mayComeBack(ctx, spec); why != "" {
		ap.skip(act, "suspend %s (for %q): %s", act.Job, forWorkload, why)
		return
	}
	rec, event, err := ap.newRecord(ctx, act, forWorkload, w.Project, spec)
	if err == nil {
		err = ap.put(ctx, rec, "recording the suspension of")
	}
	if err != nil {
		ap.skipped[act.Workload] = true
		if errors.Is(err, state.ErrRecordTooLarge) {
			ap.rep.Skipped = append(ap.rep.Skipped, fmt.Sprintf("suspend %s: %v", act.Job, err))
			return
		}
		ap.fail(err)
		return
	}
	ap.history(ctx, &ap.rep, state.Entry{Event: event, Namespace: rec.Namespace, Job: rec.Job, Project: rec.Project, Reason: rec.Reason, ForWorkload: rec.ForWorkload})
	if ap.BeforeStop != nil {
		ap.BeforeStop(ctx, *rec)
	}
	if err := ap.stop(ctx, rec); err != nil {
		ap.skipped[act.Workload] = true
		ap.fail(err)
		return
	}
	ap.rep.Done = append(ap.rep.Done, Done{Event: event, Namespace: rec.Namespace, Job: rec.Job, Project: rec.Project,
		ForWorkload: rec.ForWorkload, ForProject: rec.ForProject, Reason: rec.Reason})
	if ap.AfterStop != nil {
		ap.AfterStop(ctx, *rec)
	}
}

// newRecord is the record of act's suspension of spec's job, and the
// history event it makes: "suspend", or "suspend-finished" over an
// unfinished record (whose key it overwrites).
func (ap *applying) newRecord(ctx context.Context, act plan.Action, forWorkload, forProject string, spec *nomadapi.Job) (*state.Suspension, state.Event, error) {
	rec := &state.Suspension{Namespace: *spec.Namespace, Job: *spec.ID, Project: act.Project, Phase: state.PhaseStopping,
		Reason: act.Reason, Cause: act.Cause.String(), ForWorkload: forWorkload, ForProject: forProject, Time: ap.now, By: ap.instance,
		Version: *spec.Version, JobModifyIndex: *spec.JobModifyIndex, Groups: map[string]int{}, Allocations: act.Allocations,
		Tag: nomadwatch.TagName(tagReason(act, forProject), ap.now), StopNonce: rand.Text()}
	for _, tg := range spec.TaskGroups {
		if tg.Name != nil && tg.Count != nil {
			rec.Groups[*tg.Name] = *tg.Count
		}
	}
	// A job whose elastic groups the service shrank comes back at its
	// owner's counts.
	if r := ap.v.Shrinks[act.Job]; r != nil && r.Stands() {
		for name, g := range r.Groups {
			if _, ok := rec.Groups[name]; ok {
				rec.Groups[name] = g.Count
			}
		}
		spec = withCounts(spec, rec.Groups)
	}
	if err := rec.EncodeSpec(spec, ap.v.Keys); err != nil {
		return nil, "", err
	}
	event := state.EventSuspend
	if old := ap.records[act.Job]; old != nil {
		// An unfinished suspension, or a resumed job's record whose
		// hold is over: the new record replaces it.
		rec.ModifyIndex = old.ModifyIndex
		if old.Phase == state.PhaseStopping {
			event = state.EventSuspendFinished
			rec.Reason = fmt.Sprintf("%s (finishing the suspension %s recorded at %s)", act.Reason, old.By, old.Time.UTC().Format("15:04:05Z"))
		} else if err := ap.untag(ctx, *old); err != nil {
			return nil, "", err
		}
	}
	return rec, event, nil
}

// stop stops rec's job without purging it, tags the version the stop
// made, and marks the record. The stop registers the job as Nomad shows
// it with Stop set, enforcing the recorded job modify index: Nomad refuses
// it if anything changed the job since the plan, so a leader that lost its
// lock between its check (guard) and the stop cannot stop a job another
// leader or its owner changed meanwhile (a deregistration would land
// whatever happened). After it, the stop Nomad shows must be this one. A
// failure after the stop leaves the record "stopping": the next cycle
// reads the stop from Nomad (nomadwatch.StopLanded).
func (ap *applying) stop(ctx context.Context, rec *state.Suspension) error {
	key := rec.Key()
	q := (&nomadapi.QueryOptions{Namespace: rec.Namespace}).WithContext(ctx)
	cur, _, err := ap.nomad.Jobs().Info(rec.Job, q)
	if err != nil {
		return fmt.Errorf("stopping %s: reading the job: %w", key, err)
	}
	if cur.JobModifyIndex == nil || *cur.JobModifyIndex != rec.JobModifyIndex {
		return fmt.Errorf("stopping %s: the job changed since it was planned (job modify index %d, recorded %d); not stopping it", key, jobModifyIndex(cur), rec.JobModifyIndex)
	}
	if cur.Stop != nil && *cur.Stop {
		// Never tag an owner's stop as the service's.
		return fmt.Errorf("stopping %s: the job is stopped already, not by the service; not stopping it", key)
	}
	if err := ap.guard(ctx, "stopping "+key+" (recorded; the next leader decides)"); err != nil {
		return err
	}
	cur.Stop, cur.VersionTag = ptr(true), nil
	// The stopped version carries the record's nonce: the proof, should
	// this instance stop before it marks the record, that the stop is
	// the service's and not an owner's (nomadwatch.MetaStopNonce).
	cur.Meta = maps.Clone(cur.Meta)
	if cur.Meta == nil {
		cur.Meta = map[string]string{}
	}
	cur.Meta[nomadwatch.MetaStopNonce] = rec.StopNonce
	resp, _, err := ap.nomad.Jobs().EnforceRegister(cur, rec.JobModifyIndex, (&nomadapi.WriteOptions{Namespace: rec.Namespace}).WithContext(ctx))
	if err != nil {
		return fmt.Errorf("stopping %s: registering version %d with Stop=true at job modify index %d (record kept at %s; the next cycle decides): %w",
			key, rec.Version, rec.JobModifyIndex, ap.store.Layout().Suspension(rec.Namespace, rec.Job), err)
	}
	if ap.BeforeMark != nil {
		ap.BeforeMark(ctx, *rec)
		if ctx.Err() != nil {
			return fmt.Errorf("stopped %s, not marked (the next cycle marks it): %w", key, ctx.Err())
		}
	}
	job, _, err := ap.nomad.Jobs().Info(rec.Job, q)
	if err != nil {
		return fmt.Errorf("reading %s after its stop (the next cycle marks it): %w", key, err)
	}
	if job.Stop == nil || !*job.Stop || jobModifyIndex(job) != resp.JobModifyIndex {
		return fmt.Errorf("%s changed right after its stop (job modify index %d); the next cycle decides from what Nomad shows", key, jobModifyIndex(job))
	}
	next := *rec
	next.Phase = state.PhaseSuspended
	next.StopVersion, next.StopJobModifyIndex, next.StoppedAt = *job.Version, jobModifyIndex(job), ap.now
	ap.tag(ctx, job, &next)
	if err := ap.put(ctx, &next, "marking stopped"); err != nil {
		ap.log.Warn("job stopped but its record could not be marked; the next cycle marks it from Nomad's state", "job", key, "error", err)
	}
	*rec = next
	ap.log.Info("suspended job", "job", key, "project", rec.Project, "for", rec.ForWorkload, "tag", rec.Tag, "tagged", rec.Tagged, "reason", rec.Reason)
	return nil
}

// tagReason is the tag name's reason: a gang that waits whole, the
// project the GPUs went to, or, for a suspension that holds the project to
// its limit, its limit.
func tagReason(act plan.Action, forProject string) string {
	switch {
	case act.Cause == plan.CauseGang:
		return "gang-of-" + act.Project
	case act.Cause == plan.CauseHold:
		return "held-of-" + act.Project
	case forProject == "":
		return "limit-of-" + act.Project
	}
	return "for-" + forProject
}

// causeOf is why the plan stopped rec's job: its Cause, or, in a record
// written before Cause was kept, what its reason and workload say.
func causeOf(rec state.Suspension) plan.Cause {
	if c, ok := plan.ParseCause(rec.Cause); ok {
		return c
	}
	switch {
	case strings.HasPrefix(rec.Reason, plan.GangReason):
		return plan.CauseGang
	case strings.HasPrefix(rec.Reason, plan.MoveReason):
		return plan.CauseMove
	case strings.HasPrefix(rec.Reason, plan.HoldReason):
		return plan.CauseHold
	case rec.ForWorkload == "":
		return plan.CauseLimit
	}
	return plan.CauseReclaim
}

func jobModifyIndex(job *nomadapi.Job) uint64 {
	if job.JobModifyIndex == nil {
		return 0
	}
	return *job.JobModifyIndex
}

// withCounts is job with its task groups' counts set from counts (a copy
// where any differs; job itself is not changed).
func withCounts(job *nomadapi.Job, counts map[string]int) *nomadapi.Job {
	out := job
	for i, tg := range job.TaskGroups {
		if tg.Name == nil {
			continue
		}
		c, ok := counts[*tg.Name]
		if !ok || tg.Count != nil && *tg.Count == c {
			continue
		}
		if out == job {
			cp := *job
			cp.TaskGroups = slices.Clone(job.TaskGroups)
			out = &cp
		}
		g := *tg
		g.Count = &c
		out.TaskGroups[i] = &g
	}
	return out
}
