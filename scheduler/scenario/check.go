package scenario

import (
	"fmt"
	"slices"
	"strings"

	"github.com/gpushare/nomad-gpushare/scheduler/cluster"
	"github.com/gpushare/nomad-gpushare/scheduler/plan"
)

// CheckPolicy compares the outcome of a run with every expectation and the
// stability and churn rules; each mismatch is one error naming the file and
// line of the expectation. When firstFit is false (a run with another
// placement policy), the placement-dependent parts are left out:
// expectations marked firstfit, and the node and GPUs of "expect place".
func (sc *Scenario) CheckPolicy(out *Outcome, firstFit bool) []error {
	var errs []error
	for _, e := range sc.Expects {
		if e.FirstFitOnly && !firstFit {
			continue
		}
		if !firstFit {
			e.Node, e.GPUs, e.HasGPU = "", nil, false
		}
		if err := checkOne(e, out); err != nil {
			errs = append(errs, fmt.Errorf("%s:%d: expect %s: %w", sc.File, e.Line, e.What, err))
		}
	}
	errs = append(errs, sc.Stability(out)...)
	return append(errs, sc.Churn(out)...)
}

// checkOne checks one expectation against the outcome.
func checkOne(e Expect, out *Outcome) error {
	switch e.What {
	case "deserved", "suspend", "shrink", "grow", "place", "unplaced", "unplaceable", "actions", "gangwait":
		if e.Round > len(out.Rounds) {
			return fmt.Errorf("round %d not run (rounds %d)", e.Round, len(out.Rounds))
		}
		return checkRound(e, &out.Rounds[e.Round-1])
	case "running":
		var got []string
		for _, a := range out.Final.Allocations {
			got = append(got, a.Job)
		}
		return sameSet("running at the end", got, e.Jobs, nil)
	case "waiting":
		var got []string
		for _, w := range out.Final.Pending {
			got = append(got, w.Job)
		}
		return sameSet("waiting at the end", got, e.Jobs, nil)
	case "usage":
		return checkUsage(e, out.Final)
	case "stable":
		last := &out.Rounds[len(out.Rounds)-1]
		if len(last.Result.Actions) > 0 || len(last.Result.Grow) > 0 {
			return fmt.Errorf("last round still plans:\n%s", describe(last))
		}
		return nil
	}
	return fmt.Errorf("unknown expectation")
}

// checkRound checks an expectation about the plan of one round.
func checkRound(e Expect, rd *Round) error {
	switch e.What {
	case "deserved":
		for _, s := range rd.Result.Shares {
			if s.Name == e.Name {
				if s.Deserved != e.Amount {
					return fmt.Errorf("project %s deserves %s in round %d, want %s", e.Name, s.Deserved, e.Round, e.Amount)
				}
				return nil
			}
		}
		for _, s := range rd.Result.Departments {
			if s.Name == e.Name {
				if s.Deserved != e.Amount {
					return fmt.Errorf("department %s deserves %s in round %d, want %s", e.Name, s.Deserved, e.Round, e.Amount)
				}
				return nil
			}
		}
		return fmt.Errorf("no project or department %s", e.Name)
	case "suspend":
		return sameSet("suspended in round "+fmt.Sprint(e.Round), jobsOf(rd, plan.Suspend), e.Jobs, rd)
	case "shrink":
		return sameSet("shrunk in round "+fmt.Sprint(e.Round), jobsOf(rd, plan.Shrink), e.Jobs, rd)
	case "grow":
		var got []string
		for _, g := range rd.Result.Grow {
			got = append(got, g.Job)
		}
		return sameSet("grown in round "+fmt.Sprint(e.Round), got, e.Jobs, rd)
	case "gangwait":
		var got []string
		for _, g := range rd.Result.GangsWaiting {
			got = append(got, g.Job)
		}
		return sameSet("gangs waiting whole in round "+fmt.Sprint(e.Round), got, e.Jobs, rd)
	case "place":
		for _, a := range rd.Result.Actions {
			if a.Kind == plan.Place && a.Job == e.Name && (e.Group == "" || a.Group == e.Group) &&
				(e.Node == "" || a.Node == e.Node) && (!e.HasGPU || slices.Equal(a.GPUs, e.GPUs)) {
				return nil
			}
		}
		return fmt.Errorf("no matching placement of %s in round %d; plan:\n%s", e.Name, e.Round, describe(rd))
	case "unplaced":
		for _, u := range rd.Result.Unplaced {
			if rd.Snapshot.Pending[u.Workload].Job == e.Name {
				return nil
			}
		}
		return fmt.Errorf("%s is not left waiting in round %d; plan:\n%s", e.Name, e.Round, describe(rd))
	case "unplaceable":
		for _, u := range rd.Result.Unplaceable {
			if rd.Snapshot.Pending[u.Workload].Job == e.Name {
				return nil
			}
		}
		return fmt.Errorf("%s is not unplaceable in round %d; plan:\n%s", e.Name, e.Round, describe(rd))
	case "actions":
		if n := len(rd.Result.Actions); n != e.Count {
			return fmt.Errorf("%d actions in round %d, want %d; plan:\n%s", n, e.Round, e.Count, describe(rd))
		}
		return nil
	}
	return fmt.Errorf("unknown expectation")
}

// checkUsage checks what a project holds after the last round.
// jobsOf lists the jobs of the round's actions of kind k.
func jobsOf(rd *Round, k plan.Kind) []string {
	var got []string
	for _, a := range rd.Result.Actions {
		if a.Kind == k {
			got = append(got, a.Job)
		}
	}
	return got
}

func checkUsage(e Expect, final *cluster.Snapshot) error {
	if !slices.ContainsFunc(final.Projects, func(p cluster.Project) bool { return p.Name == e.Name }) {
		return fmt.Errorf("no project %s", e.Name)
	}
	var used cluster.Shares
	for _, a := range final.Allocations {
		if a.Project == e.Name {
			used += a.Ask.GPUShares()
		}
	}
	if used != e.Amount {
		return fmt.Errorf("project %s holds %s at the end, want %s", e.Name, used, e.Amount)
	}
	return nil
}

func sameSet(what string, got, want []string, rd *Round) error {
	g, w := slices.Clone(got), slices.Clone(want)
	slices.Sort(g)
	slices.Sort(w)
	g, w = slices.Compact(g), slices.Compact(w)
	if slices.Equal(g, w) {
		return nil
	}
	msg := fmt.Sprintf("%s: got %v, want %v", what, g, w)
	if rd != nil {
		msg += "; plan:\n" + describe(rd)
	}
	return fmt.Errorf("%s", msg)
}

// describe renders a round's plan for failure messages.
func describe(rd *Round) string {
	var b strings.Builder
	for _, a := range rd.Result.Actions {
		fmt.Fprintf(&b, "\t%s\n", a)
	}
	for _, u := range rd.Result.Unplaced {
		w := rd.Snapshot.Pending[u.Workload]
		fmt.Fprintf(&b, "\twaiting %s/%s: %s\n", w.Job, w.Group, u.Reason)
	}
	for _, u := range rd.Result.Unplaceable {
		w := rd.Snapshot.Pending[u.Workload]
		fmt.Fprintf(&b, "\tunplaceable %s/%s: %s\n", w.Job, w.Group, u.Reason)
	}
	for _, g := range rd.Result.Grow {
		fmt.Fprintf(&b, "\tgrow %s/%s by %d on %v (project %s)\n", g.Job, g.Group, g.Count, g.Places, g.Project)
	}
	for _, g := range rd.Result.Grow {
		fmt.Fprintf(&b, "\tgrow %s/%s by %d on %v (project %s)\n", g.Job, g.Group, g.Count, g.Places, g.Project)
	}
	for _, g := range rd.Result.GangsWaiting {
		fmt.Fprintf(&b, "\tgang %s (project %s): %s\n", g.Job, g.Project, g.Reason)
	}
	for _, s := range rd.Result.Shares {
		fmt.Fprintf(&b, "\tproject %s: guaranteed %s deserved %s usage %s -> %s\n", s.Name, s.Guaranteed, s.Deserved, s.Usage, s.Planned)
	}
	return b.String()
}
