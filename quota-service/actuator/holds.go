package actuator

import (
	"fmt"
	"strings"
	"time"

	"github.com/gpushare/nomad-gpushare/quota-service/nomadwatch"
	"github.com/gpushare/nomad-gpushare/quota-service/state"
	"github.com/gpushare/nomad-gpushare/scheduler/plan"
)

// The holds read only the records and Nomad's state, never this process's
// memory, so that a new leader keeps them (docs/design.md, Suspension and
// resumption: No loops).

// holdSuspend says why the job of record r (nil: none) must not be
// suspended now: it was resumed within ResumeHold and the work it would
// make room for is above its project's guarantee, or its record is in a
// state the service must settle first.
func (ap *applying) holdSuspend(r *nomadwatch.Record, forGuarantee bool) string {
	if r == nil {
		return ""
	}
	switch r.Verdict {
	case nomadwatch.Unfinished, nomadwatch.Closed:
		return ""
	case nomadwatch.Resumed, nomadwatch.ResumeLanded:
		if since := ap.now.Sub(r.ResumedAt); since < ap.opts.ResumeHold && !forGuarantee {
			return fmt.Sprintf("resumed %s ago and the workload is above its project's guarantee", since.Round(time.Second))
		}
		return ""
	case nomadwatch.Rejected:
		return "its suspension record is not corroborated by Nomad (see the record errors); the service does not touch the job"
	}
	return "it has a suspension record: " + r.Why
}

// holdResume says why the job of record r must not be resumed now: it was
// suspended within SuspendHold, or the capacity it freed is kept for the
// workload it was suspended for, which waits to be placed (at most
// ReclaimHold after the stop), unless the plan keeps the job's project
// within its guarantee with it: restoring a guarantee waits for no hold
// (the soak's seed 1, run 5: a quota edit raised team-b's guarantee, and
// its suspended shares stayed held for work of others that waited). A
// moved job (plan.CauseMove) always waits for the work it made room
// for, or Nomad could put it back in the room it left.
func (ap *applying) holdResume(r *nomadwatch.Record, rec state.Suspension) string {
	stopped := rec.StoppedAt
	if stopped.IsZero() {
		stopped = rec.Time
	}
	since := ap.now.Sub(stopped)
	if since < ap.opts.SuspendHold {
		return fmt.Sprintf("suspended only %s ago", since.Round(time.Millisecond))
	}
	moved := causeOf(rec) == plan.CauseMove
	if since >= ap.opts.ReclaimHold || ap.withinGuarantee[rec.Project] && !moved {
		return ""
	}
	i := strings.LastIndex(rec.ForWorkload, "/")
	if i <= 0 {
		return ""
	}
	job, group := rec.ForWorkload[:i], rec.ForWorkload[i+1:] // "namespace/job/group"
	if job == r.Key() {
		return ""
	}
	if info := ap.v.Jobs[job]; info != nil && info.Pending[group] > 0 {
		return fmt.Sprintf("the capacity it freed %s ago is kept for %s, which waits to be placed", since.Round(time.Millisecond), rec.ForWorkload)
	}
	return ""
}
