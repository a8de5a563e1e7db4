package actuator

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"time"

	"github.com/gpushare/nomad-gpushare/quota-service/nomadwatch"
	"github.com/gpushare/nomad-gpushare/quota-service/state"
	nomadapi "github.com/hashicorp/nomad/api"
)

// resume registers r's job again with Stop=false: the suspended version
// as Nomad keeps it, or, when Nomad's garbage collector removed the job,
// the record's spec. The record says "resuming" before the register and
// "resumed" after it; the register is guarded by the job modify index of
// the service's stop (or, for a vanished job, by the job's absence), so
// that nothing its owner did meanwhile is overwritten. The tag is removed
// once the job is registered again.
func (ap *applying) resume(ctx context.Context, r *nomadwatch.Record, rec *state.Suspension) error {
	key := rec.Key()
	job, from, err := ap.resumeSpec(ctx, r)
	if err != nil {
		return err
	}
	// The counts the record keeps: the owner's, also for elastic groups
	// the service had shrunk before it suspended the job.
	job = withCounts(job, rec.Groups)
	// The spec may be the View's (r.Current), which the Builder caches
	// and the next View reads: the changes go on a copy.
	cp := *job
	job = &cp
	job.Stop = ptr(false)
	job.VersionTag = nil
	if _, ok := job.Meta[nomadwatch.MetaStopNonce]; ok {
		// Resumed from a stopped version (the owner's scale of it, or
		// Nomad no longer keeps the running one): its stop's nonce goes.
		job.Meta = maps.Clone(job.Meta)
		delete(job.Meta, nomadwatch.MetaStopNonce)
	}
	var enforce uint64
	if r.Verdict != nomadwatch.Vanished {
		enforce = jobModifyIndex(r.Current)
	}
	next := *rec
	next.Phase, next.ResumedAt = state.PhaseResuming, ap.now
	if err := ap.put(ctx, &next, "recording the resume of"); err != nil {
		return err
	}
	if err := ap.guard(ctx, "resuming "+key); err != nil {
		return err
	}
	resp, _, err := ap.nomad.Jobs().EnforceRegister(job, enforce, (&nomadapi.WriteOptions{Namespace: rec.Namespace}).WithContext(ctx))
	if err != nil {
		return fmt.Errorf("resuming %s: registering %s with Stop=false: %w", key, from, err)
	}
	next.Phase, next.ResumeJobModifyIndex = state.PhaseResumed, resp.JobModifyIndex
	if err := ap.put(ctx, &next, "marking resumed"); err != nil {
		ap.log.Warn("job resumed but its record could not be marked; the next cycle marks it from Nomad's state", "job", key, "error", err)
		return nil
	}
	*rec = next
	ap.log.Info("resumed job", "job", key, "project", rec.Project, "from", from)
	if err := ap.endResumed(ctx, ap.records[key]); err != nil {
		ap.log.Warn("removing the suspension tag failed; retried next cycle", "job", key, "error", err)
	}
	return nil
}

// resumeSpec picks what to register and says which, for the log: the
// record's spec for a vanished job; else Nomad's copy of the suspended
// version (same version and job modify index as recorded: the owner's
// spec with its scaling policies as they were); else, when Nomad no longer
// keeps that version, the stopped version itself.
func (ap *applying) resumeSpec(ctx context.Context, r *nomadwatch.Record) (*nomadapi.Job, string, error) {
	if r.Verdict == nomadwatch.Vanished {
		return r.Spec, fmt.Sprintf("the record's spec of version %d (Nomad had collected the job)", r.Version), nil
	}
	versions, _, _, err := ap.nomad.Jobs().Versions(r.Job, false, (&nomadapi.QueryOptions{Namespace: r.Namespace}).WithContext(ctx))
	if err != nil {
		return nil, "", fmt.Errorf("resuming %s: listing its versions: %w", r.Key(), err)
	}
	for _, v := range versions {
		// A record rebuilt from Nomad's tag knows the version, not its
		// index (0).
		if v.Version != nil && *v.Version == r.Version && (r.JobModifyIndex == 0 || jobModifyIndex(v) == r.JobModifyIndex) {
			return v, fmt.Sprintf("version %d", r.Version), nil
		}
	}
	return r.Current, fmt.Sprintf("stopped version %d (Nomad no longer keeps version %d; scaling policies stay as the stop left them)", version(r.Current), r.Version), nil
}

// nudge asks Nomad to evaluate job again when the service suspended work
// for it (a suspension record names it) and Nomad still has some of it to
// place.
func (a *Actuator) nudge(ctx context.Context, v *nomadwatch.View, rep *Report, job string, now time.Time) {
	info := v.Jobs[job]
	if info == nil || info.Stop || info.Queued == 0 {
		return
	}
	beneficiary := false
	for _, r := range v.Records {
		if strings.HasPrefix(r.ForWorkload, job+"/") {
			beneficiary = true
			break
		}
	}
	if !beneficiary {
		return
	}
	a.mu.Lock()
	last, ok := a.nudgedAt[job]
	if ok && now.Sub(last) < a.opts.NudgeEvery {
		a.mu.Unlock()
		return
	}
	a.nudgedAt[job] = now
	for k, t := range a.nudgedAt {
		if now.Sub(t) > time.Hour {
			delete(a.nudgedAt, k)
		}
	}
	a.mu.Unlock()
	if _, _, err := a.nomad.Jobs().EvaluateWithOpts(info.ID, nomadapi.EvalOptions{}, (&nomadapi.WriteOptions{Namespace: info.Namespace}).WithContext(ctx)); err != nil {
		rep.Errors = append(rep.Errors, fmt.Errorf("re-evaluating %s, which capacity was freed for: %w", job, err))
		return
	}
	a.log.Debug("re-evaluated a job the plan places but Nomad holds queued", "job", job)
}

func ptr[T any](v T) *T { return &v }

func version(job *nomadapi.Job) uint64 {
	if job == nil || job.Version == nil {
		return 0
	}
	return *job.Version
}
