package service_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gpushare/nomad-gpushare/internal/testcluster"
	"github.com/gpushare/nomad-gpushare/quota-service/recordkey"
	"github.com/gpushare/nomad-gpushare/quota-service/service"
	"github.com/gpushare/nomad-gpushare/quota-service/state"
	consulapi "github.com/hashicorp/consul/api"
	nomadapi "github.com/hashicorp/nomad/api"
)

// rawRecord reads the record of job as stored, as a KV writer would.
func (s *scenario) rawRecord(j gpuJob) map[string]any {
	s.t.Helper()
	pair, _, err := s.c.Consul.KV().Get(s.layout.Suspension(j.ns, j.id), nil)
	if err != nil || pair == nil {
		s.t.Fatalf("reading the record of %s/%s: %v", j.ns, j.id, err)
	}
	var body map[string]any
	if err := json.Unmarshal(pair.Value, &body); err != nil {
		s.t.Fatal(err)
	}
	return body
}

// putRaw writes body at the record key of ns/job, as a KV writer would.
func (s *scenario) putRaw(ns, job string, body map[string]any) string {
	s.t.Helper()
	data, err := json.MarshalIndent(body, "", "  ")
	if err != nil {
		s.t.Fatal(err)
	}
	if _, err := s.c.Consul.KV().Put(&consulapi.KVPair{Key: s.layout.Suspension(ns, job), Value: data}, nil); err != nil {
		s.t.Fatal(err)
	}
	return string(data)
}

// waitReported waits until the service reports the record of every key
// (status, the record-errors key) and returns the reasons.
func (s *scenario) waitReported(svc *service.Service, jobs ...[2]string) map[string]string {
	s.t.Helper()
	reasons := map[string]string{}
	testcluster.Eventually(s.t, 30*time.Second, func() error {
		for _, e := range svc.Status().RecordErrors {
			reasons[e.Key] = e.Reason
		}
		for _, j := range jobs {
			key := s.layout.Suspension(j[0], j[1])
			if _, ok := reasons[key]; !ok {
				return fmt.Errorf("status record errors %+v lack %s", svc.Status().RecordErrors, key)
			}
			if pair, _, err := s.c.Consul.KV().Get(s.layout.RecordError(j[0], j[1]), nil); err != nil || pair == nil {
				return fmt.Errorf("no record-error key for %s/%s (%v)", j[0], j[1], err)
			}
		}
		return nil
	})
	return reasons
}

// TestHandWrittenRecordsSteerNothing: whoever can write under the
// service's KV prefix cannot make it run, stop or start anything. Each
// probe copies a real record's body (its signature included) and changes
// what a forger would:
//   - a record for a job Nomad never had (the "collected by the GC"
//     path): nothing is registered, no job of another project is
//     suspended to make room for it;
//   - a suspended record, untagged, at the current index of a job its
//     owner stopped: the job stays stopped;
//   - records for running GPU jobs: not closed (no superseded or
//     suspend-abandoned), the jobs keep running.
//
// Every such record is reported (status, KV, metric) and left in place.
func TestHandWrittenRecordsSteerNothing(t *testing.T) {
	c := needCluster(t)
	s := newScenario(t, c, "forgery-test")
	svc, _ := s.startInstance("q", nil, nil)
	// The owner runs and stops a job of their own (before the node is
	// full).
	owned := gpuJob{ns: "team-c", id: "owned", whole: 1}
	s.submit(owned)
	s.wait(90*time.Second, "running", isRunning, owned)
	if _, _, err := c.Nomad.Jobs().Deregister(owned.id, false, &nomadapi.WriteOptions{Namespace: owned.ns}); err != nil {
		t.Fatal(err)
	}
	ownedJob, err := s.nomadJob(owned.ns, owned.id)
	if err != nil || ownedJob == nil {
		t.Fatal(err)
	}
	a, _, suspended, _ := suspendSome(s, svc, 1)
	real := s.rawRecord(suspended[0])
	runningA := make([]gpuJob, 0, len(a))
	for _, j := range a {
		if j.id != suspended[0].id {
			runningA = append(runningA, j)
		}
	}
	eventsBefore := s.historyEvents()

	forge := func(ns, job string, change map[string]any) string {
		body := map[string]any{}
		for k, v := range real {
			body[k] = v
		}
		body["namespace"], body["job"] = ns, job
		for k, v := range change {
			body[k] = v
		}
		return s.putRaw(ns, job, body)
	}
	forged := map[[2]string]string{
		{"team-b", "pwned"}: forge("team-b", "pwned", map[string]any{"tagged": false, "tag": ""}),
		{owned.ns, owned.id}: forge(owned.ns, owned.id, map[string]any{"tagged": false, "tag": "",
			"stop_version": *ownedJob.Version, "stop_job_modify_index": *ownedJob.JobModifyIndex}),
		{runningA[0].ns, runningA[0].id}: forge(runningA[0].ns, runningA[0].id, nil),
		{runningA[1].ns, runningA[1].id}: forge(runningA[1].ns, runningA[1].id, map[string]any{"phase": "stopping"}),
	}
	keys := make([][2]string, 0, len(forged))
	for k := range forged {
		keys = append(keys, k)
	}
	reasons := s.waitReported(svc, keys...)
	waitCycles(t, svc, 5)

	if job, err := s.nomadJob("team-b", "pwned"); err != nil || job != nil {
		t.Errorf("team-b/pwned: %+v (%v); the forged record registered a job", job, err)
	}
	if st, err := s.jobState(owned.ns, owned.id); err != nil || !st.stopped || st.running > 0 {
		t.Errorf("%s/%s: %+v (%v), want it still stopped as its owner left it", owned.ns, owned.id, st, err)
	}
	s.wait(10*time.Second, "running", isRunning, runningA...)
	for k, body := range forged {
		pair, _, err := c.Consul.KV().Get(s.layout.Suspension(k[0], k[1]), nil)
		if err != nil || pair == nil || string(pair.Value) != body {
			t.Errorf("forged record %s/%s changed or gone (%v)", k[0], k[1], err)
		}
		if r := reasons[s.layout.Suspension(k[0], k[1])]; !strings.Contains(r, "cannot prove it wrote") {
			t.Errorf("%s/%s reported as %q, want that the service cannot prove it wrote it", k[0], k[1], r)
		}
	}
	if after := s.historyEvents(); len(after) != len(eventsBefore) {
		t.Errorf("history moved from %v to %v: the service acted on forged records", eventsBefore, after)
	}
	if n := metric(t, svc.Registry(), "gpushare_record_errors", nil); n != float64(len(forged)) {
		t.Errorf("gpushare_record_errors %v, want %d", n, len(forged))
	}
}

// TestDeletedRecordLosesNothing: deleting the record of a suspended job
// (or overwriting it with a replayed or forged one) loses nothing: the
// service finds the job stopped under its proven tag, writes the record
// again from Nomad's tagged version ("record-rebuilt") and resumes the job
// when GPUs free up.
func TestDeletedRecordLosesNothing(t *testing.T) {
	c := needCluster(t)
	s := newScenario(t, c, "deleted-test")
	svc, _ := s.startInstance("q", nil, nil)
	_, b, suspended, before := suspendSome(s, svc, 2)
	deleted, overwritten := suspended[0], suspended[1]
	if _, err := c.Consul.KV().Delete(s.layout.Suspension(deleted.ns, deleted.id), nil); err != nil {
		t.Fatal(err)
	}
	forged := s.rawRecord(overwritten)
	forged["phase"], forged["reason"] = "resumed", "forged"
	s.putRaw(overwritten.ns, overwritten.id, forged)
	for _, j := range suspended {
		rec := s.waitRecord(j, state.PhaseSuspended)
		if !strings.HasPrefix(rec.Reason, "rebuilt from Nomad's tagged version") {
			t.Errorf("record of %s/%s: reason %q, want it rebuilt from Nomad", j.ns, j.id, rec.Reason)
		}
		// The history entry follows the record's write.
		testcluster.Eventually(t, 30*time.Second, func() error {
			if got := s.historyOf(j); len(got) != 2 || got[1] != state.EventRecordRebuilt {
				return fmt.Errorf("history of %s/%s: %v, want suspend then record-rebuilt", j.ns, j.id, got)
			}
			return nil
		})
	}
	testcluster.Eventually(t, 30*time.Second, func() error {
		if st := svc.Status(); len(st.Suspended) != 2 {
			return fmt.Errorf("status lists %d suspended jobs, want 2", len(st.Suspended))
		}
		return nil
	})
	comeBackIntact(s, b, suspended, before, state.EventRecordRebuilt)
}

// TestRecordKeyRotationAndLoss: after a rotation (a new key, the old one
// kept as previous) the records are signed again with the new key; after
// the key is lost (replaced with no previous), records Nomad corroborates
// (the job stopped under the very tag and stop they name) are written
// again and their tags proven with the new key; the jobs still come back.
func TestRecordKeyRotationAndLoss(t *testing.T) {
	c := needCluster(t)
	s := newScenario(t, c, "keyloss-test")
	keyVar := "gpushare/test-keys/" + strings.ReplaceAll(t.Name(), "/", "-")
	source := func() recordkey.Source {
		return &recordkey.Variable{Client: c.Nomad, Namespace: "default", Path: keyVar, Refresh: time.Millisecond}
	}
	s.store.Keys = source()
	t.Cleanup(func() { c.Nomad.Variables().Delete(keyVar, &nomadapi.WriteOptions{Namespace: "default"}) })
	svc, _ := s.startInstance("q", func(cfg *service.Config) { cfg.RecordKeys = source() }, nil)
	_, b, suspended, before := suspendSome(s, svc, 1)
	j := suspended[0]
	first := s.rawRecord(j)["mac"].(string)

	setKeys := func(items nomadapi.VariableItems) {
		t.Helper()
		if _, _, err := c.Nomad.Variables().Create(&nomadapi.Variable{Namespace: "default", Path: keyVar, Items: items}, &nomadapi.WriteOptions{Namespace: "default"}); err != nil {
			t.Fatal(err)
		}
	}
	old, _, err := c.Nomad.Variables().Read(keyVar, &nomadapi.QueryOptions{Namespace: "default"})
	if err != nil {
		t.Fatal(err)
	}
	rotated, err := recordkey.Generate()
	if err != nil {
		t.Fatal(err)
	}
	setKeys(nomadapi.VariableItems{recordkey.ItemKey: recordkey.Encode(rotated), recordkey.ItemPrevious: old.Items[recordkey.ItemKey]})
	testcluster.Eventually(t, 30*time.Second, func() error {
		if mac := s.rawRecord(j)["mac"].(string); mac == first {
			return fmt.Errorf("record still signed with the old key: %s", mac)
		}
		return nil
	})

	lost, err := recordkey.Generate()
	if err != nil {
		t.Fatal(err)
	}
	setKeys(nomadapi.VariableItems{recordkey.ItemKey: recordkey.Encode(lost)})
	ring, err := recordkey.New(lost)
	if err != nil {
		t.Fatal(err)
	}
	testcluster.Eventually(t, 30*time.Second, func() error {
		rec := s.waitRecord(j, state.PhaseSuspended)
		if !strings.Contains(rec.Reason, "could not be verified") {
			return fmt.Errorf("record reason %q, want it rebuilt after the key was lost", rec.Reason)
		}
		tags, err := s.serviceTags(j.ns, j.id)
		if err != nil {
			return err
		}
		for v, tag := range tags {
			if tag.Name == rec.Tag && ring.TagProven(tag.Description, j.ns, j.id, v, tag.Name) {
				return nil
			}
		}
		return fmt.Errorf("tags %+v carry no proof by the new key", tags)
	})
	comeBackIntact(s, b, suspended, before, state.EventRecordRebuilt)
}
