package actuator

import (
	"context"
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

// Elastic groups shrink and grow through Nomad's job scale endpoint (a new
// job version; the scale event's message says why), guarded by the job
// modify index the service last saw, so that nothing the owner did
// meanwhile is overwritten. Each scale is recorded before it is made
// (phase "scaling", the target counts and the job as it was) and marked
// once Nomad shows it ("shrunk", the job as the scale left it): a leader
// that dies in between leaves a record the next one reads against Nomad
// (nomadwatch.ShrinkVerdict). The owner's word wins: any other change of
// the job ends the claim, and its groups keep the count they have.

// scaled is a job as this call's last scale left it.
type scaled struct {
	index, version uint64
	counts         map[string]int
}

// errShrinkOrder is returned when the instance the plan shrinks is not the
// one Nomad would stop.
var errShrinkOrder = errors.New("not the instance Nomad stops first")

// settleShrinks brings the shrink records up to date with Nomad: a scale
// that landed is marked, one that never reached Nomad is dropped, and a
// job its owner changed, stopped or purged ends the claim.
func (ap *applying) settleShrinks(ctx context.Context) {
	for _, key := range slices.Sorted(maps.Keys(ap.v.Shrinks)) {
		r := ap.v.Shrinks[key]
		rec := r.Shrink
		var err error
		switch r.Verdict {
		case nomadwatch.ShrinkLanded:
			info := ap.v.Jobs[key]
			rec.Phase, rec.JobModifyIndex, rec.Version = state.ShrinkHeld, info.JobModifyIndex, info.Version
			err = ap.putShrink(ctx, &rec)
		case nomadwatch.ShrinkNotMade, nomadwatch.ShrinkOwnerChanged:
			err = ap.endShrink(ctx, &rec, state.EventShrinkEnded, r.Why)
		}
		if err != nil {
			ap.fail(err)
		}
		ap.shrinks[key] = &rec
	}
}

// shrinkFor carries out one Shrink action: its group's count falls by one,
// and Nomad stops the instance the plan named (the highest instance
// index). The workload it makes room for is skipped when it fails.
func (ap *applying) shrinkFor(ctx context.Context, act plan.Action) {
	forWorkload := ""
	if act.Workload >= 0 {
		w := ap.v.Snapshot.Pending[act.Workload]
		forWorkload = w.Job + "/" + w.Group
	}
	if err := ap.checkShrinkOrder(act); err != nil {
		ap.skip(act, "shrink %s/%s (for %q): %v", act.Job, act.Group, forWorkload, err)
		return
	}
	job, ok := ap.current(act.Job)
	if !ok {
		ap.skip(act, "shrink %s/%s: job not in the view", act.Job, act.Group)
		return
	}
	count, ok := job.counts[act.Group]
	if !ok || count <= 0 {
		ap.skip(act, "shrink %s/%s: the job has no such group", act.Job, act.Group)
		return
	}
	rec := ap.shrinkRecord(act.Job, act.Project)
	g, ok := rec.Groups[act.Group]
	if !ok {
		g.Count = count
	}
	g.Now = count - 1
	rec.Groups[act.Group] = g
	rec.ForWorkload = forWorkload
	msg := fmt.Sprintf("gpushare: shrunk to %d of %d for %s: %s", g.Now, g.Count, forWorkload, act.Reason)
	if err := ap.scale(ctx, rec, act.Group, g.Now, msg, job); err != nil {
		ap.skipped[act.Workload] = true
		ap.fail(err)
		return
	}
	ap.shrunkAllocs[act.Allocations[0]] = true
	ap.history(ctx, &ap.rep, state.Entry{Event: state.EventShrink, Namespace: rec.Namespace, Job: rec.Job, Project: rec.Project,
		Reason: msg, ForWorkload: forWorkload})
	ap.rep.Done = append(ap.rep.Done, Done{Event: state.EventShrink, Namespace: rec.Namespace, Job: rec.Job, Project: rec.Project,
		ForWorkload: forWorkload, Reason: msg})
}

// checkShrinkOrder checks that act's instance is the running instance of
// its group with the highest index not yet shrunk in this call: the one
// Nomad stops when the count falls by one. Two instances with one index
// (which Nomad's naming avoids) are told apart as the plan does: the
// newest, then the highest allocation ID.
func (ap *applying) checkShrinkOrder(act plan.Action) error {
	if len(act.Allocations) != 1 {
		return fmt.Errorf("the plan names %d instances, want one", len(act.Allocations))
	}
	var best *cluster.Allocation
	for i := range ap.v.Snapshot.Allocations {
		al := &ap.v.Snapshot.Allocations[i]
		if al.Job != act.Job || al.Group != act.Group || ap.shrunkAllocs[al.ID] {
			continue
		}
		if best == nil || cluster.CompareStopOrder(cluster.MemberOf(al), cluster.MemberOf(best)) < 0 {
			best = al
		}
	}
	if best == nil {
		return fmt.Errorf("%w: the plan names %s, which no longer runs", errShrinkOrder, act.Allocations[0])
	}
	if best.ID != act.Allocations[0] {
		return fmt.Errorf("%w: the plan names %s, Nomad would stop %s", errShrinkOrder, act.Allocations[0], best.ID)
	}
	return nil
}

// grow scales the groups the plan grows back toward the count their
// owner gave them, while the service's claim on them stands.
func (ap *applying) grow(ctx context.Context, growth []plan.Growth) {
	for _, gr := range growth {
		r := ap.v.Shrinks[gr.Job]
		rec := ap.shrinks[gr.Job]
		if r == nil || !r.Stands() || rec == nil || rec.Phase != state.ShrinkHeld {
			continue
		}
		job, ok := ap.current(gr.Job)
		g, shrunk := rec.Groups[gr.Group]
		if !ok || !shrunk || job.counts[gr.Group] != g.Now {
			continue
		}
		next := *rec
		next.Groups = maps.Clone(rec.Groups)
		g.Now = min(g.Now+gr.Count, g.Count)
		next.Groups[gr.Group] = g
		next.ForWorkload = ""
		msg := fmt.Sprintf("gpushare: grown back to %d of %d: GPUs are free and nothing else waits", g.Now, g.Count)
		if err := ap.scale(ctx, &next, gr.Group, g.Now, msg, job); err != nil {
			ap.fail(err)
			continue
		}
		*rec = next
		ap.rep.Done = append(ap.rep.Done, Done{Event: state.EventGrow, Namespace: rec.Namespace, Job: rec.Job, Project: rec.Project, Reason: msg})
		if !whole(*rec) {
			ap.history(ctx, &ap.rep, state.Entry{Event: state.EventGrow, Namespace: rec.Namespace, Job: rec.Job, Project: rec.Project, Reason: msg})
		} else if err := ap.endShrink(ctx, rec, state.EventGrow, msg+"; every shrunk group runs at its owner's count again"); err != nil {
			ap.fail(err)
		}
	}
}

// whole says whether every group of rec runs at its owner's count again.
func whole(rec state.Shrink) bool {
	for _, g := range rec.Groups {
		if g.Now < g.Count {
			return false
		}
	}
	return true
}

// scale sets group's count of rec's job to count from job (as the service
// last saw it): the record says "scaling" first, then Nomad's scale
// endpoint, guarded by the job modify index, then the record says
// "shrunk" with the job as the scale left it.
func (ap *applying) scale(ctx context.Context, rec *state.Shrink, group string, count int, msg string, job scaled) error {
	key := rec.Key()
	rec.Phase, rec.JobModifyIndex, rec.Version, rec.Reason, rec.Time, rec.By = state.ShrinkScaling, job.index, job.version, msg, ap.now, ap.instance
	if err := ap.putShrink(ctx, rec); err != nil {
		return err
	}
	if err := ap.guard(ctx, "scaling "+key); err != nil {
		return err
	}
	n := int64(count)
	req := &nomadapi.ScalingRequest{Count: &n, Target: map[string]string{"Job": rec.Job, "Group": group}, Message: msg,
		Meta: map[string]any{"gpushare.by": ap.instance}, JobModifyIndex: job.index}
	wo := (&nomadapi.WriteOptions{Namespace: rec.Namespace}).WithContext(ctx)
	if _, _, err := ap.nomad.Jobs().ScaleWithRequest(rec.Job, req, wo); err != nil {
		return fmt.Errorf("scaling %s group %q to %d (record kept at %s; the next cycle reads it against Nomad): %w",
			key, group, count, ap.store.Layout().ShrinkRecord(rec.Namespace, rec.Job), err)
	}
	cur, _, err := ap.nomad.Jobs().Info(rec.Job, (&nomadapi.QueryOptions{Namespace: rec.Namespace}).WithContext(ctx))
	if err != nil {
		return fmt.Errorf("reading %s after scaling it (the next cycle marks it): %w", key, err)
	}
	after := scaledOf(cur)
	if after.version != job.version+1 || after.counts[group] != count {
		return fmt.Errorf("%s changed right after its scale (version %d, group %q at %d); the next cycle decides from what Nomad shows", key, after.version, group, after.counts[group])
	}
	ap.jobs[key] = after
	rec.Phase, rec.JobModifyIndex, rec.Version = state.ShrinkHeld, after.index, after.version
	if err := ap.putShrink(ctx, rec); err != nil {
		ap.log.Warn("job scaled but its shrink record could not be marked; the next cycle marks it from Nomad's state", "job", key, "error", err)
	}
	ap.log.Info("scaled elastic group", "job", key, "group", group, "count", count, "why", msg)
	return nil
}

// current is job key as this call last left it, else as the view shows it.
func (ap *applying) current(key string) (scaled, bool) {
	if j, ok := ap.jobs[key]; ok {
		return j, true
	}
	spec := ap.v.Specs[key]
	if spec == nil || spec.JobModifyIndex == nil || spec.Version == nil || spec.Stop != nil && *spec.Stop {
		return scaled{}, false
	}
	return scaledOf(spec), true
}

func scaledOf(job *nomadapi.Job) scaled {
	s := scaled{index: jobModifyIndex(job), counts: map[string]int{}}
	if job.Version != nil {
		s.version = *job.Version
	}
	for _, tg := range job.TaskGroups {
		if tg.Name != nil && tg.Count != nil {
			s.counts[*tg.Name] = *tg.Count
		}
	}
	return s
}

// shrinkRecord is the shrink record of job key as this call last wrote
// it, or a new one.
func (ap *applying) shrinkRecord(key, project string) *state.Shrink {
	if rec := ap.shrinks[key]; rec != nil && rec.Groups != nil {
		return rec
	}
	ns, id, _ := strings.Cut(key, "/")
	rec := &state.Shrink{Namespace: ns, Job: id, Project: project, Groups: map[string]state.ShrunkGroup{}}
	if old := ap.shrinks[key]; old != nil {
		rec.ModifyIndex = old.ModifyIndex
	}
	ap.shrinks[key] = rec
	return rec
}

// putShrink writes rec (compare-and-set on the index it was read or last
// written at).
func (ap *applying) putShrink(ctx context.Context, rec *state.Shrink) error {
	if err := ap.guard(ctx, "recording the shrink of "+rec.Key()); err != nil {
		return err
	}
	if err := ap.store.PutShrink(ctx, rec); err != nil {
		return fmt.Errorf("recording the shrink of %s: %w", rec.Key(), err)
	}
	return nil
}

// endShrink deletes rec and appends history event e saying why, in one
// transaction.
func (ap *applying) endShrink(ctx context.Context, rec *state.Shrink, e state.Event, why string) error {
	if err := ap.guard(ctx, "ending the shrink of "+rec.Key()); err != nil {
		return err
	}
	entry := state.Entry{Event: e, Namespace: rec.Namespace, Job: rec.Job, Project: rec.Project, Reason: why, By: ap.instance}
	if err := ap.store.CloseShrink(ctx, *rec, entry); err != nil {
		return fmt.Errorf("ending the shrink of %s: %w", rec.Key(), err)
	}
	ap.log.Info("shrink ended", "job", rec.Key(), "why", entry.Reason)
	rec.Groups, rec.ModifyIndex = nil, 0
	return nil
}
