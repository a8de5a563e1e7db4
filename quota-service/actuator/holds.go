package actuator

import (
	"fmt"
	"strings"
	"time"

	"github.com/gpushare/nomad-gpushare/quota-service/nomadwatch"
	"github.com/gpushare/nomad-gpushare/quota-service/state"
)

// settleInflight forgets the actions in flight that Nomad now shows done
// (or whose job is gone), and those awaited longer than InFlightTimeout.
func (a *Actuator) settleInflight(v *nomadwatch.View, now time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for key, f := range a.inflight {
		info := v.Jobs[key]
		if info == nil || info.Stop == f.wantStop || now.Sub(f.since) > a.opts.InFlightTimeout {
			delete(a.inflight, key)
		}
	}
}

// busy reports that an action on the job key is in flight.
func (a *Actuator) busy(key string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	_, ok := a.inflight[key]
	return ok
}

// holdSuspend says why the job key must not be suspended now: an action
// on it is in flight, or it was resumed within ResumeHold and the work it
// would make room for is above its project's guarantee.
func (a *Actuator) holdSuspend(key string, forGuarantee bool, now time.Time) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, ok := a.inflight[key]; ok {
		return "an action on it is in flight"
	}
	if t, ok := a.resumedAt[key]; ok && now.Sub(t) < a.opts.ResumeHold && !forGuarantee {
		return fmt.Sprintf("resumed %s ago and the workload is above its project's guarantee", now.Sub(t).Round(time.Second))
	}
	return ""
}

// holdForBeneficiary says why rec's job must not resume yet: the work it
// was suspended for is still registered, unfinished and not placed, and
// the suspension is younger than Options.ReclaimHold.
func (a *Actuator) holdForBeneficiary(v *nomadwatch.View, rec state.Suspension, now time.Time) string {
	if rec.ForWorkload == "" || now.Sub(rec.Time) >= a.opts.ReclaimHold {
		return ""
	}
	job := rec.ForWorkload
	if i := strings.LastIndex(job, "/"); i > 0 {
		job = job[:i] // "namespace/job/group" -> "namespace/job"
	}
	if job == nomadwatch.Key(rec.Namespace, rec.Job) {
		return ""
	}
	info := v.Jobs[job]
	if info == nil || info.Stop || info.Live > 0 || info.Status == "dead" {
		return ""
	}
	return fmt.Sprintf("the capacity it freed %s ago is kept for %s, not placed yet", now.Sub(rec.Time).Round(time.Millisecond), rec.ForWorkload)
}

// HoldResumes keeps every resume back for Options.RecoveryHold from now. The
// service calls it when it reads the cluster again after an outage: for a
// while after an agent restart, Nomad's view (clients reconnecting, stopped
// allocations not yet terminal, device families re-settling) can show
// capacity that is not there, and resuming on it would only lead to
// suspending the same job again. Resumes are never urgent; reclaims for a
// guarantee go on.
func (a *Actuator) HoldResumes(now time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.resumesHeldUntil = now.Add(a.opts.RecoveryHold)
}

// holdResume says why the job key must not be resumed now: resumes are
// held after an outage, an action on it is in flight, or it was suspended
// within SuspendHold.
func (a *Actuator) holdResume(key string, now time.Time) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	if now.Before(a.resumesHeldUntil) {
		return fmt.Sprintf("recovering from an outage: resumes wait %s more", a.resumesHeldUntil.Sub(now).Round(time.Second))
	}
	if _, ok := a.inflight[key]; ok {
		return "an action on it is in flight"
	}
	if t, ok := a.suspendedAt[key]; ok && now.Sub(t) < a.opts.SuspendHold {
		return fmt.Sprintf("suspended only %s ago", now.Sub(t).Round(time.Millisecond))
	}
	return ""
}
