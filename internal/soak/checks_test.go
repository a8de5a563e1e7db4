package soak

import (
	"strings"
	"testing"

	nomadapi "github.com/hashicorp/nomad/api"

	"github.com/gpushare/nomad-gpushare/quota-service/state"
)

func TestOverbookingFindsEachConflict(t *testing.T) {
	run := func(id, ns, node string, whole []string, shares map[string]int, inst ...string) alloc {
		return alloc{ID: id, Namespace: ns, Job: "j-" + id, Node: node, Desired: "run", Client: "running", Whole: whole, Shares: shares, Instances: inst}
	}
	cases := []struct {
		name   string
		allocs []alloc
		want   string // "" none
	}{
		{"apart", []alloc{run("a1", "x", "n1", []string{"G1"}, nil, "G1"), run("a2", "y", "n1", []string{"G2"}, nil, "G2"),
			run("a3", "y", "n1", nil, map[string]int{"G3": 60}, "G3-s01"), run("a4", "x", "n1", nil, map[string]int{"G3": 40}, "G3-s02")}, ""},
		{"same GPU on two nodes is two GPUs", []alloc{run("a1", "x", "n1", []string{"G1"}, nil, "G1"), run("a2", "x", "n2", []string{"G1"}, nil, "G1")}, ""},
		{"instance twice", []alloc{run("a1", "x", "n1", nil, map[string]int{"G1": 1}, "G1-s01"), run("a2", "y", "n1", nil, map[string]int{"G1": 1}, "G1-s01")}, "instance G1-s01"},
		{"whole twice", []alloc{run("a1", "x", "n1", []string{"G1"}, nil, "G1"), run("a2", "y", "n1", []string{"G1"}, nil)}, "held whole by"},
		{"whole and shares", []alloc{run("a1", "x", "n1", []string{"G1"}, nil, "G1"), run("a2", "y", "n1", nil, map[string]int{"G1": 10}, "G1-s05")}, "and in shares"},
		{"shares over 100", []alloc{run("a1", "x", "n1", nil, map[string]int{"G1": 70}), run("a2", "y", "n1", nil, map[string]int{"G1": 40})}, "110 share units"},
	}
	for _, tc := range cases {
		got := overbooking(tc.allocs)
		switch {
		case tc.want == "" && len(got) > 0:
			t.Errorf("%s: reported %v", tc.name, got)
		case tc.want != "" && (len(got) == 0 || !strings.Contains(strings.Join(got, "\n"), tc.want)):
			t.Errorf("%s: got %v, want a line with %q", tc.name, got, tc.want)
		}
	}
	// An allocation Nomad stops (or that ended) holds nothing in its books.
	stopping := run("a2", "y", "n1", []string{"G1"}, nil, "G1")
	stopping.Desired = "stop"
	if got := overbooking([]alloc{run("a1", "x", "n1", []string{"G1"}, nil, "G1"), stopping}); len(got) > 0 {
		t.Errorf("a stopping allocation counted: %v", got)
	}
}

func TestStarvedOnlyUnderGuaranteeAndPlaceable(t *testing.T) {
	nodes := map[string][]string{"n1": {"G1", "G2"}}
	held := func(ns string, whole []string, shares map[string]int) alloc {
		return alloc{ID: ns + "-a", Namespace: ns, Node: "n1", Desired: "run", Client: "running", Whole: whole, Shares: shares}
	}
	one := demand{Namespace: "a", Job: "w", Whole: 1}
	quarter := demand{Namespace: "a", Job: "s", Shares: 25}
	// b holds both GPUs above its guarantee: a, under its own, is owed both.
	allocs := []alloc{held("b", []string{"G1", "G2"}, nil)}
	if got := starved(1, 0, []demand{one, quarter}, nodes, allocs, map[string]bool{"a": true, "b": false}); len(got) != 2 {
		t.Errorf("over-quota b: owed %v, want both", got)
	}
	// b within its guarantee: nothing placeable.
	if got := starved(1, 0, []demand{one, quarter}, nodes, allocs, map[string]bool{"a": true, "b": true}); len(got) != 0 {
		t.Errorf("protected b: owed %v, want none", got)
	}
	// a at its guarantee: owed nothing.
	if got := starved(1, 1, []demand{one}, nodes, nil, map[string]bool{"a": true}); len(got) != 0 {
		t.Errorf("a at its guarantee: owed %v", got)
	}
	// protected shares leave room for a quarter, not for a whole GPU.
	allocs = []alloc{held("b", []string{"G1"}, nil), held("c", nil, map[string]int{"G2": 75})}
	got := starved(2, 0, []demand{one, quarter}, nodes, allocs, map[string]bool{"a": true, "b": true, "c": true})
	if len(got) != 1 || got[0].Job != "s" {
		t.Errorf("fragmented: owed %v, want the quarter only", got)
	}
}

func TestSummaryLine(t *testing.T) {
	r := Result{Seconds: 150.4, Jobs: 40, Faults: 9, Suspensions: 7, Resumes: 5, Violations: []string{"x", "y"}, Known: []string{"y"}, MaxRestore: 12500 * 1e6,
		MaxRSSService: 31.25, MaxRSSPlugin: 40, ServiceWrites: 80, WritesInTenure: 78}
	want := "soak seconds=150 jobs=40 faults=9 suspensions=7 resumes=5 violations=2 max_restore_s=12.5 known_findings=1" +
		" max_rss_service_mib=31.2 max_rss_plugin_mib=40.0 service_writes=80 writes_in_tenure=78"
	if got := r.Summary(); got != want {
		t.Errorf("summary %q, want %q", got, want)
	}
}

func TestCheckLost(t *testing.T) {
	snap := func(state ownerState, seq uint64, busy bool) jobSnap {
		return jobSnap{ns: "a", id: "j", kind: kind{name: "whole1"}, state: state, seq: seq, busy: busy}
	}
	stub := func(stop bool) map[string]*nomadapi.JobListStub {
		return map[string]*nomadapi.JobListStub{"a/j": {Namespace: "a", ID: "j", Stop: stop, Status: "running"}}
	}
	rec := map[string]state.Suspension{"a/j": {Namespace: "a", Job: "j"}}
	none := map[string]state.Suspension{}
	cases := []struct {
		name          string
		before, after jobSnap
		jobs          map[string]*nomadapi.JobListStub
		recs1, recs2  map[string]state.Suspension
		want          string // "" no violation
	}{
		{"running", snap(active, 1, false), snap(active, 1, false), stub(false), none, none, ""},
		{"suspended with a record", snap(active, 1, false), snap(active, 1, false), stub(true), none, rec, ""},
		{"stopped with no record", snap(active, 1, false), snap(active, 1, false), stub(true), none, none, "stopped with no suspension record"},
		{"vanished", snap(active, 1, false), snap(active, 1, false), nil, none, none, "vanished"},
		{"finished and collected", snap(finished, 1, false), snap(finished, 1, false), nil, none, none, ""},
		{"owner stopped it", snap(ownerStopped, 1, false), snap(ownerStopped, 1, false), stub(true), none, none, ""},
		{"owner stopped it but it runs", snap(ownerStopped, 1, false), snap(ownerStopped, 1, false), stub(false), none, none, "by its owner but is registered"},
		{"owner purged it but it runs", snap(purged, 1, false), snap(purged, 1, false), stub(false), none, none, "by its owner but is registered"},
		{"an owner action during the poll", snap(active, 1, false), snap(active, 3, false), stub(true), none, none, ""},
		{"an owner action in flight", snap(active, 1, true), snap(active, 1, true), stub(true), none, none, ""},
	}
	for _, tc := range cases {
		c := &checker{hist: newHistory(100, nil), lost: map[string]bool{}}
		c.checkLost(map[string]jobSnap{"a/j": tc.before}, map[string]jobSnap{"a/j": tc.after}, tc.jobs, tc.recs1, tc.recs2)
		switch {
		case tc.want == "" && len(c.violations) > 0:
			t.Errorf("%s: violations %v", tc.name, c.violations)
		case tc.want != "" && (len(c.violations) != 1 || !strings.Contains(c.violations[0], tc.want)):
			t.Errorf("%s: violations %v, want one with %q", tc.name, c.violations, tc.want)
		}
		// Reported once until it is fine again.
		c.checkLost(map[string]jobSnap{"a/j": tc.before}, map[string]jobSnap{"a/j": tc.after}, tc.jobs, tc.recs1, tc.recs2)
		if tc.want != "" && len(c.violations) != 1 {
			t.Errorf("%s: reported %d times in two polls, want once", tc.name, len(c.violations))
		}
	}
}

func TestKnownFindingNamesOnlyItsCases(t *testing.T) {
	cases := map[string]string{
		"lost job: team-b/j014 (elastic, active) is stopped with no suspension record (status dead); the service's last entry: owner-stopped by soak-b: the job was stopped again or changed while stopped (job modify index 252, the service's stop 183); it stays stopped":    "",
		"lost job: team-b/j015 (whole1, active) is stopped with no suspension record (status dead); the service's last entry: owner-stopped by soak-b: the job was stopped again or changed while stopped (job modify index 252, the service's stop 183); it stays stopped":     "",
		"lost job: team-b/j048 (whole1, active) is stopped with no suspension record (status dead); the service's last entry: owner-stopped by soak-b: the service's tag gpushare-suspended-for-team-a-20261127T194130Z was removed from the stopped version; it stays stopped": "",
		"quota-service instance soak-b crashed: exit status 2; last lines of its log:\npanic: runtime error: invalid memory address or nil pointer dereference\ngithub.com/gpushare/nomad-gpushare/quota-service/nomadwatch.(*assembler).adoptTagged(0x2e5745222600)":           "",
		"lost job: team-b/j016 (whole1, active) is stopped with no suspension record (status dead)": "",
		"overbooked: GPU G1 on node n1 held whole by [a b]":                                         "",
	}
	for msg, want := range cases {
		if got := knownFinding(msg); got != want {
			t.Errorf("knownFinding(%.60q...) = %q, want %q", msg, got, want)
		}
	}
}
