package nomadwatch

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gpushare/nomad-gpushare/quota-service/recordkey"
	"github.com/gpushare/nomad-gpushare/quota-service/state"
	nomadapi "github.com/hashicorp/nomad/api"
)

// recordTime is when the records of TestClassifyRecords were written.
var recordTime = time.Unix(1000, 0)

// testKeys are the service's record keys in these tests; otherKeys a key
// the service does not hold.
var testKeys, otherKeys = mustKeys(1), mustKeys(2)

func mustKeys(b byte) *recordkey.Keyring {
	k, err := recordkey.New(bytes.Repeat([]byte{b}, recordkey.MinKeyBytes))
	if err != nil {
		panic(err)
	}
	return k
}

// proven puts a tag on j's current version with the proof keys make.
func proven(j *nomadapi.Job, keys *recordkey.Keyring, tag string) *nomadapi.Job {
	j.VersionTag = &nomadapi.JobVersionTag{Name: tag, Description: keys.ProveTag("Suspended by gpushare", *j.Namespace, *j.ID, *j.Version, tag)}
	return j
}

// current is Nomad's job "a/j" now: version, job modify index, stopped,
// the current version's tag, and its submit time (a stop sets it).
func current(ver, jmi uint64, stop bool, tag string, submit time.Time) *nomadapi.Job {
	j := withIndex(spec("a", "j", "nvidia/gpu", 1), jmi)
	j.Version, j.Stop, j.SubmitTime = ptr(ver), ptr(stop), ptr(submit.UnixNano())
	if tag != "" {
		j.VersionTag = &nomadapi.JobVersionTag{Name: tag}
	}
	return j
}

func dead(j *nomadapi.Job) *nomadapi.Job {
	j.Status = ptr("dead")
	return j
}

func cpuOnly(j *nomadapi.Job) *nomadapi.Job {
	j.TaskGroups[0].Tasks[0].Resources.Devices = nil
	return j
}

// TestClassifyRecords: each record is read against what Nomad shows of its
// job, and only what Nomad corroborates is acted on; the owner's stop,
// purge and new version win; a job Nomad's garbage collector removed comes
// back from the record's spec; a job the token cannot read is no proof of
// absence.
func TestClassifyRecords(t *testing.T) {
	const tag = TagPrefix + "for-b-19700101T001640Z"
	base := state.Suspension{Namespace: "a", Job: "j", Project: "a", Version: 3, JobModifyIndex: 10, Tag: tag, Time: recordTime, ForWorkload: "b/w/g",
		Groups: map[string]int{"g": 2}}
	rescaled := func(j *nomadapi.Job) *nomadapi.Job {
		j.TaskGroups[0].Count = ptr(3)
		return j
	}
	with := func(phase state.Phase, f func(*state.Suspension)) state.Suspension {
		r := base
		r.Phase = phase
		if f != nil {
			f(&r)
		}
		return r
	}
	suspended := func(r *state.Suspension) { r.StopVersion, r.StopJobModifyIndex, r.Tagged = 4, 20, true }
	untagged := func(r *state.Suspension) {
		r.StopVersion, r.StopJobModifyIndex = 4, 20
		if err := r.EncodeSpec(spec("a", "j", "nvidia/gpu", 1), testKeys); err != nil {
			t.Fatal(err)
		}
	}
	resumed := func(r *state.Suspension) { r.ResumeJobModifyIndex, r.ResumedAt = 30, recordTime }
	nonce := func(r *state.Suspension) { r.StopNonce = "n1" }
	withNonce := func(j *nomadapi.Job, n string) *nomadapi.Job {
		j.Meta = map[string]string{MetaStopNonce: n}
		return j
	}
	soon := recordTime.Add(time.Second)
	// early is a version submitted ScaleEventWindow and more before
	// Inputs.Now (recordTime): no scaling event may come for it any more.
	early := recordTime.Add(-ScaleEventWindow - time.Second)
	tests := []struct {
		name    string
		rec     state.Suspension
		job     *nomadapi.Job
		unread  error // the direct read of an unlisted job failed so
		gone    bool  // Nomad answered 404
		want    Verdict
		event   state.Event
		errWant string // part of the record error, for a rejected or unreadable record
		// scaledAt are the times of the job's scaling events.
		scaledAt []int64
	}{
		{name: "stopping, job runs at the recorded version", rec: with(state.PhaseStopping, nil), job: current(3, 10, false, "", recordTime), want: Unfinished},
		{name: "stopping, job changed since", rec: with(state.PhaseStopping, nil), job: current(4, 15, false, "", soon), want: Closed, event: state.EventSuspendAbandoned},
		{name: "stopping, job gone", rec: with(state.PhaseStopping, nil), gone: true, want: Closed, event: state.EventSuspendAbandoned},
		{name: "stopping, our tag on the stopped version", rec: with(state.PhaseStopping, nil), job: current(4, 20, true, tag, soon), want: StopLanded},
		{name: "stopping, untagged stop right after the record", rec: with(state.PhaseStopping, nil), job: current(4, 20, true, "", soon), want: StopLanded},
		// Nomad shows no author of a stop: a record with a nonce adopts
		// only the stop that carries it (the soak: the owner stopped the
		// job between the plan and the service's stop, which Nomad then
		// refused; the record adopted the owner's stop, and the job was
		// later resumed against its owner's will).
		{name: "stopping, the service's stop, with the record's nonce", rec: with(state.PhaseStopping, nonce), job: withNonce(current(4, 20, true, "", soon), "n1"), want: StopLanded},
		{name: "stopping, the owner's stop right after the record", rec: with(state.PhaseStopping, nonce), job: current(4, 20, true, "", soon), want: Closed, event: state.EventSuspendAbandoned},
		{name: "stopping, a stop with another record's nonce", rec: with(state.PhaseStopping, nonce), job: withNonce(current(4, 20, true, "", soon), "n0"), want: Closed, event: state.EventSuspendAbandoned},
		{name: "stopping, untagged stop long after the record", rec: with(state.PhaseStopping, nil), job: current(4, 20, true, "", recordTime.Add(StopAdoptWindow+time.Minute)), want: Closed, event: state.EventSuspendAbandoned},
		{name: "stopping, stopped before the record", rec: with(state.PhaseStopping, nil), job: current(4, 20, true, "", recordTime.Add(-time.Hour)), want: Closed, event: state.EventSuspendAbandoned},
		{name: "stopping, stopped more than once", rec: with(state.PhaseStopping, nil), job: current(5, 25, true, "", soon), want: Closed, event: state.EventSuspendAbandoned},
		{name: "suspended and untouched", rec: with(state.PhaseSuspended, suspended), job: current(4, 20, true, tag, soon), want: Suspended},
		{name: "suspended, untagged, untouched", rec: with(state.PhaseSuspended, untagged), job: current(4, 20, true, "", soon), want: Suspended},
		{name: "owner registered it again", rec: with(state.PhaseSuspended, suspended), job: current(5, 25, false, tag, soon), want: Closed, event: state.EventSuperseded},
		{name: "owner stopped it again", rec: with(state.PhaseSuspended, suspended), job: current(5, 25, true, tag, early), want: Closed, event: state.EventOwnerStopped},
		{name: "owner stopped it again a moment ago (its counts unchanged)", rec: with(state.PhaseSuspended, suspended), job: current(5, 25, true, tag, soon), want: Closed, event: state.EventOwnerStopped},
		{name: "changed to other counts a moment ago, no scaling event yet: the record waits for one", rec: with(state.PhaseSuspended, suspended),
			job: rescaled(current(5, 25, true, tag, soon)), scaledAt: []int64{soon.Add(-time.Hour).UnixNano()}, want: Unconfirmed},
		{name: "changed to other counts long ago, and no scaling event: the owner's stop", rec: with(state.PhaseSuspended, suspended),
			job: rescaled(current(5, 25, true, tag, early)), want: Closed, event: state.EventOwnerStopped},
		{name: "owner scaled it while suspended", rec: with(state.PhaseSuspended, suspended), job: current(5, 25, true, tag, soon),
			scaledAt: []int64{soon.Add(-time.Hour).UnixNano(), soon.UnixNano()}, want: Rescaled},
		{name: "owner scaled it, then stopped it again", rec: with(state.PhaseSuspended, suspended), job: current(6, 27, true, tag, early),
			scaledAt: []int64{early.Add(-time.Second).UnixNano()}, want: Closed, event: state.EventOwnerStopped},
		{name: "after an adopted scale, a scale to the same count (no new version)", rec: with(state.PhaseSuspended, func(r *state.Suspension) {
			suspended(r)
			r.StopVersion, r.StopJobModifyIndex = 5, 25
		}), job: current(5, 26, true, tag, soon), scaledAt: []int64{soon.UnixNano(), soon.Add(time.Second).UnixNano()}, want: Rescaled},
		{name: "owner removed the tag", rec: with(state.PhaseSuspended, suspended), job: current(4, 20, true, "", soon), want: Closed, event: state.EventOwnerStopped},
		{name: "tagged job gone: the owner purged it", rec: with(state.PhaseSuspended, suspended), gone: true, want: Closed, event: state.EventOwnerPurged},
		{name: "untagged job gone: collected, comes back from the spec", rec: with(state.PhaseSuspended, untagged), gone: true, want: Vanished},
		{name: "untagged job gone, no spec", rec: with(state.PhaseSuspended, func(r *state.Suspension) { r.StopJobModifyIndex = 20 }), gone: true, want: Rejected, errWant: "cannot bring it back"},
		{name: "job the token cannot read", rec: with(state.PhaseSuspended, suspended), unread: errors.New("403 Permission denied"), errWant: "cannot be read"},
		{name: "forged: the job asks for no GPUs", rec: with(state.PhaseStopping, nil), job: cpuOnly(current(3, 10, false, "", recordTime)), want: Rejected, errWant: "asks for no GPUs"},
		{name: "resuming, the register landed", rec: with(state.PhaseResuming, suspended), job: current(5, 30, false, tag, soon), want: ResumeLanded},
		{name: "resuming, the register did not land", rec: with(state.PhaseResuming, suspended), job: current(4, 20, true, tag, soon), want: Suspended},
		{name: "resuming, the register refused: the owner scaled the stopped job", rec: with(state.PhaseResuming, suspended), job: rescaled(current(5, 25, true, tag, soon)),
			scaledAt: []int64{soon.UnixNano()}, want: Rescaled},
		{name: "resuming, the owner scaled the stopped job a moment ago, no event yet", rec: with(state.PhaseResuming, suspended), job: rescaled(current(5, 25, true, tag, soon)),
			want: Unconfirmed},
		{name: "resuming, stopped again by its owner after the resume", rec: with(state.PhaseResuming, suspended), job: current(6, 27, true, tag, soon),
			want: Closed, event: state.EventOwnerStopped},
		{name: "resumed, ours", rec: with(state.PhaseResumed, resumed), job: current(5, 30, false, "", soon), want: Resumed},
		{name: "resumed, then finished", rec: with(state.PhaseResumed, resumed), job: dead(current(5, 30, false, "", soon)), want: Closed, event: state.EventRunningAgain},
		{name: "resumed, changed by its owner since", rec: with(state.PhaseResumed, resumed), job: current(6, 35, false, "", soon), want: Closed, event: state.EventRunningAgain},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := Inputs{Suspensions: []state.Suspension{tt.rec}, Specs: map[string]*nomadapi.Job{}, Unlisted: map[string]error{}, Now: recordTime, Keys: testKeys,
				ScaledAt: map[string][]int64{"a/j": tt.scaledAt}}
			if tt.job != nil {
				in.Specs["a/j"] = tt.job
			}
			if tt.gone || tt.unread != nil {
				in.Unlisted["a/j"] = tt.unread
			}
			v := Assemble(in)
			r := v.Records["a/j"]
			if tt.unread != nil {
				if r != nil {
					t.Fatalf("record of an unreadable job got verdict %d (%s); want none", r.Verdict, r.Why)
				}
			} else if r == nil || r.Verdict != tt.want || r.Event != tt.event {
				t.Fatalf("record %+v; want verdict %d, event %q", r, tt.want, tt.event)
			}
			reported := len(v.RecordErrors) > 0 && strings.Contains(v.RecordErrors[0].Reason, tt.errWant)
			if (tt.errWant != "") != (len(v.RecordErrors) > 0) || (tt.errWant != "" && !reported) {
				t.Fatalf("record errors %+v; want one containing %q", v.RecordErrors, tt.errWant)
			}
			if tt.want == Vanished {
				if info := v.Jobs["a/j"]; info == nil || len(v.Snapshot.Pending) != 1 || !v.Snapshot.Pending[0].Suspended {
					t.Fatalf("vanished job: info %+v, pending %+v; want it pending as suspended", info, v.Snapshot.Pending)
				}
			}
		})
	}
}

// TestRecordsTheServiceCannotProve: a record that fails verification is
// never acted on as written; only Nomad's state replaces it, and a
// stopped job under the service's proven tag gets its record back
// whatever is (or is not) at its key.
func TestRecordsTheServiceCannotProve(t *testing.T) {
	const tag, older = TagPrefix + "for-b-19700101T001640Z", TagPrefix + "for-b-19700101T000000Z"
	forged := state.Suspension{Namespace: "a", Job: "j", Project: "a", Phase: state.PhaseSuspended, Version: 3, Tag: tag, Tagged: true,
		StopVersion: 4, StopJobModifyIndex: 20, Time: recordTime, ModifyIndex: 77}
	soon := recordTime.Add(time.Second)
	tests := []struct {
		name       string
		verified   *state.Suspension
		unverified *state.Suspension
		job        *nomadapi.Job // Nomad's job a/j; stopped and tagged ones are listed in Tagged too
		want       Verdict       // 0: no verdict (not the service's record)
		retag      bool
		errWant    string
	}{
		{name: "hand-written record of a running job", unverified: &forged, job: current(3, 10, false, "", recordTime), errWant: "cannot prove it wrote"},
		{name: "hand-written record of a job Nomad never had", unverified: &forged, errWant: "cannot prove it wrote"},
		{name: "hand-written record of a job its owner stopped", unverified: &forged, job: current(4, 20, true, "", soon), errWant: "cannot prove it wrote"},
		{name: "lost key: Nomad corroborates the stop and its tag", unverified: &forged, job: current(4, 20, true, tag, soon), want: Rebuild, retag: true, errWant: "written again from Nomad"},
		{name: "lost key: the stop moved since", unverified: &forged, job: current(5, 25, true, tag, soon), errWant: "cannot prove it wrote"},
		{name: "forged over a proven suspension", unverified: &forged, job: proven(current(4, 20, true, "", soon), testKeys, tag), want: Rebuild, errWant: "written again from Nomad"},
		{name: "record deleted, proven tag", job: proven(current(4, 20, true, "", soon), testKeys, tag), want: Rebuild},
		{name: "record deleted, tag proven by a key the service lost", job: proven(current(4, 20, true, "", soon), otherKeys, tag), errWant: "cannot prove the tag is its own"},
		{name: "record deleted, a tag named like the service's without proof", job: current(4, 20, true, tag, soon), errWant: "cannot prove the tag is its own"},
		{name: "replayed older record of a job suspended again", verified: &state.Suspension{Namespace: "a", Job: "j", Project: "a", Phase: state.PhaseSuspended, Tag: older, Tagged: true, StopVersion: 2, StopJobModifyIndex: 8, Time: recordTime},
			job: proven(current(4, 20, true, "", soon), testKeys, tag), want: Rebuild},
		{name: "proven tag copied to the owner's later stop", verified: &state.Suspension{Namespace: "a", Job: "j", Project: "a", Phase: state.PhaseSuspended, Tag: tag, Tagged: true, StopVersion: 4, StopJobModifyIndex: 20, Time: recordTime},
			job: func() *nomadapi.Job {
				j := proven(current(4, 20, true, "", soon), testKeys, tag)
				j.Version, j.JobModifyIndex = ptr(uint64(5)), ptr(uint64(25))
				j.SubmitTime = ptr(recordTime.Add(-ScaleEventWindow - time.Second).UnixNano())
				return j
			}(), want: Closed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := Inputs{Specs: map[string]*nomadapi.Job{}, Unlisted: map[string]error{}, Tagged: map[string]*nomadapi.Job{}, Now: recordTime, Keys: testKeys}
			if tt.verified != nil {
				in.Suspensions = []state.Suspension{*tt.verified}
			}
			if tt.unverified != nil {
				in.Unverified = []state.Unverified{{Suspension: *tt.unverified, Reason: recordkey.ErrUnsigned.Error()}}
			}
			switch {
			case tt.job == nil:
				in.Unlisted["a/j"] = nil
			case tt.verified != nil || tt.unverified != nil:
				in.Specs["a/j"] = tt.job
			case stopped(tt.job) && ownTagName(tt.job):
				in.Tagged["a/j"] = tt.job
			}
			v := Assemble(in)
			r := v.Records["a/j"]
			switch {
			case tt.want == 0 && r != nil:
				t.Fatalf("verdict %d (%s) for a record the service cannot prove", r.Verdict, r.Why)
			case tt.want != 0 && (r == nil || r.Verdict != tt.want):
				t.Fatalf("record %+v; want verdict %d", r, tt.want)
			}
			if tt.want == Rebuild {
				got := r.Rebuilt
				if got.Tag != tag || got.StopJobModifyIndex != 20 || got.Phase != state.PhaseSuspended || !got.Tagged || r.Retag != tt.retag {
					t.Fatalf("rebuilt %+v (retag %v); want the stop Nomad shows under %s (retag %v)", got, r.Retag, tag, tt.retag)
				}
				if got.ForProject != "b" {
					t.Fatalf("rebuilt record made room for %q, want b (from the tag's name)", got.ForProject)
				}
				if tt.unverified != nil && got.ModifyIndex != tt.unverified.ModifyIndex {
					t.Fatalf("rebuilt record replaces index %d, want %d", got.ModifyIndex, tt.unverified.ModifyIndex)
				}
			}
			if tt.unverified != nil && tt.want == 0 {
				if _, ok := v.Unverified["a/j"]; !ok {
					t.Fatal("an unverified record's key is not kept for a suspension to replace")
				}
			}
			reported := len(v.RecordErrors) == 1 && strings.Contains(v.RecordErrors[0].Reason, tt.errWant)
			if (tt.errWant == "") != (len(v.RecordErrors) == 0) || (tt.errWant != "" && !reported) {
				t.Fatalf("record errors %+v; want one containing %q", v.RecordErrors, tt.errWant)
			}
		})
	}
}

func TestTagName(t *testing.T) {
	got := TagName("for-team b/ä", time.Date(2026, 11, 23, 17, 8, 39, 0, time.UTC))
	if want := "gpushare-suspended-for-team-b--" + "-20261123T170839Z"; got != want {
		t.Fatalf("TagName = %q, want %q", got, want)
	}
}

// TestAdoptTaggedSkipsUntaggedSpec: a stopped job handed in as tagged whose
// spec carries no tag (a spec cached for another reason) is not adopted,
// and the view is built without a panic (found by the chaos soak).
func TestAdoptTaggedSkipsUntaggedSpec(t *testing.T) {
	job := current(4, 20, true, "", recordTime)
	in := Inputs{Specs: map[string]*nomadapi.Job{"a/j": job}, Tagged: map[string]*nomadapi.Job{"a/j": job}, Now: recordTime, Keys: testKeys}
	v := Assemble(in)
	if r := v.Records["a/j"]; r != nil {
		t.Errorf("record %+v adopted from a spec without a tag", r)
	}
}

// TestStoppedElsewhere: the scaling events of a suspended job are read
// when the spec the record is classified with moved past the service's
// stop, even where the listing, read before, did not (an owner's scale
// right after the stop: the soak's seed 1); the listing decides only
// where no spec was read.
func TestStoppedElsewhere(t *testing.T) {
	yes, no := true, false
	spec := func(stop *bool, jmi uint64) *nomadapi.Job { return &nomadapi.Job{Stop: stop, JobModifyIndex: &jmi} }
	tests := []struct {
		name string
		stub *nomadapi.JobListStub
		spec *nomadapi.Job
		want bool
	}{
		{"spec moved, listing not yet", &nomadapi.JobListStub{Stop: true, JobModifyIndex: 20}, spec(&yes, 25), true},
		{"spec at the stop, listing too", &nomadapi.JobListStub{Stop: true, JobModifyIndex: 20}, spec(&yes, 20), false},
		{"spec running again", &nomadapi.JobListStub{Stop: true, JobModifyIndex: 20}, spec(&no, 25), false},
		{"no spec: the listing moved", &nomadapi.JobListStub{Stop: true, JobModifyIndex: 25}, nil, true},
		{"nothing read", nil, nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := stoppedElsewhere(tt.stub, tt.spec, 20); got != tt.want {
				t.Errorf("stoppedElsewhere = %v, want %v", got, tt.want)
			}
		})
	}
}
