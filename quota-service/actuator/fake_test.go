package actuator

import (
	"bytes"
	"context"
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/gpushare/nomad-gpushare/internal/agentfake"
	"github.com/gpushare/nomad-gpushare/quota-service/kvlayout"
	"github.com/gpushare/nomad-gpushare/quota-service/leader"
	"github.com/gpushare/nomad-gpushare/quota-service/nomadwatch"
	"github.com/gpushare/nomad-gpushare/quota-service/recordkey"
	"github.com/gpushare/nomad-gpushare/quota-service/state"
	"github.com/gpushare/nomad-gpushare/scheduler/cluster"
	"github.com/gpushare/nomad-gpushare/scheduler/plan"
	"github.com/hashicorp/go-hclog"
	nomadapi "github.com/hashicorp/nomad/api"
)

// world is the actuator against in-memory Nomad and Consul: the fast
// tests of the code that stops and starts jobs (the same paths run
// against real agents in package service's tests).
type world struct {
	t      *testing.T
	nomad  *agentfake.Nomad
	consul *agentfake.Consul
	store  *state.Store
	act    *Actuator
	keys   *recordkey.Keyring
}

func newWorld(t *testing.T) *world {
	t.Helper()
	keys, err := recordkey.New(bytes.Repeat([]byte{7}, recordkey.MinKeyBytes))
	if err != nil {
		t.Fatal(err)
	}
	w := &world{t: t, nomad: agentfake.NewNomad(), consul: agentfake.NewConsul(), keys: keys}
	t.Cleanup(w.nomad.Close)
	t.Cleanup(w.consul.Close)
	w.store = state.New(w.consul.Client(), kvlayout.New("gs"))
	w.store.Keys = recordkey.Static{Ring: keys}
	w.act = New(w.nomad.Client(), w.store, hclog.NewNullLogger(), "q1", Options{SuspendHold: time.Nanosecond, ResumeHold: time.Hour})
	return w
}

// run registers a GPU job of ns as its owner would.
func (w *world) run(ns, id string) {
	j := gpuJobWith(ns, nil)
	j.ID, j.Name = &id, &id
	w.nomad.Put(j)
}

// view reads the records and Nomad as package nomadwatch's Build does,
// with extra pending work appended.
func (w *world) view(extra ...cluster.Pending) *nomadwatch.View {
	w.t.Helper()
	recs, err := w.store.Suspensions(context.Background())
	if err != nil {
		w.t.Fatal(err)
	}
	in := nomadwatch.Inputs{Jobs: w.nomad.Stubs(), Specs: map[string]*nomadapi.Job{}, Unlisted: map[string]error{},
		Tagged: map[string]*nomadapi.Job{}, Now: time.Now(),
		Suspensions: recs.Verified, Unverified: recs.Unverified, RecordErrors: recs.Errors, Keys: recs.Keys}
	named := map[string]bool{}
	for _, r := range recs.Verified {
		named[r.Key()] = true
	}
	for _, s := range in.Jobs {
		key := nomadwatch.Key(s.Namespace, s.ID)
		job := w.nomad.Job(s.Namespace, s.ID)
		if !s.Stop || named[key] {
			in.Specs[key] = job
		} else if job.VersionTag != nil && strings.HasPrefix(job.VersionTag.Name, nomadwatch.TagPrefix) {
			in.Tagged[key] = job
		}
	}
	for _, r := range append(recs.Verified, unverified(recs)...) {
		if w.nomad.Job(r.Namespace, r.Job) == nil {
			in.Unlisted[r.Key()] = nil
		} else {
			in.Specs[r.Key()] = w.nomad.Job(r.Namespace, r.Job)
		}
	}
	v := nomadwatch.Assemble(in)
	v.Snapshot.Pending = append(v.Snapshot.Pending, extra...)
	return v
}

func unverified(recs state.Records) []state.Suspension {
	var out []state.Suspension
	for _, u := range recs.Unverified {
		out = append(out, u.Suspension)
	}
	return out
}

// apply carries out actions on a fresh view and fails on errors.
func (w *world) apply(v *nomadwatch.View, actions ...plan.Action) Report {
	w.t.Helper()
	rep, err := w.act.Apply(context.Background(), v, plan.Result{Actions: actions})
	if err != nil || len(rep.Errors) > 0 {
		w.t.Fatalf("Apply: %v %v", err, rep.Errors)
	}
	return rep
}

// suspend suspends ns/id for a made-up pending workload of team-b.
func (w *world) suspend(ns, id string) {
	w.t.Helper()
	v := w.view(cluster.Pending{Project: "team-b", Job: "team-b/big", Group: "g", Count: 1, Ask: cluster.Ask{WholeGPUs: 1}})
	w.apply(v, plan.Action{Kind: plan.Suspend, Project: ns, Job: ns + "/" + id, Workload: len(v.Snapshot.Pending) - 1, Reason: "reclaim for team-b"})
}

// resume resumes ns/id, which must be pending as suspended.
func (w *world) resume(ns, id string) Report {
	w.t.Helper()
	v := w.view()
	for i, p := range v.Snapshot.Pending {
		if p.Job == ns+"/"+id && p.Suspended {
			return w.apply(v, plan.Action{Kind: plan.Place, Project: ns, Job: p.Job, Workload: i, Reason: "capacity returned"})
		}
	}
	w.t.Fatalf("%s/%s is not pending as suspended: %+v", ns, id, v.Snapshot.Pending)
	return Report{}
}

func (w *world) record(ns, id string) *state.Suspension {
	w.t.Helper()
	recs, err := w.store.Suspensions(context.Background())
	if err != nil {
		w.t.Fatal(err)
	}
	for _, r := range recs.Verified {
		if r.Namespace == ns && r.Job == id {
			return &r
		}
	}
	return nil
}

func (w *world) history() []state.Event {
	w.t.Helper()
	hist, err := w.store.History(context.Background())
	if err != nil {
		w.t.Fatal(err)
	}
	var out []state.Event
	for _, e := range hist {
		out = append(out, e.Event)
	}
	return out
}

// writesSince are the fake Nomad's writes after the first n, as
// "kind job".
func (w *world) writesSince(n int) []string {
	var out []string
	for _, wr := range w.nomad.Writes()[n:] {
		out = append(out, wr.Kind+" "+wr.Job)
	}
	return out
}

// TestSuspendThenResume: a suspension records the job (spec sealed,
// record signed), stops it without purging, and tags the stopped version
// with a proof; a resume registers the suspended version again guarded by
// the stop's index, marks the record resumed and removes the tag.
func TestSuspendThenResume(t *testing.T) {
	w := newWorld(t)
	w.run("team-a", "train")
	w.suspend("team-a", "train")
	if got := strings.Join(w.writesSince(0), ", "); got != "register team-a/train, tag team-a/train" {
		t.Fatalf("Nomad writes %q, want the stop (a register with Stop set) then the tag", got)
	}
	rec := w.record("team-a", "train")
	job := w.nomad.Job("team-a", "train")
	if rec == nil || rec.Phase != state.PhaseSuspended || !rec.Tagged || rec.StopJobModifyIndex != *job.JobModifyIndex {
		t.Fatalf("record %+v; want suspended, tagged, at the stop's index %d", rec, *job.JobModifyIndex)
	}
	if spec, err := rec.DecodeSpec(w.keys); err != nil || *spec.ID != "train" {
		t.Fatalf("record's spec: %v", err)
	}
	if tag := job.VersionTag; tag == nil || !w.keys.TagProven(tag.Description, "team-a", "train", *job.Version, tag.Name) {
		t.Fatalf("stopped version's tag %+v carries no proof", job.VersionTag)
	}
	if strings.Contains(string(w.consul.Value("gs/suspended/team-a/train")), "raw_exec") {
		t.Fatal("the record shows the job's spec in clear")
	}

	n := len(w.nomad.Writes())
	w.resume("team-a", "train")
	// Nomad copies the current version's tag to the next version: the
	// service removes it from both.
	if got := strings.Join(w.writesSince(n), ", "); got != "register team-a/train, untag team-a/train, untag team-a/train" {
		t.Fatalf("Nomad writes %q, want the register then the untags", got)
	}
	job = w.nomad.Job("team-a", "train")
	if *job.Stop || job.VersionTag != nil {
		t.Fatalf("job after the resume: stop %v, tag %+v", *job.Stop, job.VersionTag)
	}
	if rec := w.record("team-a", "train"); rec == nil || rec.Phase != state.PhaseResumed || rec.Tagged {
		t.Fatalf("record after the resume %+v; want resumed, untagged (the hold)", rec)
	}
	if got := w.history(); len(got) != 2 || got[0] != state.EventSuspend || got[1] != state.EventResume {
		t.Fatalf("history %v", got)
	}
}

// TestResumeFromTheStoppedVersionLeavesTheViewAlone: when Nomad no
// longer keeps the suspended version, the resume registers the stopped
// version again without its stop (Stop false, the tag and the stop's
// nonce gone), and makes those changes on a copy: the View's spec of the
// job, which the Builder caches for the next View, stays the stopped
// version as Nomad showed it.
func TestResumeFromTheStoppedVersionLeavesTheViewAlone(t *testing.T) {
	w := newWorld(t)
	w.run("team-a", "train")
	w.suspend("team-a", "train")
	w.nomad.KeepLatestVersion("team-a", "train")
	v := w.view()
	var current *nomadapi.Job
	for _, r := range v.Records {
		if r.Namespace == "team-a" && r.Job == "train" {
			current = r.Current
		}
	}
	if current == nil || current.Stop == nil || !*current.Stop || current.VersionTag == nil || current.Meta[nomadwatch.MetaStopNonce] == "" {
		t.Fatalf("the View's spec of the suspended job %+v: want the stopped, tagged version with the stop's nonce", current)
	}
	tag, nonce := current.VersionTag, current.Meta[nomadwatch.MetaStopNonce]
	resumed := false
	for i, p := range v.Snapshot.Pending {
		if p.Job == "team-a/train" && p.Suspended {
			w.apply(v, plan.Action{Kind: plan.Place, Project: "team-a", Job: p.Job, Workload: i, Reason: "capacity returned"})
			resumed = true
		}
	}
	if !resumed {
		t.Fatalf("team-a/train is not pending as suspended: %+v", v.Snapshot.Pending)
	}
	job := w.nomad.Job("team-a", "train")
	if *job.Stop || job.VersionTag != nil || job.Meta[nomadwatch.MetaStopNonce] != "" {
		t.Fatalf("job after the resume: stop %v, tag %+v, meta %v; want it running, untagged, without the stop's nonce", *job.Stop, job.VersionTag, job.Meta)
	}
	if !*current.Stop || current.VersionTag != tag || current.Meta[nomadwatch.MetaStopNonce] != nonce {
		t.Fatalf("the resume changed the View's spec: stop %v, tag %+v, nonce %q", *current.Stop, current.VersionTag, current.Meta[nomadwatch.MetaStopNonce])
	}
}

// TestOwnersWordWinsFast: each owner action on a suspended job closes its
// record with its event, removes the service's tag, and makes the service
// write nothing else to Nomad; nothing comes back.
func TestOwnersWordWinsFast(t *testing.T) {
	tests := []struct {
		name  string
		owner func(w *world)
		want  state.Event
	}{
		{"registered again", func(w *world) {
			j := w.nomad.Job("team-a", "train")
			j.Stop, j.VersionTag = ptr(false), nil
			w.nomad.Put(j)
		}, state.EventSuperseded},
		{"stopped again", func(w *world) { w.nomad.Put(w.nomad.Job("team-a", "train")) }, state.EventOwnerStopped},
		{"purged", func(w *world) {
			if _, _, err := w.nomad.Client().Jobs().Deregister("train", true, &nomadapi.WriteOptions{Namespace: "team-a"}); err != nil {
				t.Fatal(err)
			}
		}, state.EventOwnerPurged},
		{"removed the tag", func(w *world) {
			tag := w.nomad.Job("team-a", "train").VersionTag.Name
			if _, err := w.nomad.Client().Jobs().UntagVersion("train", tag, &nomadapi.WriteOptions{Namespace: "team-a"}); err != nil {
				t.Fatal(err)
			}
		}, state.EventOwnerStopped},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newWorld(t)
			w.run("team-a", "train")
			w.suspend("team-a", "train")
			tt.owner(w)
			n := len(w.nomad.Writes())
			w.apply(w.view())
			if rec := w.record("team-a", "train"); rec != nil {
				t.Fatalf("record still there: %+v", rec)
			}
			if got := w.history(); got[len(got)-1] != tt.want {
				t.Fatalf("history %v, want %s last", got, tt.want)
			}
			for _, wr := range w.writesSince(n) {
				if !strings.HasPrefix(wr, "untag ") {
					t.Fatalf("the service wrote %q after its owner's word", wr)
				}
			}
			if j := w.nomad.Job("team-a", "train"); j != nil && j.VersionTag != nil && strings.HasPrefix(j.VersionTag.Name, nomadwatch.TagPrefix) {
				t.Fatalf("the service's tag stays: %+v", j.VersionTag)
			}
		})
	}
}

// TestRecordsNobodyCanSteerFast: a record written by hand, for a job
// Nomad never had or one its owner stopped, makes the service write
// nothing to Nomad; a deleted record is rebuilt from the proven tag and
// its job resumes.
func TestRecordsNobodyCanSteerFast(t *testing.T) {
	w := newWorld(t)
	w.run("team-a", "train")
	w.run("team-a", "owned")
	if _, _, err := w.nomad.Client().Jobs().Deregister("owned", false, &nomadapi.WriteOptions{Namespace: "team-a"}); err != nil {
		t.Fatal(err)
	}
	w.suspend("team-a", "train")
	real := map[string]any{}
	if err := json.Unmarshal(w.consul.Value("gs/suspended/team-a/train"), &real); err != nil {
		t.Fatal(err)
	}
	owned := w.nomad.Job("team-a", "owned")
	for key, change := range map[string]map[string]any{
		"gs/suspended/team-b/pwned": {"namespace": "team-b", "job": "pwned", "tagged": false},
		"gs/suspended/team-a/owned": {"job": "owned", "tagged": false, "stop_job_modify_index": *owned.JobModifyIndex, "stop_version": *owned.Version},
	} {
		body := map[string]any{}
		for k, v := range real {
			body[k] = v
		}
		for k, v := range change {
			body[k] = v
		}
		data, _ := json.Marshal(body)
		w.consul.Set(key, data)
	}
	n := len(w.nomad.Writes())
	v := w.view()
	if len(v.RecordErrors) != 2 {
		t.Fatalf("record errors %+v, want the two hand-written records", v.RecordErrors)
	}
	w.apply(v)
	if got := w.writesSince(n); len(got) > 0 {
		t.Fatalf("hand-written records made the service write %v", got)
	}

	w.consul.Set("gs/suspended/team-a/train", nil)
	w.apply(w.view())
	rec := w.record("team-a", "train")
	if rec == nil || rec.Phase != state.PhaseSuspended || !strings.HasPrefix(rec.Reason, "rebuilt from") {
		t.Fatalf("record after its deletion: %+v, want it rebuilt from Nomad", rec)
	}
	w.resume("team-a", "train")
	if j := w.nomad.Job("team-a", "train"); *j.Stop {
		t.Fatal("the job whose record was deleted did not come back")
	}
	if got := w.nomad.Job("team-a", "owned"); !*got.Stop {
		t.Fatal("the job its owner stopped runs again")
	}
	if w.nomad.Job("team-b", "pwned") != nil {
		t.Fatal("a hand-written record registered a job")
	}
}

// TestOwnersStopIsNeverTaggedAsTheServices: the plan read a job's
// allocations as running, but the spec the view read is its owner's stop
// (the soak's seed 1, run 4: a stop 1.5 s before the cycle). The service
// writes no record, no stop and no tag, so it never resumes the job.
func TestOwnersStopIsNeverTaggedAsTheServices(t *testing.T) {
	w := newWorld(t)
	w.run("team-a", "train")
	v := w.view(cluster.Pending{Project: "team-b", Job: "team-b/big", Group: "g", Count: 1, Ask: cluster.Ask{WholeGPUs: 1}})
	stopped := *v.Specs["team-a/train"]
	stopped.Stop = ptr(true)
	v.Specs["team-a/train"] = &stopped
	w.apply(v, plan.Action{Kind: plan.Suspend, Project: "team-a", Job: "team-a/train", Workload: len(v.Snapshot.Pending) - 1, Reason: "reclaim for team-b"})
	if got := w.writesSince(0); len(got) > 0 {
		t.Fatalf("Nomad writes %v for a job its owner stopped", got)
	}
	if rec := w.record("team-a", "train"); rec != nil {
		t.Fatalf("record %+v for a job its owner stopped", rec)
	}
}

// TestStopAfterTheJobChangedIsRefused: a leader that passed its lock
// check and then paused (here: the job changes inside the check) stops
// nothing: its stop enforces the job modify index of its plan, and Nomad
// refuses it. The record stays "stopping" for the next cycle to decide.
func TestStopAfterTheJobChangedIsRefused(t *testing.T) {
	w := newWorld(t)
	w.run("team-a", "train")
	changed := false
	w.act.opts.Guard = func(ctx context.Context) error {
		if !changed && w.consul.Value("gs/suspended/team-a/train") != nil {
			changed = true
			j := w.nomad.Job("team-a", "train")
			j.Meta = map[string]string{"owner": "edited"}
			w.nomad.Put(j) // the owner (or the next leader) writes the job
		}
		return nil
	}
	v := w.view(cluster.Pending{Project: "team-b", Job: "team-b/big", Group: "g", Count: 1, Ask: cluster.Ask{WholeGPUs: 1}})
	rep, err := w.act.Apply(context.Background(), v, plan.Result{Actions: []plan.Action{{Kind: plan.Suspend, Project: "team-a", Job: "team-a/train", Workload: len(v.Snapshot.Pending) - 1}}})
	if err != nil || !changed || len(rep.Errors) == 0 || !strings.Contains(rep.Errors[0].Error(), "conflicting job modify index") {
		t.Fatalf("Apply: %v, report %+v; want the stop refused by Nomad's index check", err, rep)
	}
	if j := w.nomad.Job("team-a", "train"); j.Stop != nil && *j.Stop || j.Meta["owner"] != "edited" {
		t.Fatalf("job %+v; want the owner's version, running", j)
	}
	if rec := w.record("team-a", "train"); rec == nil || rec.Phase != state.PhaseStopping {
		t.Fatalf("record %+v; want it kept, stopping", rec)
	}
}

// TestGuardStopsALeaderThatLostItsLock: with the lock held by another
// instance, a plan's suspension writes no record and stops nothing.
func TestGuardStopsALeaderThatLostItsLock(t *testing.T) {
	w := newWorld(t)
	w.consul.Lock("gs/leader", []byte("q2"), "s2")
	w.act.opts.Guard = func(ctx context.Context) error {
		return leader.Held(ctx, w.consul.Client(), "gs/leader", "q1")
	}
	w.run("team-a", "train")
	v := w.view(cluster.Pending{Project: "team-b", Job: "team-b/big", Group: "g", Count: 1, Ask: cluster.Ask{WholeGPUs: 1}})
	rep, err := w.act.Apply(context.Background(), v, plan.Result{Actions: []plan.Action{{Kind: plan.Suspend, Project: "team-a", Job: "team-a/train", Workload: len(v.Snapshot.Pending) - 1}}})
	if err != nil || len(rep.Errors) == 0 || !strings.Contains(rep.Errors[0].Error(), `held by "q2"`) {
		t.Fatalf("Apply: %v, report %+v; want the suspension refused by the guard", err, rep)
	}
	if got := w.writesSince(0); len(got) > 0 {
		t.Fatalf("Nomad writes %v by an instance that does not hold the lock", got)
	}
	if w.consul.Value("gs/suspended/team-a/train") != nil {
		t.Fatal("a record was written by an instance that does not hold the lock")
	}
}

// FuzzRecordsAgainstTheActuator: whatever a KV writer does to the records
// (change a field, sign with another key, copy a record to another job,
// write garbage, delete), the actuator, given a plan that resumes every
// job pending as suspended, never stops a job, never registers one the
// service did not suspend, and never leaves the suspended job without
// a record or reported.
func FuzzRecordsAgainstTheActuator(f *testing.F) {
	for seed := range uint64(24) {
		f.Add(seed)
	}
	other, err := recordkey.New(bytes.Repeat([]byte{9}, recordkey.MinKeyBytes))
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, seed uint64) {
		w := newWorld(t)
		w.run("team-a", "train")
		w.run("team-a", "owned")
		w.run("team-a", "busy")
		if _, _, err := w.nomad.Client().Jobs().Deregister("owned", false, &nomadapi.WriteOptions{Namespace: "team-a"}); err != nil {
			t.Fatal(err)
		}
		w.suspend("team-a", "train")
		real := w.consul.Value("gs/suspended/team-a/train")
		keys := []string{"team-a/train", "team-a/owned", "team-a/busy", "team-b/ghost"}
		rng := rand.New(rand.NewPCG(seed, 11))
		var done []string
		for range 1 + rng.IntN(4) {
			key := keys[rng.IntN(len(keys))]
			kvKey := "gs/suspended/" + key
			var rec state.Suspension
			_ = json.Unmarshal(real, &rec)
			rec.Namespace, rec.Job, _ = strings.Cut(key, "/")
			switch rng.IntN(6) {
			case 0:
				w.consul.Set(kvKey, nil)
				done = append(done, "delete "+key)
				continue
			case 1:
				w.consul.Set(kvKey, []byte("garbage"))
				done = append(done, "garbage at "+key)
				continue
			case 2:
				rec.Phase, rec.Tagged = state.PhaseSuspended, false
			case 3:
				rec.Phase = state.PhaseResumed
				rec.ResumedAt = time.Now()
			case 4:
				_ = rec.Sign(other)
			default:
				rec.StopJobModifyIndex = uint64(rng.IntN(300))
			}
			data, _ := json.Marshal(rec)
			w.consul.Set(kvKey, data)
			done = append(done, "forged "+key)
		}
		n := len(w.nomad.Writes())
		for range 2 {
			v := w.view()
			var actions []plan.Action
			for i, p := range v.Snapshot.Pending {
				if p.Suspended {
					actions = append(actions, plan.Action{Kind: plan.Place, Project: p.Project, Job: p.Job, Workload: i})
				}
			}
			if _, err := w.act.Apply(context.Background(), v, plan.Result{Actions: actions}); err != nil {
				t.Fatal(err)
			}
		}
		for _, wr := range w.writesSince(n) {
			if strings.HasPrefix(wr, "stop ") || (strings.HasPrefix(wr, "register ") && wr != "register team-a/train") {
				t.Fatalf("after %v the service wrote %q", done, wr)
			}
		}
		if w.nomad.Job("team-b", "ghost") != nil || !*w.nomad.Job("team-a", "owned").Stop || *w.nomad.Job("team-a", "busy").Stop {
			t.Fatalf("after %v a job not the service's changed", done)
		}
		if *w.nomad.Job("team-a", "train").Stop && w.record("team-a", "train") == nil && len(w.view().RecordErrors) == 0 {
			t.Fatalf("after %v the suspended job has no record and nothing is reported", done)
		}
	})
}
