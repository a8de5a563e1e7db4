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
		reason          string
		want            string
	}{
		{name: "just suspended", stoppedAgo: time.Second, waiting: true, want: "suspended only"},
		{name: "its workload waits", stoppedAgo: time.Minute, waiting: true, want: "is kept for team-b/big/g"},
		{name: "its workload waits, but the job's project is owed its guarantee", stoppedAgo: time.Minute, waiting: true, withinGuarantee: true},
		{name: "a moved job waits for the work it made room for, guarantee or not", stoppedAgo: time.Minute, waiting: true, withinGuarantee: true,
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
			rec := state.Suspension{Namespace: "team-a", Job: "train", Project: "team-a", ForWorkload: "team-b/big/g", StoppedAt: now.Add(-tt.stoppedAgo), Reason: tt.reason}
			r := &nomadwatch.Record{Suspension: rec}
			got := ap.holdResume(r, rec)
			if tt.want == "" && got != "" || tt.want != "" && !strings.Contains(got, tt.want) {
				t.Fatalf("holdResume = %q, want %q", got, tt.want)
			}
		})
	}
}
