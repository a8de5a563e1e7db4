package nomadwatch

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/gpushare/nomad-gpushare/quota-service/state"
	"github.com/hashicorp/go-hclog"
	nomadapi "github.com/hashicorp/nomad/api"
)

// TestAClosedRecordsJobIsReadAgainForItsTag: closing a record removes the
// service's tag from the job, which moves no modify index. The next read
// of the stopped jobs must not take the spec cached while the record
// stood for a tag still there (the soak saw a job its owner stopped
// reported as "stopped under a tag named like the service's" for good):
// the job is read again, from the leader.
func TestAClosedRecordsJobIsReadAgainForItsTag(t *testing.T) {
	var mu sync.Mutex
	var staleReads int
	tagged := true
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if r.URL.Query().Has("stale") {
			staleReads++
		}
		json.NewEncoder(w).Encode(stoppedSpec(tagged))
	}))
	defer srv.Close()
	client, err := nomadapi.NewClient(&nomadapi.Config{Address: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	b := NewBuilder(client, hclog.NewNullLogger(), Options{})
	stub := &nomadapi.JobListStub{ID: "j", Namespace: "a", Stop: true, ModifyIndex: 26}
	rec := state.Suspension{Namespace: "a", Job: "j", Phase: state.PhaseSuspended}
	b.specs["a/j"] = stoppedSpec(true) // as read while the record stood
	got, err := b.readTagged(t.Context(), listJobs([]*nomadapi.JobListStub{stub}), []state.Suspension{rec})
	if err != nil || len(got) != 0 {
		t.Fatalf("with its record: tagged %v, %v; want none (the record names it)", got, err)
	}

	mu.Lock()
	tagged = false // the record closed and the service removed its tag
	mu.Unlock()
	got, err = b.readTagged(t.Context(), listJobs([]*nomadapi.JobListStub{stub}), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 0 {
		t.Errorf("after its record closed: tagged %v, want none (the tag is gone)", got)
	}
	if staleReads != 0 {
		t.Errorf("%d stale reads, want the leader's answer", staleReads)
	}
}

// stoppedSpec is job a/j stopped at modify index 26, under the service's
// tag when tagged.
func stoppedSpec(tagged bool) *nomadapi.Job {
	stop, ns, id, mi, v := true, "a", "j", uint64(26), uint64(3)
	j := &nomadapi.Job{ID: &id, Namespace: &ns, Stop: &stop, ModifyIndex: &mi, JobModifyIndex: &mi, Version: &v}
	if tagged {
		j.VersionTag = &nomadapi.JobVersionTag{Name: TagPrefix + "for-b-20261128T084011Z"}
	}
	return j
}
