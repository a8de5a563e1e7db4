package actuator

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/gpushare/nomad-gpushare/quota-service/nomadwatch"
	"github.com/gpushare/nomad-gpushare/quota-service/state"
	nomadapi "github.com/hashicorp/nomad/api"
)

// resume registers the stopped job again with Stop=false, unless someone
// changed it since (the modify index guards the write). It registers the
// version recorded at the suspension (fetched from the job's versions),
// not merely the latest one: the stop itself made a new version, and a
// later change by someone else (a version above the stop's) wins.
func (a *Actuator) resume(ctx context.Context, rec state.Suspension) error {
	key := nomadwatch.Key(rec.Namespace, rec.Job)
	qo := (&nomadapi.QueryOptions{Namespace: rec.Namespace}).WithContext(ctx)
	latest, _, err := a.nomad.Jobs().Info(rec.Job, qo)
	if err != nil {
		return fmt.Errorf("resuming %s: reading the job: %w", key, err)
	}
	if latest.Stop == nil || !*latest.Stop {
		return nil // already running again; the record is cleared once it runs
	}
	var idx uint64
	if latest.JobModifyIndex != nil {
		idx = *latest.JobModifyIndex
	}
	job, from, err := a.resumeSpec(ctx, rec, latest)
	if err != nil {
		return err
	}
	stop := false
	job.Stop = &stop
	if err := a.guard(ctx, "resuming "+key); err != nil {
		return err
	}
	if _, _, err := a.nomad.Jobs().EnforceRegister(job, idx, (&nomadapi.WriteOptions{Namespace: rec.Namespace}).WithContext(ctx)); err != nil {
		return fmt.Errorf("resuming %s: registering it with Stop=false: %w", key, err)
	}
	now := time.Now()
	a.mu.Lock()
	a.inflight[key] = inflight{wantStop: false, since: now}
	a.resumedAt[key] = now
	a.mu.Unlock()
	a.log.Info("resumed job", "job", key, "project", rec.Project, "from", from)
	return nil
}

// resumeSpec picks what to register: the recorded version while the only
// version after it is the stop (Version+1), else the latest. from says
// which, for the log.
func (a *Actuator) resumeSpec(ctx context.Context, rec state.Suspension, latest *nomadapi.Job) (*nomadapi.Job, string, error) {
	var cur uint64
	if latest.Version != nil {
		cur = *latest.Version
	}
	if cur == rec.Version {
		return latest, "recorded version (no stop version seen)", nil
	}
	if cur > rec.Version+1 || cur < rec.Version {
		return latest, fmt.Sprintf("latest version %d: the job changed after its suspension (recorded version %d)", cur, rec.Version), nil
	}
	versions, _, _, err := a.nomad.Jobs().Versions(rec.Job, false, (&nomadapi.QueryOptions{Namespace: rec.Namespace}).WithContext(ctx))
	if err != nil {
		return nil, "", fmt.Errorf("resuming %s: listing its versions: %w", nomadwatch.Key(rec.Namespace, rec.Job), err)
	}
	for _, v := range versions {
		if v.Version != nil && *v.Version == rec.Version {
			return v, fmt.Sprintf("recorded version %d", rec.Version), nil
		}
	}
	return latest, fmt.Sprintf("latest version %d: recorded version %d is no longer kept", cur, rec.Version), nil
}

// nudge asks Nomad to evaluate job again when the service suspended work
// for it (a suspension record names it) and the job is still queued.
func (a *Actuator) nudge(ctx context.Context, v *nomadwatch.View, rep *Report, job string, now time.Time) {
	info := v.Jobs[job]
	if info == nil || info.Stop || info.Queued == 0 {
		return
	}
	beneficiary := false
	for _, rec := range v.Suspended {
		if strings.HasPrefix(rec.ForWorkload, job+"/") {
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
