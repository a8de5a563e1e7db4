package actuator

import (
	"strings"
	"testing"
	"time"

	"github.com/gpushare/nomad-gpushare/quota-service/nomadwatch"
	"github.com/gpushare/nomad-gpushare/quota-service/state"
	"github.com/gpushare/nomad-gpushare/scheduler/plan"
)

// TestHoldResume: a job suspended for a workload that still waits stays
// suspended (the capacity is kept for that workload) for at most
// ReclaimHold, and not at all when the plan keeps the job's project within
// its guarantee with it; a job suspended a moment ago waits SuspendHold.
func TestHoldResume(t *testing.T) {
	now := time.Unix(10_000, 0)
	tests := []struct {
		name            string
		stoppedAgo      time.Duration
		waiting         bool
		withinGuarantee bool
		reason, cause   string
		want            string
	}{
		{name: "just suspended", stoppedAgo: time.Second, waiting: true, want: "suspended only"},
		{name: "its workload waits", stoppedAgo: time.Minute, waiting: true, want: "is kept for team-b/big/g"},
		{name: "its workload waits, but the job's project is owed its guarantee", stoppedAgo: time.Minute, waiting: true, withinGuarantee: true},
		{name: "a moved job waits for the work it made room for, guarantee or not", stoppedAgo: time.Minute, waiting: true, withinGuarantee: true,
			cause: "move", reason: "moved for team-b/big", want: "is kept for team-b/big/g"},
		{name: "a moved job of a record without its cause: the reason says it", stoppedAgo: time.Minute, waiting: true, withinGuarantee: true,
			reason: plan.MoveReason + " team-b/big on n0 (gpushare.movable): it comes back on n1", want: "is kept for team-b/big/g"},
		{name: "its workload was placed", stoppedAgo: time.Minute},
		{name: "past the reclaim hold", stoppedAgo: 10 * time.Minute, waiting: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pending := map[string]int{}
			if tt.waiting {
				pending["g"] = 1
			}
			ap := &applying{
				Actuator:        &Actuator{opts: Options{SuspendHold: 5 * time.Second, ReclaimHold: 5 * time.Minute}},
				v:               &nomadwatch.View{Jobs: map[string]*nomadwatch.JobInfo{"team-b/big": {Pending: pending}}},
				now:             now,
				withinGuarantee: map[string]bool{"team-a": tt.withinGuarantee},
			}
			rec := state.Suspension{Namespace: "team-a", Job: "train", Project: "team-a", ForWorkload: "team-b/big/g", StoppedAt: now.Add(-tt.stoppedAgo), Reason: tt.reason, Cause: tt.cause}
			r := &nomadwatch.Record{Suspension: rec}
			got := ap.holdResume(r, rec)
			if tt.want == "" && got != "" || tt.want != "" && !strings.Contains(got, tt.want) {
				t.Fatalf("holdResume = %q, want %q", got, tt.want)
			}
		})
	}
}

// TestCauseOfARecord: a record's Cause wins; a record written before
// Cause was kept is read from its reason and workload.
func TestCauseOfARecord(t *testing.T) {
	for _, tt := range []struct {
		rec  state.Suspension
		want plan.Cause
	}{
		{state.Suspension{Cause: "hold", Reason: "anything", ForWorkload: "a/b/c"}, plan.CauseHold},
		{state.Suspension{Cause: "reclaim", Reason: plan.MoveReason + " x"}, plan.CauseReclaim},
		{state.Suspension{Reason: plan.GangReason + ": its waiting part is unplaceable"}, plan.CauseGang},
		{state.Suspension{Reason: plan.MoveReason + " a/b", ForWorkload: "a/b/g"}, plan.CauseMove},
		{state.Suspension{Reason: plan.HoldReason + ": Nomad could place it"}, plan.CauseHold},
		{state.Suspension{Reason: "project p holds 3, above its limit 2"}, plan.CauseLimit},
		{state.Suspension{Reason: "reclaim for project b", ForWorkload: "b/j/g"}, plan.CauseReclaim},
		{state.Suspension{Cause: "bogus", Reason: "reclaim for project b", ForWorkload: "b/j/g"}, plan.CauseReclaim},
	} {
		if got := causeOf(tt.rec); got != tt.want {
			t.Errorf("causeOf(%+v) = %s, want %s", tt.rec, got, tt.want)
		}
	}
}

// TestTagDescriptionSaysWhy: the description the owner reads in `nomad job
// history` says why the job stopped, by the record's cause.
func TestTagDescriptionSaysWhy(t *testing.T) {
	for _, tt := range []struct {
		rec  state.Suspension
		want string
	}{
		{state.Suspension{Project: "a", ForProject: "b", ForWorkload: "b/j/g", Cause: "reclaim"}, "for project b (b/j/g)"},
		{state.Suspension{Project: "a", Cause: "limit"}, "to hold project a to its limit"},
		{state.Suspension{Project: "a", Cause: "gang"}, "until all of the gang fits"},
		{state.Suspension{Project: "a", Cause: "hold"}, "while queued"},
		{state.Suspension{Project: "a", Reason: plan.HoldReason + ": Nomad could place it"}, "while queued"},
	} {
		if got := tagDescription(tt.rec); !strings.Contains(got, tt.want) {
			t.Errorf("cause %q: %q, want it to say %q", tt.rec.Cause, got, tt.want)
		}
	}
}
