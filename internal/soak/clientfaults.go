package soak

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	nomadapi "github.com/hashicorp/nomad/api"
)

// restartClient restarts a client-only Nomad agent (SIGINT, then started
// again on its data: its tasks keep running, as in a client upgrade).
func (f *injector) restartClient() {
	i, ok := f.clientAgent("restart-client")
	if !ok {
		return
	}
	f.faults++
	name := f.c.ClientNodeName(i)
	f.hist.Add("fault restart-client: restarting the Nomad client %s", name)
	err := f.c.RestartClient(i)
	f.hist.Add("fault restart-client: %s back: %v", name, errString(err))
}

// pauseClient stops a client-only Nomad agent (SIGSTOP) for 3 to 40 s:
// past its heartbeat TTL and the server's grace (10 s each by default)
// its node goes down and Nomad marks its allocations lost and places them
// again; its tasks and plugin run on meanwhile. Then SIGCONT.
func (f *injector) pauseClient() {
	i, ok := f.clientAgent("pause-client")
	if !ok {
		return
	}
	f.faults++
	name := f.c.ClientNodeName(i)
	down := time.Duration(3000+f.rng.Intn(37000)) * time.Millisecond
	f.hist.Add("fault pause-client: SIGSTOP to the Nomad client %s for %s", name, down)
	err := f.c.PauseClient(i, true)
	time.Sleep(down) // the fault's length, not synchronization
	status := f.nodeStatus(name)
	err = errors.Join(err, f.c.PauseClient(i, false))
	f.hist.Add("fault pause-client: SIGCONT to %s (its node was %s): %s", name, status, errString(err))
}

// nodeStatus is the status Nomad's server gives the node named name
// ("ready", "down"...), or why it cannot say.
func (f *injector) nodeStatus(name string) string {
	nodes, _, err := f.nomad.Nodes().List(nil)
	if err != nil {
		return "unknown: " + err.Error()
	}
	for _, n := range nodes {
		if n.Name == name {
			return n.Status
		}
	}
	return "not listed"
}

func (f *injector) clientAgent(fault string) (int, bool) {
	n := f.c.ClientAgents()
	if n == 0 {
		f.hist.Add("fault %s: no client-only Nomad agent", fault)
		return 0, false
	}
	return f.rng.Intn(n), true
}

// drainNode drains one node through Nomad's API with a deadline of 5 to
// 20 s (its allocations migrate; at the deadline Nomad stops the rest),
// waits until the drain is over, and marks the node eligible again.
// Nomad does not migrate a batch job's allocation: it runs on until the
// deadline, then Nomad stops it and places no replacement (Nomad's
// documented drain behavior for batch jobs), so the drain ends the task
// as an operator would: the jobs it did that to count as told to end
// (endDrained).
func (f *injector) drainNode() {
	if len(f.c.NodeIDs) == 0 {
		f.hist.Add("fault drain-node: no node")
		return
	}
	id := f.c.NodeIDs[f.rng.Intn(len(f.c.NodeIDs))]
	deadline := time.Duration(5+f.rng.Intn(16)) * time.Second
	f.faults++
	f.hist.Add("fault drain-node: draining node %s with a %s deadline", short(id), deadline)
	_, err := f.nomad.Nodes().UpdateDrainOpts(id, &nomadapi.DrainOptions{
		DrainSpec: &nomadapi.DrainSpec{Deadline: deadline, IgnoreSystemJobs: true}}, nil)
	if err == nil {
		err = f.waitDrained(id, deadline+30*time.Second)
	}
	f.endDrained(id)
	err = errors.Join(err, f.markEligible(id, 30*time.Second))
	f.hist.Add("fault drain-node: node %s eligible again: %s", short(id), errString(err))
}

// waitDrained polls until node id has no drain strategy left.
func (f *injector) waitDrained(id string, limit time.Duration) error {
	return pollUntil(limit, func() error {
		n, _, err := f.nomad.Nodes().Info(id, nil)
		switch {
		case err != nil:
			return fmt.Errorf("reading node %s: %w", short(id), err)
		case n.DrainStrategy != nil:
			return fmt.Errorf("node %s still draining", short(id))
		}
		return nil
	})
}

// markEligible ends any drain of node id and marks it eligible, retrying
// while Nomad does not answer (the fault must not leave it ineligible).
func (f *injector) markEligible(id string, limit time.Duration) error {
	return pollUntil(limit, func() error {
		_, err := f.nomad.Nodes().UpdateDrainOpts(id, &nomadapi.DrainOptions{MarkEligible: true}, nil)
		if err != nil {
			return fmt.Errorf("ending the drain of node %s: %w", short(id), err)
		}
		if _, err := f.nomad.Nodes().ToggleEligibility(id, true, nil); err != nil {
			return fmt.Errorf("marking node %s eligible: %w", short(id), err)
		}
		return nil
	})
}

// pollUntil calls cond every 500 ms until it succeeds or limit passes.
func pollUntil(limit time.Duration, cond func() error) error {
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	for {
		err := cond()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("after %s: %w", limit, err)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// endDrained tells the driver which jobs the drain of node id ended:
// those with an allocation there that Nomad stopped to migrate it. The
// soak's jobs are batch jobs, which Nomad does not migrate: they end.
// Nomad's drainer may clear the node's drain a moment before it marks
// the last allocations, so it looks for 5 s (Nomad's collector waits 30
// s before it takes an ended job).
func (f *injector) endDrained(id string) {
	until := time.Now().Add(5 * time.Second)
	for {
		allocs, _, err := f.nomad.Nodes().Allocations(id, nil)
		if err != nil {
			f.hist.Add("fault drain-node: listing node %s's allocations: %v", short(id), err)
		}
		for _, k := range drainStopped(allocs) {
			f.chk.driver.endedByDrain(k)
		}
		if time.Now().After(until) {
			return
		}
		time.Sleep(500 * time.Millisecond) // the look's pace, not synchronization
	}
}

// drainStopped returns the jobs (namespace/ID, sorted, once each) with an
// allocation that Nomad stopped, or marked to stop, to migrate it off a
// draining node (the drainer marks it before the scheduler stops it).
func drainStopped(allocs []*nomadapi.Allocation) []string {
	seen := map[string]bool{}
	var out []string
	for _, a := range allocs {
		stopped := a.DesiredStatus == nomadapi.AllocDesiredStatusStop && strings.Contains(a.DesiredDescription, "migrat")
		marked := a.DesiredTransition.Migrate != nil && *a.DesiredTransition.Migrate
		if !stopped && !marked {
			continue
		}
		if k := a.Namespace + "/" + a.JobID; !seen[k] {
			seen[k] = true
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}
