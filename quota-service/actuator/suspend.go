package actuator

import (
	"context"
	"fmt"
	"time"

	"github.com/gpushare/nomad-gpushare/quota-service/nomadwatch"
	"github.com/gpushare/nomad-gpushare/quota-service/state"
	nomadapi "github.com/hashicorp/nomad/api"
)

// suspend records, then stops the job.
func (a *Actuator) suspend(ctx context.Context, rec *state.Suspension) error {
	job, _, err := a.nomad.Jobs().Info(rec.Job, (&nomadapi.QueryOptions{Namespace: rec.Namespace}).WithContext(ctx))
	if err != nil {
		return fmt.Errorf("suspending %s/%s: reading the job: %w", rec.Namespace, rec.Job, err)
	}
	if job.Version != nil {
		rec.Version = *job.Version
	}
	if job.JobModifyIndex != nil {
		rec.JobModifyIndex = *job.JobModifyIndex
	}
	rec.Groups = map[string]int{}
	for _, tg := range job.TaskGroups {
		if tg.Name != nil && tg.Count != nil {
			rec.Groups[*tg.Name] = *tg.Count
		}
	}
	if err := a.guard(ctx, "suspending "+nomadwatch.Key(rec.Namespace, rec.Job)); err != nil {
		return err
	}
	if err := a.store.PutSuspension(ctx, *rec); err != nil {
		return fmt.Errorf("suspending %s/%s: not stopping it because the record could not be written: %w", rec.Namespace, rec.Job, err)
	}
	var rep Report
	a.history(ctx, &rep, state.Entry{Event: state.EventSuspend, Namespace: rec.Namespace, Job: rec.Job, Project: rec.Project, Reason: rec.Reason, ForWorkload: rec.ForWorkload})
	if a.BeforeStop != nil {
		a.BeforeStop(ctx, *rec)
	}
	return a.stop(ctx, *rec)
}

// stop deregisters the job without purging it and marks the record.
func (a *Actuator) stop(ctx context.Context, rec state.Suspension) error {
	key := nomadwatch.Key(rec.Namespace, rec.Job)
	if err := a.guard(ctx, "stopping "+key+" (recorded; the next leader finishes it)"); err != nil {
		return err
	}
	if _, _, err := a.nomad.Jobs().Deregister(rec.Job, false, (&nomadapi.WriteOptions{Namespace: rec.Namespace}).WithContext(ctx)); err != nil {
		return fmt.Errorf("stopping %s (record kept at %s; the next cycle retries): %w", key, a.store.Layout().Suspension(rec.Namespace, rec.Job), err)
	}
	now := time.Now()
	a.mu.Lock()
	a.inflight[key] = inflight{wantStop: true, since: now}
	a.suspendedAt[key] = now
	a.mu.Unlock()
	rec.Stopped = true
	if err := a.store.PutSuspension(ctx, rec); err != nil {
		a.log.Warn("job stopped but its record could not be marked; it still counts as suspended", "job", key, "error", err)
	}
	a.log.Info("suspended job", "job", key, "project", rec.Project, "for", rec.ForWorkload, "reason", rec.Reason)
	return nil
}
