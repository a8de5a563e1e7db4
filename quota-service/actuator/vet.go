package actuator

import (
	"context"
	"slices"
	"time"

	"github.com/gpushare/nomad-gpushare/quota-service/nomadwatch"
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
// modify index and the token's permissions.
func (a *Actuator) Vet(ctx context.Context, v *nomadwatch.View) {
	_, gen, err := a.perms.current(ctx, time.Now())
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.vetted == nil {
		a.vetted = map[string]vetted{}
	}
	why := map[string]string{}
	allocs, cloned := v.Snapshot.Allocations, false
	for i := range allocs {
		al := &allocs[i]
		if al.System {
			continue
		}
		w, seen := why[al.Job]
		if !seen {
			w = a.vetJob(ctx, v, al.Job, gen, err)
			why[al.Job] = w
			if w != "" {
				v.Warnings = append(v.Warnings, "job "+al.Job+" is not suspended: "+w)
			}
		}
		if al.NeverVictim == w {
			continue
		}
		if !cloned {
			// The View may share its list with the Builder and other
			// Views (cluster.Snapshot): the verdicts go on a copy.
			allocs, cloned = slices.Clone(allocs), true
			v.Snapshot.Allocations = allocs
			al = &allocs[i]
		}
		al.NeverVictim = w
	}
	for key := range a.vetted {
		if _, ok := why[key]; !ok {
			delete(a.vetted, key)
		}
	}
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
