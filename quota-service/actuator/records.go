package actuator

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/gpushare/nomad-gpushare/quota-service/nomadwatch"
	"github.com/gpushare/nomad-gpushare/quota-service/state"
	"github.com/gpushare/nomad-gpushare/scheduler/plan"
	nomadapi "github.com/hashicorp/nomad/api"
)

// settleRecords brings every record up to date with what Nomad shows
// (its verdict): a landed stop or resume is marked, a suspended job whose
// tag is missing is tagged, a closed record is deleted with its history
// entry (and the service's tag removed from the job), a resumed job's
// record ends with its hold. Rejected and unfinished records are left
// alone here.
func (ap *applying) settleRecords(ctx context.Context) {
	for _, key := range slices.Sorted(maps.Keys(ap.v.Records)) {
		r := ap.v.Records[key]
		var err error
		switch r.Verdict {
		case nomadwatch.StopLanded:
			err = ap.markStopped(ctx, r.Current, ap.records[key])
		case nomadwatch.Suspended:
			err = ap.ensureTagged(ctx, r.Current, ap.records[key])
		case nomadwatch.ResumeLanded:
			err = ap.markResumed(ctx, ap.records[key], r.Current)
		case nomadwatch.Resumed:
			err = ap.endResumed(ctx, ap.records[key])
		case nomadwatch.Closed:
			err = ap.close(ctx, key, r.Event, r.Why)
		case nomadwatch.Rebuild:
			err = ap.rebuild(ctx, r)
		case nomadwatch.Rescaled:
			err = ap.adoptRescale(ctx, r.Current, ap.records[key], r.Why)
		}
		if err == nil {
			err = ap.resign(ctx, key)
		}
		if err != nil {
			ap.fail(err)
		}
	}
}

// resign writes the record of key again when a previous key signed it,
// so that it still verifies once that key is retired.
func (ap *applying) resign(ctx context.Context, key string) error {
	rec := ap.records[key]
	if rec == nil || !rec.SignedWithPrevious {
		return nil
	}
	next := *rec
	if err := ap.put(ctx, &next, "signing with the current key"); err != nil {
		return err
	}
	ap.log.Info("signed a suspension record with the current record key", "job", key)
	return nil
}

// rebuild writes the record of a job Nomad shows stopped under the
// service's tag from Nomad's state (nomadwatch.Rebuild), replacing what
// is at its key (nothing, or a record the service cannot verify or that
// names an older suspension). A tag whose proof the current keys cannot
// check (a lost key) is put again with one.
func (ap *applying) rebuild(ctx context.Context, r *nomadwatch.Record) error {
	key := r.Key()
	rec := *r.Rebuilt
	if err := rec.EncodeSpec(r.Current, ap.v.Keys); err != nil {
		return err
	}
	if r.Retag {
		if err := ap.guard(ctx, "tagging "+key+" again"); err != nil {
			return err
		}
		if err := ap.untag(ctx, rec); err != nil {
			return err
		}
		rec.Tagged = false
		ap.tag(ctx, r.Current, &rec)
	}
	if err := ap.put(ctx, &rec, "rebuilding the record of"); err != nil {
		return err
	}
	ap.log.Warn("suspension record rebuilt from Nomad's tagged version", "job", key, "tag", rec.Tag, "why", r.Why)
	ap.done(ctx, rec, state.EventRecordRebuilt, r.Why)
	return nil
}

// abandonUnfinished drops the unfinished suspensions (recorded, never
// stopped) that the current plan does not suspend: the need they were
// recorded for is gone, and the job is not stopped.
func (ap *applying) abandonUnfinished(ctx context.Context) {
	for _, key := range slices.Sorted(maps.Keys(ap.v.Records)) {
		r := ap.v.Records[key]
		if r.Verdict != nomadwatch.Unfinished || ap.suspending[key] {
			continue
		}
		if err := ap.close(ctx, key, state.EventSuspendAbandoned, "recorded but never stopped, and the current plan no longer needs it; the job was not stopped"); err != nil {
			ap.fail(err)
		}
	}
}

// put writes rec (compare-and-set against the last write) after the guard.
func (ap *applying) put(ctx context.Context, rec *state.Suspension, what string) error {
	if err := ap.guard(ctx, what+" "+rec.Key()); err != nil {
		return err
	}
	if err := ap.store.PutSuspension(ctx, rec); err != nil {
		return fmt.Errorf("%s %s: %w", what, rec.Key(), err)
	}
	ap.records[rec.Key()] = rec
	return nil
}

// close deletes the record of key with a history entry saying why, after
// removing the service's tag from the job's versions.
func (ap *applying) close(ctx context.Context, key string, e state.Event, why string) error {
	rec := ap.records[key]
	if rec == nil {
		return nil
	}
	if err := ap.guard(ctx, "closing the record of "+key); err != nil {
		return err
	}
	if err := ap.untag(ctx, *rec); err != nil {
		return err
	}
	if err := ap.store.CloseSuspension(ctx, *rec, ap.entry(*rec, e, why)); err != nil {
		return err
	}
	delete(ap.records, key)
	ap.log.Info("suspension record closed", "job", key, "event", e, "why", why)
	ap.reportDone(*rec, e, why)
	return nil
}

// markStopped records a stop Nomad shows (job is Nomad's job now): the
// stop's version and index, and the tag.
func (ap *applying) markStopped(ctx context.Context, job *nomadapi.Job, rec *state.Suspension) error {
	next := *rec
	next.Phase = state.PhaseSuspended
	next.StopVersion, next.StopJobModifyIndex = *job.Version, *job.JobModifyIndex
	next.StoppedAt = ap.now
	next.Tagged = job.VersionTag != nil && job.VersionTag.Name == rec.Tag
	ap.tag(ctx, job, &next)
	if err := ap.put(ctx, &next, "marking stopped"); err != nil {
		return err
	}
	ap.log.Info("marked a suspension whose stop Nomad shows", "job", rec.Key(), "stop_version", next.StopVersion, "tagged", next.Tagged)
	return nil
}

// adoptRescale takes the owner's scale of a suspended job into its
// record: the job resumes at the owner's version and counts (the record's
// version, stop and groups follow the job, its spec is sealed again), and
// the service's tag moves to that version.
func (ap *applying) adoptRescale(ctx context.Context, job *nomadapi.Job, rec *state.Suspension, why string) error {
	if err := ap.untag(ctx, *rec); err != nil {
		return err
	}
	next := *rec
	// A resume under way did not land: the job is stopped at its
	// owner's scale.
	next.Phase = state.PhaseSuspended
	next.Version, next.JobModifyIndex = *job.Version, *job.JobModifyIndex
	next.StopVersion, next.StopJobModifyIndex = *job.Version, *job.JobModifyIndex
	next.Groups = map[string]int{}
	for _, tg := range job.TaskGroups {
		if tg.Name != nil && tg.Count != nil {
			next.Groups[*tg.Name] = *tg.Count
		}
	}
	if err := next.EncodeSpec(job, ap.v.Keys); err != nil {
		return err
	}
	next.Tagged = false
	ap.tag(ctx, job, &next)
	if err := ap.put(ctx, &next, "adopting the owner's scale of"); err != nil {
		return err
	}
	*rec = next
	ap.done(ctx, next, state.EventOwnerRescaled, why)
	ap.log.Info("suspended job scaled by its owner; it resumes at the new counts", "job", rec.Key(), "version", next.Version, "groups", next.Groups)
	return nil
}

// ensureTagged tags the stopped version of a suspended job that is not
// tagged yet (tagging failed before).
func (ap *applying) ensureTagged(ctx context.Context, job *nomadapi.Job, rec *state.Suspension) error {
	if rec.Tagged || (ap.SkipTag != nil && ap.SkipTag(*rec)) {
		return nil
	}
	next := *rec
	ap.tag(ctx, job, &next)
	if !next.Tagged {
		return nil
	}
	return ap.put(ctx, &next, "marking tagged")
}

// tag puts rec's tag on job's current version (the stop's) and sets
// rec.Tagged when Nomad took it. A failure is logged: the job stays
// suspended, only unprotected from Nomad's garbage collector, whose
// removal the record's spec makes up for.
func (ap *applying) tag(ctx context.Context, job *nomadapi.Job, rec *state.Suspension) {
	if rec.Tagged || (ap.SkipTag != nil && ap.SkipTag(*rec)) {
		return
	}
	if err := ap.guard(ctx, "tagging "+rec.Key()); err != nil {
		ap.log.Warn("not tagging", "job", rec.Key(), "error", err)
		return
	}
	if ap.v.Keys == nil {
		ap.log.Warn("not tagging: no record key is loaded to prove the tag", "job", rec.Key())
		return
	}
	desc := ap.v.Keys.ProveTag(tagDescription(*rec), rec.Namespace, rec.Job, *job.Version, rec.Tag)
	_, err := ap.nomad.Jobs().TagVersion(rec.Job, *job.Version, rec.Tag, desc,
		(&nomadapi.WriteOptions{Namespace: rec.Namespace}).WithContext(ctx))
	if err != nil {
		ap.log.Warn("tagging the suspended version failed; the record's spec keeps the job", "job", rec.Key(), "tag", rec.Tag, "error", err)
		return
	}
	rec.Tagged = true
}

// tagDescription tells the owner, in `nomad job history`, who took the
// GPUs, when and why, and what their own commands do.
func tagDescription(rec state.Suspension) string {
	who := fmt.Sprintf("for project %s (%s)", rec.ForProject, rec.ForWorkload)
	switch cause := causeOf(rec); {
	case cause == plan.CauseGang && rec.ForWorkload == "":
		who = "until all of the gang fits"
	case cause == plan.CauseGang:
		who = fmt.Sprintf("until all of the gang fits; its GPUs went to %s of project %s", rec.ForWorkload, rec.ForProject)
	case cause == plan.CauseHold:
		who = "while queued: Nomad would have placed it in GPUs the plan freed for other work"
	case rec.ForWorkload == "":
		who = "to hold project " + rec.Project + " to its limit"
	}
	if strings.HasPrefix(rec.Reason, "rebuilt from") {
		who = "for project " + rec.Project
	}
	return fmt.Sprintf("Suspended by gpushare at %s %s: %s. It resumes by itself when GPUs free up. "+
		"`nomad job start` or a new version runs it under the normal rules: now if GPUs are free, else it waits in Nomad's queue; `nomad job stop` keeps it stopped.",
		rec.Time.UTC().Format("2006-01-02T15:04:05Z"), who, rec.Reason)
}

// untag removes rec's tag from every version of the job that carries it
// (a stop or a `nomad job start` copies the current version's tag to the
// new version). Only the service's own tags are touched.
func (ap *applying) untag(ctx context.Context, rec state.Suspension) error {
	if !strings.HasPrefix(rec.Tag, nomadwatch.TagPrefix) {
		return nil
	}
	wo := (&nomadapi.WriteOptions{Namespace: rec.Namespace}).WithContext(ctx)
	for range 16 {
		_, err := ap.nomad.Jobs().UntagVersion(rec.Job, rec.Tag, wo)
		if err != nil && strings.Contains(err.Error(), "not found") {
			return nil
		}
		if err != nil {
			return fmt.Errorf("removing the tag %s from %s: %w", rec.Tag, rec.Key(), err)
		}
	}
	return fmt.Errorf("removing the tag %s from %s: still present after 16 removals", rec.Tag, rec.Key())
}

// markResumed records a resume Nomad shows (a leader stopped before it
// marked the record).
func (ap *applying) markResumed(ctx context.Context, rec *state.Suspension, job *nomadapi.Job) error {
	next := *rec
	next.Phase = state.PhaseResumed
	next.ResumeJobModifyIndex = *job.JobModifyIndex
	if err := ap.put(ctx, &next, "marking resumed"); err != nil {
		return err
	}
	ap.log.Info("marked a resume Nomad shows", "job", rec.Key(), "job_modify_index", next.ResumeJobModifyIndex)
	return nil
}

// endResumed removes the tag from a resumed job and deletes its record
// once the resume hold is over.
func (ap *applying) endResumed(ctx context.Context, rec *state.Suspension) error {
	if rec.Tagged {
		if err := ap.guard(ctx, "untagging "+rec.Key()); err != nil {
			return err
		}
		if err := ap.untag(ctx, *rec); err != nil {
			return err
		}
		next := *rec
		next.Tagged = false
		if err := ap.put(ctx, &next, "marking untagged"); err != nil {
			return err
		}
	}
	if ap.now.Sub(rec.ResumedAt) < ap.opts.ResumeHold {
		return nil
	}
	return ap.close(ctx, rec.Key(), state.EventRunningAgain, "resumed; its hold against a new suspension ended")
}
