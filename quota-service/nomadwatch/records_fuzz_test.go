package nomadwatch

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/gpushare/nomad-gpushare/quota-service/state"
	nomadapi "github.com/hashicorp/nomad/api"
)

// fuzzWorld is a cluster as the service left it, with the records it
// signed: what each job is, in Nomad and in the service's records.
type fuzzWorld struct {
	jobs map[string]*nomadapi.Job // Nomad's jobs by Key (absent: not in Nomad)
	// signed are the records the service wrote, by Key; old is an earlier
	// record of a/suspended (a replay).
	signed map[string]state.Suspension
	old    state.Suspension
}

const (
	fuzzTag    = TagPrefix + "for-b-19700101T001640Z"
	fuzzOldTag = TagPrefix + "for-b-19700101T000000Z"
)

// newFuzzWorld: a/suspended (stopped by the service under its proven
// tag), a/running (never suspended), a/owner-stopped (stopped by its
// owner, no tag), a/collected (suspended untagged, then collected: only
// its record's spec brings it back), a/resumed (resumed, in its hold),
// a/unfinished (recorded, not yet stopped).
func newFuzzWorld(t testing.TB) *fuzzWorld {
	at := recordTime.Add(time.Second)
	mk := func(id string, ver, jmi uint64, stop bool) *nomadapi.Job {
		j := withIndex(spec("a", id, "nvidia/gpu", 1), jmi)
		j.Version, j.Stop, j.SubmitTime = ptr(ver), ptr(stop), ptr(at.UnixNano())
		return j
	}
	w := &fuzzWorld{jobs: map[string]*nomadapi.Job{
		"a/suspended":     proven(mk("suspended", 4, 20, true), testKeys, fuzzTag),
		"a/running":       mk("running", 1, 5, false),
		"a/owner-stopped": mk("owner-stopped", 2, 9, true),
		"a/resumed":       mk("resumed", 6, 30, false),
		"a/unfinished":    mk("unfinished", 3, 10, false),
	}, signed: map[string]state.Suspension{}}
	base := func(id string, phase state.Phase) state.Suspension {
		return state.Suspension{Namespace: "a", Job: id, Project: "a", Phase: phase, Reason: "reclaim", ForProject: "b", ForWorkload: "b/w/g",
			Time: recordTime, By: "q1", Version: 3, JobModifyIndex: 10, Groups: map[string]int{"g": 1}, Tag: fuzzTag}
	}
	sus := base("suspended", state.PhaseSuspended)
	sus.Tagged, sus.StopVersion, sus.StopJobModifyIndex, sus.StoppedAt = true, 4, 20, at
	col := base("collected", state.PhaseSuspended)
	col.StopVersion, col.StopJobModifyIndex, col.StoppedAt = 4, 20, at
	if err := col.EncodeSpec(spec("a", "collected", "nvidia/gpu", 1), testKeys); err != nil {
		t.Fatal(err)
	}
	res := base("resumed", state.PhaseResumed)
	res.ResumeJobModifyIndex, res.ResumedAt = 30, at
	for _, r := range []state.Suspension{sus, col, res, base("unfinished", state.PhaseStopping)} {
		if err := r.Sign(testKeys); err != nil {
			t.Fatal(err)
		}
		w.signed[r.Key()] = r
	}
	w.old = base("suspended", state.PhaseSuspended)
	w.old.Tag, w.old.Tagged, w.old.StopVersion, w.old.StopJobModifyIndex = fuzzOldTag, true, 2, 8
	if err := w.old.Sign(testKeys); err != nil {
		t.Fatal(err)
	}
	return w
}

// mutate applies one change a KV writer could make to the stored records
// (by Key, as JSON) and says what it did.
func (w *fuzzWorld) mutate(kv map[string][]byte, rng *rand.Rand) string {
	keys := []string{"a/suspended", "a/collected", "a/resumed", "a/unfinished", "a/running", "a/owner-stopped", "a/ghost"}
	key := keys[rng.IntN(len(keys))]
	var rec state.Suspension
	if data, ok := kv[key]; ok {
		if err := json.Unmarshal(data, &rec); err != nil {
			rec = state.Suspension{}
		}
	} else {
		// A record for a job that has none: copied from another.
		src := w.signed[keys[rng.IntN(4)]]
		rec = src
		ns, id, _ := strings.Cut(key, "/")
		rec.Namespace, rec.Job = ns, id
	}
	what := ""
	switch rng.IntN(12) {
	case 0:
		delete(kv, key)
		return "delete " + key
	case 1:
		rec.Phase = []state.Phase{state.PhaseStopping, state.PhaseSuspended, state.PhaseResuming, state.PhaseResumed}[rng.IntN(4)]
		what = "phase " + string(rec.Phase)
	case 2:
		rec.Tagged, rec.Tag = !rec.Tagged, []string{"", fuzzTag, fuzzOldTag, TagPrefix + "other"}[rng.IntN(4)]
		what = "tag " + rec.Tag
	case 3:
		rec.StopJobModifyIndex, rec.JobModifyIndex = uint64(rng.IntN(40)), uint64(rng.IntN(40))
		what = "indexes"
	case 4:
		rec.MAC = rec.MAC[:rng.IntN(len(rec.MAC)+1)]
		what = "truncated MAC"
	case 5:
		_ = rec.Sign(otherKeys)
		return w.store(kv, key, rec, "signed with another key")
	case 6:
		return w.store(kv, "a/suspended", w.old, "replayed an older record of a/suspended")
	case 7:
		src := w.signed[keys[rng.IntN(4)]]
		kv[key], _ = json.Marshal(src) // the body names its own job
		return "copied " + src.Key() + " to " + key
	case 8:
		rec.SpecSealed = w.signed["a/collected"].SpecSealed
		what = "spec of a/collected"
	case 9:
		rec.ResumedAt, rec.StoppedAt, rec.Time = time.Time{}, time.Time{}, recordTime.Add(time.Duration(rng.IntN(1000))*time.Second)
		what = "times"
	case 10:
		if data, ok := kv[key]; ok && len(data) > 0 {
			kv[key] = data[:rng.IntN(len(data))]
			return "truncated " + key
		}
		kv[key] = []byte("not a record")
		return "garbage at " + key
	default:
		rec.Project, rec.ForProject, rec.Reason = "x", "y", "z"
		what = "project"
	}
	return w.store(kv, key, rec, what)
}

func (w *fuzzWorld) store(kv map[string][]byte, key string, rec state.Suspension, what string) string {
	kv[key], _ = json.Marshal(rec)
	return what + " at " + key
}

// read is what Store.Suspensions makes of the stored records.
func read(kv map[string][]byte) (recs []state.Suspension, unverified []state.Unverified, bad []state.RecordError) {
	for key, data := range kv {
		var rec state.Suspension
		if json.Unmarshal(data, &rec) != nil || rec.Key() != key || rec.Namespace == "" || rec.Phase == "" {
			ns, job, _ := strings.Cut(key, "/")
			bad = append(bad, state.RecordError{Key: key, Namespace: ns, Job: job, Reason: "does not decode", ModifyIndex: 1})
			continue
		}
		rec.ModifyIndex = 1
		if err := rec.Verify(testKeys); err != nil {
			unverified = append(unverified, state.Unverified{Suspension: rec, Reason: err.Error()})
			continue
		}
		recs = append(recs, rec)
	}
	return recs, unverified, bad
}

// FuzzRecordMutations: whatever a KV writer does to the records (change
// any field, truncate, sign with another key, replay an older record,
// copy a record to another job, delete), the verdicts the actuator acts on
// never let it register a job the service did not suspend, stop a job it
// did not record for stopping, or close a record the service did not
// write; and a job Nomad shows stopped under the service's proven tag
// always has a record rebuilt or is reported.
func FuzzRecordMutations(f *testing.F) {
	for seed := range uint64(32) {
		f.Add(seed, uint8(1+seed%6))
	}
	w := newFuzzWorld(f)
	f.Fuzz(func(t *testing.T, seed uint64, n uint8) {
		rng := rand.New(rand.NewPCG(seed, 7))
		kv := map[string][]byte{}
		for key, rec := range w.signed {
			kv[key], _ = json.Marshal(rec)
		}
		var done []string
		for range int(n%8) + 1 {
			done = append(done, w.mutate(kv, rng))
		}
		recs, unverified, bad := read(kv)
		in := Inputs{Suspensions: recs, Unverified: unverified, RecordErrors: bad, Specs: map[string]*nomadapi.Job{}, Unlisted: map[string]error{},
			Tagged: map[string]*nomadapi.Job{}, Now: recordTime.Add(time.Minute), Keys: testKeys}
		named := map[string]bool{}
		for _, r := range recs {
			named[r.Key()] = true
		}
		for _, r := range unverified {
			named[r.Key()] = true
		}
		for _, r := range bad {
			named[r.Namespace+"/"+r.Job] = true
		}
		for key := range named {
			if job := w.jobs[key]; job != nil {
				in.Specs[key] = job
			} else {
				in.Unlisted[key] = nil
			}
		}
		for key, job := range w.jobs {
			verified := false
			for _, r := range recs {
				verified = verified || r.Key() == key
			}
			if stopped(job) && ownTagName(job) && !verified {
				in.Tagged[key] = job
			}
		}
		v := Assemble(in)
		if err := checkVerdicts(w, v); err != nil {
			t.Fatalf("after %v: %v", done, err)
		}
	})
}

// checkVerdicts holds the promises against the world's truth.
func checkVerdicts(w *fuzzWorld, v *View) error {
	for key, r := range v.Records {
		switch {
		case r.Resumable() && key != "a/suspended" && key != "a/collected":
			return fmt.Errorf("%s would be registered (verdict %d: %s); the service suspended only a/suspended and a/collected", key, r.Verdict, r.Why)
		case r.Verdict == Vanished && key != "a/collected":
			return fmt.Errorf("%s would come back from a record's spec", key)
		case r.Verdict == Unfinished && key != "a/unfinished":
			return fmt.Errorf("%s would be stopped; only a/unfinished was recorded for stopping", key)
		case r.Verdict == Rebuild && key != "a/suspended":
			return fmt.Errorf("%s rebuilt; only a/suspended carries the service's proven tag", key)
		case r.Verdict == Closed && !sameSigned(w, r.Suspension):
			return fmt.Errorf("%s closed (%s) from a record the service did not write", key, r.Why)
		}
	}
	r := v.Records["a/suspended"]
	reported := false
	for _, e := range v.RecordErrors {
		reported = reported || (e.Namespace == "a" && e.Job == "suspended")
	}
	if (r == nil || (r.Verdict != Suspended && r.Verdict != Rebuild)) && !reported {
		return fmt.Errorf("a/suspended, stopped under the service's proven tag, is neither kept, rebuilt nor reported: %+v", r)
	}
	return nil
}

// sameSigned says rec is a record the service signed (its latest or the
// older one of a/suspended).
func sameSigned(w *fuzzWorld, rec state.Suspension) bool {
	for _, s := range append([]state.Suspension{w.old}, mapValues(w.signed)...) {
		if s.MAC == rec.MAC {
			return true
		}
	}
	return false
}

func mapValues[V any](m map[string]V) []V {
	out := make([]V, 0, len(m))
	for _, v := range m {
		out = append(out, v)
	}
	return out
}
