package soak

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	nomadapi "github.com/hashicorp/nomad/api"

	"github.com/gpushare/nomad-gpushare/quota-service/state"
)

// checker reads Nomad and Consul throughout and asserts the invariants.
type checker struct {
	nomad  *nomadapi.Client
	store  *state.Store
	hist   *History
	table  *jobTable
	driver *driver
	nodes  map[string][]string // node ID -> GPU UUIDs
	bound  time.Duration

	mu sync.Mutex
	// disturbed is when the last fault ended (or the settle phase began):
	// the restore bound counts from it.
	disturbed time.Time
	// starvedSince is, per project, when it was first seen owed work in
	// the current episode; reported says the episode's violation is out.
	starvedSince map[string]time.Time
	reported     map[string]bool
	// Counts for the summary.
	polls, failedPolls int
	violations, known  []string
	// lastEvent is the service's last history entry per job.
	lastEvent            map[string]state.Entry
	suspensions, resumes int
	maxRestore           time.Duration
	seenHistory          map[string]bool
	// overbooked remembers the conflicts already reported.
	overbooked map[string]bool
	// lost remembers the jobs already reported lost, until they are fine.
	lost map[string]bool
	// memory follows the RSS of the service's and the plugins'
	// processes (memory.go).
	memory *rssTracker
	// fencing holds the lock's reads and the instances' Nomad writes
	// (fencingcheck.go).
	fencing fencing
}

func (c *checker) disturb() {
	c.mu.Lock()
	c.disturbed = time.Now()
	c.mu.Unlock()
}

func (c *checker) violation(format string, args ...any) {
	c.report("", fmt.Sprintf(format, args...))
}

// report notes a violation; finding names the known finding it is a case
// of ("" none). A known finding's case is a violation all the same: it
// counts in the summary's violations, and Result.Known names it.
func (c *checker) report(finding, msg string) {
	if finding != "" {
		msg = "[known finding " + finding + "] " + msg
	}
	c.mu.Lock()
	c.violations = append(c.violations, msg)
	if finding != "" {
		c.known = append(c.known, msg)
	}
	c.mu.Unlock()
	c.hist.Add("VIOLATION %s", msg)
	c.hist.Print("history around the violation:\n" + c.hist.Around(time.Now(), 30*time.Second))
}

func (c *checker) records(ctx context.Context) (map[string]state.Suspension, error) {
	recs, err := c.store.Suspensions(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string]state.Suspension{}
	for _, r := range recs.Verified {
		out[r.Namespace+"/"+r.Job] = r
	}
	return out, nil
}

// poll reads everything once and checks it. A poll whose reads fail (an
// agent is down) checks nothing.
func (c *checker) poll(ctx context.Context) {
	before := c.table.snapshot()
	recs1, err1 := c.records(ctx)
	q := (&nomadapi.QueryOptions{Namespace: "*", AllowStale: false}).WithContext(ctx)
	stubs, _, err2 := c.nomad.Jobs().List(q)
	q = (&nomadapi.QueryOptions{Namespace: "*", Params: map[string]string{"resources": "true", "task_states": "false"}}).WithContext(ctx)
	astubs, _, err3 := c.nomad.Allocations().List(q)
	recs2, err4 := c.records(ctx)
	after := c.table.snapshot()
	hist, err5 := c.store.History(ctx)
	if err := errors.Join(err1, err2, err3, err4); err != nil {
		c.mu.Lock()
		c.failedPolls++
		c.mu.Unlock()
		return
	}
	c.mu.Lock()
	c.polls++
	c.mu.Unlock()
	if err5 == nil {
		c.noteHistory(hist)
	}
	jobs := map[string]*nomadapi.JobListStub{}
	for _, s := range stubs {
		jobs[s.Namespace+"/"+s.ID] = s
	}
	allocs := make([]alloc, 0, len(astubs))
	for _, a := range astubs {
		allocs = append(allocs, allocOf(a))
	}
	c.checkLost(before, after, jobs, recs1, recs2)
	c.checkOverbooking(allocs)
	c.checkRestore(after, jobs, allocs, recs2)
}

// stable says the checker may judge job k: no owner action on it started,
// ran or ended during the poll's reads, and its last one did not fail.
func stable(k string, before, after map[string]jobSnap) (jobSnap, bool) {
	b, ok1 := before[k]
	a, ok2 := after[k]
	if !ok1 || !ok2 || b.seq != a.seq || b.busy || a.busy || a.uncertain {
		return a, false
	}
	return a, true
}

// checkLost: every job its owner did not stop or purge is registered and
// not stopped, or has a verified suspension record (read before and after
// the jobs, so a suspension or resume between the reads is no false
// alarm); one that vanished is fine only if its owner purged it or its
// task was told to end (then Nomad's collector may take it).
func (c *checker) checkLost(before, after map[string]jobSnap, jobs map[string]*nomadapi.JobListStub, recs1, recs2 map[string]state.Suspension) {
	keys := make([]string, 0, len(after))
	for k := range after {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		j, ok := stable(k, before, after)
		if !ok {
			continue
		}
		if j.state == ownerStopped || j.state == purged {
			// The owner's word wins: what its owner stopped or purged
			// does not run again until its owner starts it.
			if s, present := jobs[k]; present && !s.Stop {
				c.reportLost(k, fmt.Sprintf("%s (%s) was %s by its owner but is registered and not stopped (status %s)", k, j.kind.name, j.state, s.Status))
			} else {
				c.clearLost(k)
			}
			continue
		}
		_, r1 := recs1[k]
		_, r2 := recs2[k]
		if r1 || r2 {
			c.clearLost(k)
			continue
		}
		s, present := jobs[k]
		var problem string
		switch {
		case present && s.Stop:
			problem = fmt.Sprintf("%s (%s, %s) is stopped with no suspension record (status %s)", k, j.kind.name, j.state, s.Status)
			c.mu.Lock()
			e, ok := c.lastEvent[k]
			c.mu.Unlock()
			if ok {
				problem += fmt.Sprintf("; the service's last entry: %s by %s: %s", e.Event, e.By, e.Reason)
			}
		case !present && j.state == active:
			problem = fmt.Sprintf("%s (%s, %s) vanished from Nomad with no suspension record", k, j.kind.name, j.state)
		}
		if problem == "" {
			c.clearLost(k)
			continue
		}
		c.reportLost(k, "lost job: "+problem)
	}
}

// reportLost reports a problem with job k once until it is fine again.
func (c *checker) reportLost(k, problem string) {
	c.mu.Lock()
	seen := c.lost[k]
	c.lost[k] = true
	c.mu.Unlock()
	if !seen {
		c.report(knownFinding(problem), problem)
	}
}

func (c *checker) clearLost(k string) {
	c.mu.Lock()
	delete(c.lost, k)
	c.mu.Unlock()
}

func (c *checker) checkOverbooking(allocs []alloc) {
	for _, p := range overbooking(allocs) {
		c.mu.Lock()
		seen := c.overbooked[p]
		c.overbooked[p] = true
		c.mu.Unlock()
		if !seen {
			c.violation("overbooked: %s", p)
		}
	}
}

// checkRestore: a project under its guarantee with placeable waiting work
// (single jobs of one GPU or less: pending, or suspended with a record)
// must be served within the bound after the last disturbance (fault,
// quota edit, or the start of the episode, whichever is latest).
func (c *checker) checkRestore(snap map[string]jobSnap, jobs map[string]*nomadapi.JobListStub, allocs []alloc, recs map[string]state.Suspension) {
	quotas, quotaEdited := c.driver.quotaView()
	used := map[string]float64{}
	hasBooked := map[string]bool{}
	for _, a := range allocs {
		if a.booked() {
			used[a.Namespace] += a.gpus()
			hasBooked[a.Namespace+"/"+a.Job] = true
		}
	}
	protected := map[string]bool{}
	for p, g := range quotas {
		protected[p] = used[p] <= g+1e-9
	}
	waiting := map[string][]demand{}
	for k, j := range snap {
		if j.state != active || j.busy || j.uncertain || !j.kind.single() || hasBooked[k] {
			continue
		}
		s, present := jobs[k]
		_, rec := recs[k]
		switch {
		case present && !s.Stop && (s.Status == "pending" || s.Status == "running"):
		case rec:
		default:
			continue
		}
		waiting[j.ns] = append(waiting[j.ns], demand{Namespace: j.ns, Job: j.id, Whole: j.kind.whole, Shares: j.kind.shares})
	}
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range c.driver.projects {
		g, known := quotas[p]
		var owed []demand
		if known {
			owed = starved(g, used[p], waiting[p], c.nodes, allocs, protected)
		}
		since, was := c.starvedSince[p]
		origin := since
		for _, t := range []time.Time{c.disturbed, quotaEdited} {
			if t.After(origin) {
				origin = t
			}
		}
		if len(owed) == 0 {
			if was {
				d := now.Sub(origin)
				if d > c.maxRestore {
					c.maxRestore = d
				}
				if now.Sub(since) > 2*time.Second {
					c.hist.Add("restore: project %s served %s after the last disturbance (owed work for %s)", p, d.Round(100*time.Millisecond), now.Sub(since).Round(100*time.Millisecond))
				}
				delete(c.starvedSince, p)
				delete(c.reported, p)
			}
			continue
		}
		if !was {
			c.starvedSince[p] = now
			var names []string
			for _, d := range owed {
				names = append(names, d.Job)
			}
			c.hist.Add("restore: project %s owed work: uses %.2f of its %.0f guaranteed GPUs, waits with placeable %v", p, used[p], g, names)
			continue
		}
		if now.Sub(origin) > c.bound && !c.reported[p] {
			c.reported[p] = true
			var names []string
			for _, d := range owed {
				names = append(names, fmt.Sprintf("%s(%.2f GPU)", d.Job, d.gpus()))
			}
			c.mu.Unlock()
			c.violation("not restored: project %s uses %.2f of its %.0f guaranteed GPUs and waits with placeable %s for %s since the last disturbance",
				p, used[p], g, strings.Join(names, " "), now.Sub(origin).Round(time.Second))
			c.mu.Lock()
		}
	}
}

// noteHistory logs the service's new history entries and counts
// suspensions and resumes.
func (c *checker) noteHistory(hist []state.Entry) {
	for _, e := range hist {
		k := e.Time.UTC().Format(time.RFC3339Nano) + string(e.Event) + e.Namespace + "/" + e.Job
		c.mu.Lock()
		seen := c.seenHistory[k]
		c.seenHistory[k] = true
		if !seen {
			c.lastEvent[e.Namespace+"/"+e.Job] = e
		}
		switch {
		case seen:
		case e.Event == state.EventSuspend || e.Event == state.EventSuspendFinished:
			c.suspensions++
		case e.Event == state.EventResume:
			c.resumes++
		}
		c.mu.Unlock()
		if !seen {
			c.hist.Add("service %s %s/%s by %s: %s", e.Event, e.Namespace, e.Job, e.By, e.Reason)
		}
	}
}

// settle waits until the polls have seen no project owed work for 10 s
// (at least 10 s after the call), or until limit passes.
func (c *checker) settle(ctx context.Context, limit time.Duration) {
	start := time.Now()
	var clear time.Time
	for time.Since(start) < limit && ctx.Err() == nil {
		c.mu.Lock()
		owed, polls := len(c.starvedSince), c.polls
		c.mu.Unlock()
		switch {
		case owed > 0:
			clear = time.Time{}
		case clear.IsZero():
			clear = time.Now()
		case time.Since(clear) >= 10*time.Second && time.Since(start) >= 10*time.Second && polls > 0:
			c.hist.Add("settle phase: no project owed work for 10 s")
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}
