package actuator

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpushare/nomad-gpushare/quota-service/kvlayout"
	"github.com/gpushare/nomad-gpushare/quota-service/nomadwatch"
	"github.com/gpushare/nomad-gpushare/quota-service/state"
	"github.com/gpushare/nomad-gpushare/scheduler/cluster"
	"github.com/gpushare/nomad-gpushare/scheduler/plan"
	consulapi "github.com/hashicorp/consul/api"
	"github.com/hashicorp/go-hclog"
	nomadapi "github.com/hashicorp/nomad/api"
)

// vettingActuator is an actuator whose records hold at most 64 KB and
// whose token may submit jobs in namespace team-a only (as read from
// Nomad).
func vettingActuator(t *testing.T) *Actuator {
	t.Helper()
	consul, err := consulapi.NewClient(consulapi.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	store := state.New(consul, kvlayout.New("vet"))
	store.MaxRecordBytes = 64 << 10
	a := New(nil, store, hclog.NewNullLogger(), "test", Options{})
	a.perms.acl, a.perms.gen, a.perms.read = policyACL(t, `namespace "team-a" { capabilities = ["submit-job"] }`), 1, time.Now()
	return a
}

// oversizedJob is a GPU job in team-a whose record would not fit in 64
// KB: its meta is incompressible, so that gzip does not make it fit.
func oversizedJob(id string, modifyIndex uint64) *nomadapi.Job {
	job := gpuJobWith("team-a", nil)
	noise := make([]byte, 200<<10)
	rand.Read(noise)
	job.ID, job.Meta = ptr(id), map[string]string{"blob": base64.StdEncoding.EncodeToString(noise)}
	job.ModifyIndex = ptr(modifyIndex)
	return job
}

// TestVetKeepsUnreturnableJobsOffTheVictimList: a running GPU job whose
// record would not fit in a Consul value, or that the service's token
// could not register again, is never a victim, and the view says why; the
// verdicts go on a copy of the View's allocations, which the Builder may
// share with other Views.
func TestVetKeepsUnreturnableJobsOffTheVictimList(t *testing.T) {
	a := vettingActuator(t)
	big := oversizedJob("big", 7)
	fits, elsewhere := gpuJobWith("team-a", nil), gpuJobWith("team-b", nil)
	fits.ID, elsewhere.ID = ptr("fits"), ptr("elsewhere")
	fits.ModifyIndex, elsewhere.ModifyIndex = ptr(uint64(8)), ptr(uint64(9))
	v := &nomadwatch.View{Snapshot: &cluster.Snapshot{}, Specs: map[string]*nomadapi.Job{"team-a/big": big, "team-a/fits": fits, "team-b/elsewhere": elsewhere}}
	for _, key := range []string{"team-a/big", "team-a/fits", "team-b/elsewhere"} {
		v.Snapshot.Allocations = append(v.Snapshot.Allocations, cluster.Allocation{ID: key, Job: key, Preemptible: true})
	}
	shared := v.Snapshot.Allocations // as the Builder shares it with the next View
	a.Vet(context.Background(), v)
	for _, al := range shared {
		if al.NeverVictim != "" {
			t.Errorf("%s: the verdict was written into the View's shared list of allocations, not into a copy", al.Job)
		}
	}
	want := map[string]string{"team-a/big": "would exceed", "team-a/fits": "", "team-b/elsewhere": "may not submit jobs in namespace team-b"}
	for _, al := range v.Snapshot.Allocations {
		never := want[al.Job] != ""
		if got := al.NeverVictim; (got != "") != never || !strings.Contains(got, want[al.Job]) {
			t.Errorf("%s: never a victim because %q, want %q", al.Job, got, want[al.Job])
		}
		if al.System {
			t.Errorf("%s: marked as a system job", al.Job)
		}
		warned := false
		for _, w := range v.Warnings {
			warned = warned || (strings.Contains(w, al.Job) && never && strings.Contains(w, want[al.Job]))
		}
		if warned != never {
			t.Errorf("%s: warnings %q, want one saying %q", al.Job, v.Warnings, want[al.Job])
		}
	}
}

// TestVetOfASharedListFollowsTheVerdicts: the next View may share the
// last one's allocations (the Builder keeps the list while no allocation
// changed). Vet then gives it the last pass's verdicts while every job's
// verdict is the same, and judges again when one changed: a job whose
// spec grew past what a record holds becomes never a victim, and one
// the token may submit again becomes a victim again.
func TestVetOfASharedListFollowsTheVerdicts(t *testing.T) {
	a := vettingActuator(t)
	small, big, elsewhere := growingJobs()
	var shared []cluster.Allocation
	for _, key := range []string{"team-a/grows", "team-b/elsewhere", "team-a/grows"} {
		shared = append(shared, cluster.Allocation{ID: key, Job: key, Preemptible: true})
	}
	steps := []struct {
		name  string
		specs map[string]*nomadapi.Job
		acl   string
		want  map[string]string
	}{
		{"first pass", map[string]*nomadapi.Job{"team-a/grows": small, "team-b/elsewhere": elsewhere}, "",
			map[string]string{"team-a/grows": "", "team-b/elsewhere": "may not submit jobs in namespace team-b"}},
		{"same verdicts", map[string]*nomadapi.Job{"team-a/grows": small, "team-b/elsewhere": elsewhere}, "",
			map[string]string{"team-a/grows": "", "team-b/elsewhere": "may not submit jobs in namespace team-b"}},
		{"a spec grew", map[string]*nomadapi.Job{"team-a/grows": big, "team-b/elsewhere": elsewhere}, "",
			map[string]string{"team-a/grows": "would exceed", "team-b/elsewhere": "may not submit jobs in namespace team-b"}},
		{"the token may submit in team-b", map[string]*nomadapi.Job{"team-a/grows": big, "team-b/elsewhere": elsewhere},
			`namespace "*" { capabilities = ["submit-job"] }`,
			map[string]string{"team-a/grows": "would exceed", "team-b/elsewhere": ""}},
	}
	for i, step := range steps {
		if step.acl != "" {
			a.perms.acl, a.perms.gen = policyACL(t, step.acl), a.perms.gen+1
		}
		v := &nomadwatch.View{Snapshot: &cluster.Snapshot{Allocations: shared}, Specs: step.specs}
		a.Vet(context.Background(), v)
		checkVerdicts(t, fmt.Sprintf("step %d (%s)", i, step.name), v.Snapshot.Allocations, step.want)
		warned := v.Warnings
		for job, want := range step.want {
			found := slices.ContainsFunc(warned, func(w string) bool { return strings.Contains(w, job) && strings.Contains(w, want) })
			if found != (want != "") {
				t.Errorf("step %d (%s): warnings %q, want one for %s only if it has a verdict (%q)", i, step.name, warned, job, want)
			}
		}
		for _, al := range shared {
			if al.NeverVictim != "" {
				t.Fatalf("step %d (%s): a verdict was written into the shared list", i, step.name)
			}
		}
	}
}

// TestHoldOfAJobTheServiceCouldNotRegisterIsSkipped: a queued job runs
// nothing, so Vet never marks it; when a plan holds it from a room and the
// service's token could not register it again (no submit-job in its
// namespace), the hold is held back with the reason and nothing is
// stopped: holding it would lose it.
func TestHoldOfAJobTheServiceCouldNotRegisterIsSkipped(t *testing.T) {
	consul, err := consulapi.NewClient(consulapi.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	a := New(nil, state.New(consul, kvlayout.New("vet")), hclog.NewNullLogger(), "test", Options{})
	a.perms.acl, a.perms.gen, a.perms.read = policyACL(t, `namespace "team-a" { capabilities = ["submit-job"] }`), 1, time.Now()
	queued := gpuJobWith("team-b", nil)
	queued.ID, queued.Version, queued.ModifyIndex, queued.JobModifyIndex = ptr("queued"), ptr(uint64(0)), ptr(uint64(5)), ptr(uint64(5))
	v := &nomadwatch.View{Snapshot: &cluster.Snapshot{}, Specs: map[string]*nomadapi.Job{"team-b/queued": queued}, ListedAt: time.Now()}
	hold := plan.Action{Kind: plan.Suspend, Project: "team-b", Job: "team-b/queued", Workload: -1, Cause: plan.CauseHold,
		Reason: "held from a room made for other work"}
	rep, err := a.Apply(context.Background(), v, plan.Result{Actions: []plan.Action{hold}})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Done) != 0 || len(rep.Errors) != 0 {
		t.Errorf("done %v, errors %v: want nothing stopped and no error", rep.Done, rep.Errors)
	}
	if len(rep.Skipped) != 1 || !strings.Contains(rep.Skipped[0], "may not submit jobs in namespace team-b") {
		t.Errorf("held back %q: want the hold, saying the token may not submit jobs in team-b", rep.Skipped)
	}
}

// TestVetLooksAtTheSpecsAViewSaysChanged: on a shared list, a View that
// follows the one last vetted names the specs changed since
// (View.SpecsChanged), and those jobs' verdicts follow their specs; a
// View that does not follow it (one in between was never vetted), or
// new permissions, make every job judged again.
func TestVetLooksAtTheSpecsAViewSaysChanged(t *testing.T) {
	a := vettingActuator(t)
	small, big, elsewhere := growingJobs()
	shrunk := gpuJobWith("team-a", nil)
	shrunk.ID, shrunk.ModifyIndex = ptr("grows"), ptr(uint64(11))
	shared := []cluster.Allocation{
		{ID: "a1", Job: "team-a/grows", Preemptible: true},
		{ID: "b1", Job: "team-b/elsewhere", Preemptible: true},
	}
	const refused = "may not submit jobs in namespace team-b"
	steps := []struct {
		name    string
		seq     uint64
		changed map[string]bool
		grows   *nomadapi.Job
		acl     string
		want    map[string]string
	}{
		{"first View", 1, nil, small, "", map[string]string{"team-a/grows": "", "team-b/elsewhere": refused}},
		{"the next View: grows grew", 2, map[string]bool{"team-a/grows": true}, big, "",
			map[string]string{"team-a/grows": "would exceed", "team-b/elsewhere": refused}},
		{"the next View: nothing changed", 3, map[string]bool{}, big, "",
			map[string]string{"team-a/grows": "would exceed", "team-b/elsewhere": refused}},
		{"a View after one never vetted (grows shrank in it)", 5, map[string]bool{}, shrunk, "",
			map[string]string{"team-a/grows": "", "team-b/elsewhere": refused}},
		{"the next View, the token may submit in team-b", 6, map[string]bool{}, shrunk, `namespace "*" { capabilities = ["submit-job"] }`,
			map[string]string{"team-a/grows": "", "team-b/elsewhere": ""}},
	}
	for i, step := range steps {
		if step.acl != "" {
			a.perms.acl, a.perms.gen = policyACL(t, step.acl), a.perms.gen+1
		}
		v := &nomadwatch.View{Snapshot: &cluster.Snapshot{Allocations: shared}, Seq: step.seq, SpecsChanged: step.changed,
			Specs: map[string]*nomadapi.Job{"team-a/grows": step.grows, "team-b/elsewhere": elsewhere}}
		a.Vet(context.Background(), v)
		checkVerdicts(t, fmt.Sprintf("step %d (%s)", i, step.name), v.Snapshot.Allocations, step.want)
	}
}

// growingJobs are team-a/grows as it starts (small) and once its spec
// grew past what a record holds (big), and team-b/elsewhere, in a
// namespace the vetting actuator's token may not submit jobs in.
func growingJobs() (small, big, elsewhere *nomadapi.Job) {
	small, elsewhere = gpuJobWith("team-a", nil), gpuJobWith("team-b", nil)
	small.ID, elsewhere.ID = ptr("grows"), ptr("elsewhere")
	small.ModifyIndex, elsewhere.ModifyIndex = ptr(uint64(8)), ptr(uint64(9))
	return small, oversizedJob("grows", 10), elsewhere
}

// checkVerdicts checks each allocation's verdict against want (by job:
// a part of the reason, "" for none).
func checkVerdicts(t *testing.T, step string, allocs []cluster.Allocation, want map[string]string) {
	t.Helper()
	for _, al := range allocs {
		if got, want := al.NeverVictim, want[al.Job]; (got != "") != (want != "") || !strings.Contains(got, want) {
			t.Errorf("%s: %s never a victim because %q, want %q", step, al.Job, got, want)
		}
	}
}
