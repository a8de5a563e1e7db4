package nomadwatch

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/gpushare/nomad-gpushare/quota-service/state"
	"github.com/hashicorp/go-hclog"
	nomadapi "github.com/hashicorp/nomad/api"
)

// TestScaledAtWaitsForTheScaleEvent: Nomad's scale writes the job, then
// its scaling event; read in between, the new version matches no event.
// The builder then asks again, blocking past the version's index, and
// gets the event, so the owner's scale is not taken for a stop (the
// soak's seed 1). A version no event ever matches (an owner's stop) is
// asked about once more and left without a match. A version submitted
// longer ago is read without waiting: later cycles read its events again
// until ScaleEventWindow has passed (Record.suspended).
func TestScaledAtWaitsForTheScaleEvent(t *testing.T) {
	tests := []struct {
		name      string
		late      bool // the scale's event arrives only on the blocking read
		stop      bool // the version is an owner's stop: no event matches
		old       bool // the version was submitted a minute ago
		wantMatch bool
		wantReads int
	}{
		{name: "event already written", wantMatch: true, wantReads: 1},
		{name: "event written after the job", late: true, wantMatch: true, wantReads: 2},
		{name: "an owner's stop", stop: true, wantMatch: false, wantReads: 2},
		{name: "an owner's stop a minute ago", stop: true, old: true, wantMatch: false, wantReads: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			submit := time.Now().UnixNano()
			if tt.old {
				submit = time.Now().Add(-time.Minute).UnixNano()
			}
			var mu sync.Mutex
			var reads []string
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				reads = append(reads, r.URL.Query().Get("index"))
				n := len(reads)
				mu.Unlock()
				events := []nomadapi.ScalingEvent{{Time: 1_000}}
				if !tt.stop && (!tt.late || n > 1) {
					events = append(events, nomadapi.ScalingEvent{Time: uint64(submit)})
				}
				json.NewEncoder(w).Encode(&nomadapi.JobScaleStatusResponse{TaskGroups: map[string]nomadapi.TaskGroupScaleStatus{"g1": {Events: events}}})
			}))
			defer srv.Close()
			client, err := nomadapi.NewClient(&nomadapi.Config{Address: srv.URL})
			if err != nil {
				t.Fatal(err)
			}
			b := NewBuilder(client, hclog.NewNullLogger(), Options{})
			rec := state.Suspension{Namespace: "a", Job: "j", Phase: state.PhaseSuspended, StopJobModifyIndex: 20}
			stop, jmi, mi, st := true, uint64(25), uint64(26), submit
			spec := &nomadapi.Job{Stop: &stop, JobModifyIndex: &jmi, ModifyIndex: &mi, SubmitTime: &st}
			got, err := b.readScaledAt(t.Context(), listJobs(nil), map[string]*nomadapi.Job{"a/j": spec}, []state.Suspension{rec})
			if err != nil {
				t.Fatal(err)
			}
			if match := slices.Contains(got["a/j"], submit); match != tt.wantMatch {
				t.Errorf("the version's submit time among the events: %v, want %v (events %v)", match, tt.wantMatch, got["a/j"])
			}
			if len(reads) != tt.wantReads {
				t.Fatalf("%d reads of the scaling events, want %d", len(reads), tt.wantReads)
			}
			if tt.wantReads == 2 && reads[1] != "26" {
				t.Errorf("the second read waits from index %q, want the version's modify index 26", reads[1])
			}
		})
	}
}
