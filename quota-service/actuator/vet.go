package actuator

import (
	"context"
	"slices"
	"time"

	"github.com/gpushare/nomad-gpushare/quota-service/nomadwatch"
	"github.com/gpushare/nomad-gpushare/scheduler/cluster"
)

// vetted is a cached verdict of mayComeBack for one job.
type vetted struct {
	modifyIndex uint64
	gen         int
	why         string
}

// Vet keeps the planner from choosing victims the service could not bring
// back: every running GPU job whose record would not fit in Consul, or
// that the service's token could not register again, is marked never to
// be a victim in v's snapshot (cluster.Allocation.NeverVictim, with the
// reason; a non-preemptible job would still be a victim above its
// project's guarantee), with a warning saying why. The plan names such
// jobs in their project's status line. Verdicts are cached by the job's
// modify index and the token's permissions, and a View whose allocations
// are the last one's list (the Builder shares it while no allocation
// changed) takes the last pass's result when every verdict is the same.
func (a *Actuator) Vet(ctx context.Context, v *nomadwatch.View) {
	_, gen, err := a.perms.current(ctx, time.Now())
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.vetted == nil {
		a.vetted = map[string]vetted{}
	}
	p := a.lastVet
	if p == nil || !cluster.SameList(p.in, v.Snapshot.Allocations) || !a.sameVerdicts(ctx, v, p, gen, err) {
		p = a.vetPass(ctx, v, gen, err)
		a.lastVet = p
	}
	p.seq, p.gen, p.perm = v.Seq, gen, errText(err)
	v.Snapshot.Allocations = p.out
	for i, key := range p.jobs {
		if p.why[i] != "" {
			v.Warnings = append(v.Warnings, "job "+key+" is not suspended: "+p.why[i])
		}
	}
}

// vetPass is one pass of Vet over a View's allocations: the list it read
// (in) and the list it leaves in the View (out: in itself when no job
// needs a verdict, else a copy with the verdicts), and the verdict of
// each job not run by the system scheduler, in the order the jobs first
// appear.
type vetPass struct {
	in, out []cluster.Allocation
	jobs    []string
	why     []string
	// at is each job's position in jobs. seq is the View last vetted
	// with the pass (View.Seq), gen and perm the permissions' generation
	// and error ("" without) it was vetted under.
	at   map[string]int
	seq  uint64
	gen  int
	perm string
}

// vetPass judges every job of v's allocations and forgets the verdicts
// of jobs no longer there. a.mu is held.
func (a *Actuator) vetPass(ctx context.Context, v *nomadwatch.View, gen int, permErr error) *vetPass {
	p := &vetPass{in: v.Snapshot.Allocations, out: v.Snapshot.Allocations, at: map[string]int{}}
	for i := range p.out {
		al := &p.out[i]
		if al.System {
			continue
		}
		var w string
		if at, seen := p.at[al.Job]; seen {
			w = p.why[at]
		} else {
			w = a.vetJob(ctx, v, al.Job, gen, permErr)
			p.at[al.Job] = len(p.jobs)
			p.jobs, p.why = append(p.jobs, al.Job), append(p.why, w)
		}
		if al.NeverVictim == w {
			continue
		}
		if cluster.SameList(p.out, p.in) {
			// The View may share its list with the Builder and other
			// Views (cluster.Snapshot): the verdicts go on a copy.
			p.out = slices.Clone(p.in)
			al = &p.out[i]
		}
		al.NeverVictim = w
	}
	for key := range a.vetted {
		if _, ok := p.at[key]; !ok {
			delete(a.vetted, key)
		}
	}
	return p
}

// sameVerdicts says every job of pass p has the verdict it had then. A
// verdict changes only with the job's spec or the permissions: when p
// last vetted the View before v, under the same permissions, only the
// jobs whose spec v says changed since (View.SpecsChanged) are looked at.
// a.mu is held.
func (a *Actuator) sameVerdicts(ctx context.Context, v *nomadwatch.View, p *vetPass, gen int, permErr error) bool {
	if v.SpecsChanged != nil && v.Seq > 1 && v.Seq == p.seq+1 && gen == p.gen && errText(permErr) == p.perm {
		for key := range v.SpecsChanged {
			if i, ok := p.at[key]; ok && a.vetJob(ctx, v, key, gen, permErr) != p.why[i] {
				return false
			}
		}
		return true
	}
	for i, key := range p.jobs {
		if a.vetJob(ctx, v, key, gen, permErr) != p.why[i] {
			return false
		}
	}
	return true
}

// errText is err's text, "" for nil.
func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// vetJob is the (cached) verdict for job key; permErr, when set, is why
// the token's permissions are unknown. a.mu is held.
func (a *Actuator) vetJob(ctx context.Context, v *nomadwatch.View, key string, gen int, permErr error) string {
	if permErr != nil {
		return permErr.Error()
	}
	spec := v.Specs[key]
	if spec == nil || spec.ModifyIndex == nil {
		return ""
	}
	if c, ok := a.vetted[key]; ok && c.modifyIndex == *spec.ModifyIndex && c.gen == gen {
		return c.why
	}
	why := a.mayComeBack(ctx, spec)
	a.vetted[key] = vetted{modifyIndex: *spec.ModifyIndex, gen: gen, why: why}
	return why
}
