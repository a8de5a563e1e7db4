package nomadwatch

import (
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/gpushare/nomad-gpushare/quota-service/state"
	"github.com/hashicorp/go-hclog"
	nomadapi "github.com/hashicorp/nomad/api"
)

// specServer answers Nomad's job reads from specs, by Key; a tag changes
// without moving a job's modify index, as in Nomad.
type specServer struct {
	mu    sync.Mutex
	specs map[string]*nomadapi.Job
}

func (s *specServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	id, ok := strings.CutPrefix(r.URL.Path, "/v1/job/")
	ns := r.URL.Query().Get("namespace")
	s.mu.Lock()
	spec := s.specs[Key(ns, id)]
	s.mu.Unlock()
	if !ok || spec == nil {
		http.Error(w, "job not found", http.StatusNotFound)
		return
	}
	_ = json.NewEncoder(w).Encode(spec)
}

// TestReadSpecsLooksAtWhatChanged: after any sequence of job
// registrations, stops and purges, records and record tags coming and
// going, tags changed without a new modify index, stopped jobs read for
// tags and failed Builds, the specs readSpecs hands a View (looking only
// at the jobs that may have changed) are those a reading of every job
// gives: for each listed job that may have pending work or that a record
// names, its spec as cached at (or after) its listing's modify index, and
// no other. A View's specs are not changed by the next reading.
func TestReadSpecsLooksAtWhatChanged(t *testing.T) {
	for seed := uint64(1); seed <= 10; seed++ {
		checkReadSpecs(t, seed, 200)
	}
}

func checkReadSpecs(t *testing.T, seed uint64, steps int) {
	rng := rand.New(rand.NewPCG(seed, 7))
	srv := &specServer{specs: map[string]*nomadapi.Job{}}
	ts := httptest.NewServer(srv)
	defer ts.Close()
	client, err := nomadapi.NewClient(&nomadapi.Config{Address: ts.URL})
	if err != nil {
		t.Fatal(err)
	}
	b := NewBuilder(client, hclog.NewNullLogger(), Options{})
	keys := []string{"a/j0", "a/j1", "a/j2", "b/j0", "b/j1", "b/j2"}
	index := uint64(10)
	var recorded []string
	tags := map[string]string{}
	var memo *segmentMemo
	var lastView, lastCopy map[string]*nomadapi.Job
	var log []string
	for step := 0; step < steps; step++ {
		index++
		key := keys[rng.IntN(len(keys))]
		ns, id, _ := strings.Cut(key, "/")
		what := ""
		switch r := rng.IntN(100); {
		case r < 40:
			what = "register " + key
			stop := rng.IntN(4) == 0
			status := []string{"running", "pending", "dead"}[rng.IntN(3)]
			spec := &nomadapi.Job{ID: &id, Namespace: &ns, Stop: &stop, Status: &status, Type: ptr("batch"),
				ModifyIndex: ptr(index), JobModifyIndex: ptr(index), Version: ptr(uint64(step))}
			srv.mu.Lock()
			if old := srv.specs[key]; old != nil {
				spec.VersionTag = old.VersionTag
			}
			srv.specs[key] = spec
			srv.mu.Unlock()
			if err := b.cache.apply(&nomadapi.Event{Topic: nomadapi.TopicJob, Type: "JobRegistered", Key: id, Index: index, Payload: wire(t, "Job", spec)}); err != nil {
				t.Fatal(err)
			}
		case r < 50:
			what = "purge " + key
			spec := &nomadapi.Job{ID: &id, Namespace: &ns, ModifyIndex: ptr(index), JobModifyIndex: ptr(index)}
			p := wire(t, "Job", spec)
			p["Deleted"] = true
			if err := b.cache.apply(&nomadapi.Event{Topic: nomadapi.TopicJob, Type: "JobDeregistered", Key: id, Index: index, Payload: p}); err != nil {
				t.Fatal(err)
			}
		case r < 65:
			what = "records"
			recorded, tags = nil, map[string]string{}
			for _, k := range keys {
				if rng.IntN(3) == 0 {
					recorded = append(recorded, k)
					if rng.IntN(2) == 0 {
						tags[k] = TagPrefix + "x"
					}
				}
			}
		case r < 75:
			what = "tag " + key
			srv.mu.Lock()
			if old := srv.specs[key]; old != nil {
				spec := *old
				spec.VersionTag = nil
				if rng.IntN(2) == 0 {
					spec.VersionTag = &nomadapi.JobVersionTag{Name: TagPrefix + "x"}
				}
				srv.specs[key] = &spec
			}
			srv.mu.Unlock()
		case r < 85:
			what = "tagged read"
			var verified []state.Suspension
			for _, k := range recorded {
				kns, kid, _ := strings.Cut(k, "/")
				verified = append(verified, state.Suspension{Namespace: kns, Job: kid, Phase: state.PhaseSuspended})
			}
			if _, err := b.readTagged(t.Context(), listJobs(slices.Collect(maps.Values(b.cache.jobs))), verified); err != nil {
				t.Fatal(err)
			}
		case r < 90:
			what = "failed build"
			b.untouch()
		}
		log = append(log, what)
		var in Inputs
		in, memo = b.cache.viewInputs(memo)
		got, err := b.readSpecs(t.Context(), &in, recorded, tags)
		if err != nil {
			t.Fatal(err)
		}
		b.prune(in.listed(), in.changedJobs)
		if lastView != nil && !maps.Equal(lastView, lastCopy) {
			t.Fatalf("seed %d, step %d (%v): the reading changed the last View's specs", seed, step, log[max(0, len(log)-6):])
		}
		if in.specsChanged != nil {
			// Assemble reads again only the jobs it is told changed.
			for _, key := range keys {
				if got[key] != lastView[key] && !in.specsChanged[key] {
					t.Fatalf("seed %d, step %d (%v): job %s's spec changed but is not among the changed %v", seed, step, log[max(0, len(log)-6):], key, in.specsChanged)
				}
			}
		}
		lastView, lastCopy = got, maps.Clone(got)
		if why := specsWrong(b, in.listed(), recorded, got); why != "" {
			t.Fatalf("seed %d, step %d (%v): %s", seed, step, log[max(0, len(log)-6):], why)
		}
	}
}

// specsWrong says how got differs from a reading of every listed job
// with the Builder's cached specs ("" when it does not).
func specsWrong(b *Builder, jobs jobList, recordedKeys []string, got map[string]*nomadapi.Job) string {
	recorded := map[string]bool{}
	for _, k := range recordedKeys {
		recorded[k] = true
	}
	for i, j := range jobs.stubs {
		key := jobs.keys[i]
		wanted := !(j.Stop || j.Status == "dead" || j.ParameterizedJob || j.Periodic) || recorded[key]
		spec, ok := got[key]
		switch {
		case !wanted && ok:
			return fmt.Sprintf("job %s (stopped %v, status %s, recorded %v) has a spec; want none", key, j.Stop, j.Status, recorded[key])
		case wanted && !ok:
			return fmt.Sprintf("job %s (stopped %v, status %s, recorded %v) has no spec", key, j.Stop, j.Status, recorded[key])
		case wanted && (spec != b.specs[key] || *spec.ModifyIndex < j.ModifyIndex):
			return fmt.Sprintf("job %s: spec at modify index %d, want the one cached at %d or later", key, *spec.ModifyIndex, j.ModifyIndex)
		}
	}
	for key := range got {
		if jobs.byKey[key] == nil {
			return fmt.Sprintf("job %s is not listed but has a spec", key)
		}
	}
	return ""
}
