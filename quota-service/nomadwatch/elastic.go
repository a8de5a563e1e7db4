package nomadwatch

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/gpushare/nomad-gpushare/quota-service/state"
	"github.com/gpushare/nomad-gpushare/scheduler/cluster"
	nomadapi "github.com/hashicorp/nomad/api"
)

// MetaMinCount is the task group meta key that makes a group elastic: it
// runs between this many instances and its count, and the service shrinks
// it toward this minimum before it suspends any whole job (docs/design.md,
// Gangs and elastic groups).
const MetaMinCount = "gpushare.min_count"

// minCounts reads MetaMinCount of every task group of job that sets it,
// raised to the group's scaling policy minimum where that is higher.
// A value that is not a whole number from 1 up is an error naming the
// group; the group is then not elastic.
func minCounts(job *nomadapi.Job) (map[string]int, error) {
	var out map[string]int
	var errs []string
	for _, tg := range job.TaskGroups {
		v, ok := tg.Meta[MetaMinCount]
		if !ok || tg.Name == nil {
			continue
		}
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil || n < 1 {
			errs = append(errs, fmt.Sprintf("task group %q meta %s = %q: set it to a whole number from 1 up to the group's count", *tg.Name, MetaMinCount, v))
			continue
		}
		if tg.Scaling != nil && tg.Scaling.Min != nil && int(*tg.Scaling.Min) > n {
			// Nomad refuses a scale below the group's scaling policy.
			n = int(*tg.Scaling.Min)
		}
		if out == nil {
			out = map[string]int{}
		}
		out[*tg.Name] = n
	}
	if len(errs) > 0 {
		return out, fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return out, nil
}

// instanceOf is the index of an allocation in its task group, from its
// name "job.group[N]"; 0 where the name has none.
func instanceOf(name string) int {
	open := strings.LastIndexByte(name, '[')
	if open < 0 || !strings.HasSuffix(name, "]") {
		return 0
	}
	n, err := strconv.Atoi(name[open+1 : len(name)-1])
	if err != nil || n < 0 {
		return 0
	}
	return n
}

// dropLeaving takes out of the snapshot the instances Nomad is stopping
// because their elastic group's count fell below them: after a shrink (or
// the owner's scale down) and before Nomad has stopped them, the group
// runs more instances than its count, and Nomad stops the highest (by
// instance index) of them. Like the allocations of a stopped job they are
// a stop in flight, no usage to make room from (docs/design.md, Gangs and
// elastic groups): counted, an instance the last shrink stopped would
// look like one more to shrink for the same room. A group whose live
// instances run different versions of the job is being deployed: it runs
// above its count because of its canaries (which take existing instance
// indexes) or a rolling update, and Nomad stops none of them for the
// count, so nothing of it is left out.
func (a *assembler) dropLeaving() {
	type groupKey struct{ job, group string }
	var groups map[groupKey][]cluster.GroupMember
	for i := range a.snap.Allocations {
		al := &a.snap.Allocations[i]
		if al.MinCount <= 0 {
			continue
		}
		if groups == nil {
			groups = map[groupKey][]cluster.GroupMember{}
		}
		g := groupKey{al.Job, al.Group}
		if !slices.ContainsFunc(groups[g], func(m cluster.GroupMember) bool { return m.ID == al.ID }) {
			groups[g] = append(groups[g], cluster.MemberOf(al))
		}
	}
	var leaving map[string]bool
	for g, members := range groups {
		if a.mixedVersions(members) {
			continue
		}
		info := a.v.Jobs[g.job]
		count, ok := 0, false
		if info != nil {
			count, ok = info.Groups[g.group]
		}
		if !ok || len(members) <= count {
			continue
		}
		slices.SortFunc(members, cluster.CompareStopOrder)
		if leaving == nil {
			leaving = map[string]bool{}
		}
		for _, m := range members[:len(members)-count] {
			leaving[m.ID] = true
		}
	}
	if leaving != nil {
		// The list may be the Builder's, shared with other Views: a
		// new one leaves it as it was.
		a.snap.Allocations = slices.DeleteFunc(slices.Clone(a.snap.Allocations), func(al cluster.Allocation) bool { return leaving[al.ID] })
	}
}

// mixedVersions reports whether the members of an elastic group run more
// than one version of their job.
func (a *assembler) mixedVersions(members []cluster.GroupMember) bool {
	for _, m := range members[1:] {
		if a.elasticVersions[m.ID] != a.elasticVersions[members[0].ID] {
			return true
		}
	}
	return false
}

// ShrinkVerdict is what Nomad's state says of a shrink record.
type ShrinkVerdict uint8

const (
	// ShrinkStands: Nomad shows the job as the service's last scale left
	// it; the shrunk instances may grow back.
	ShrinkStands ShrinkVerdict = iota + 1
	// ShrinkLanded: the scale in flight landed (the job is one version on,
	// with the recorded counts); the record is to be marked.
	ShrinkLanded
	// ShrinkNotMade: the scale in flight never reached Nomad; the record
	// is to be dropped.
	ShrinkNotMade
	// ShrinkOwnerChanged: the job's owner changed, scaled, stopped or
	// purged it since; the claim ends and the groups keep their count.
	ShrinkOwnerChanged
)

// ShrinkRecord is a shrink record with its verdict.
type ShrinkRecord struct {
	state.Shrink
	Verdict ShrinkVerdict
	// Why explains ShrinkOwnerChanged and ShrinkNotMade.
	Why string
}

// Stands says whether the service's claim holds: its groups may grow.
func (r *ShrinkRecord) Stands() bool { return r.Verdict == ShrinkStands || r.Verdict == ShrinkLanded }

// judgeShrink reads rec against the job as Nomad shows it (nil: gone).
func judgeShrink(rec state.Shrink, info *JobInfo) *ShrinkRecord {
	r := &ShrinkRecord{Shrink: rec}
	switch {
	case info == nil:
		r.Verdict, r.Why = ShrinkOwnerChanged, "the job is gone from Nomad"
	case info.Stop || info.Status == "dead":
		r.Verdict, r.Why = ShrinkOwnerChanged, "the job is stopped or finished"
	case info.JobModifyIndex == rec.JobModifyIndex && rec.Phase == state.ShrinkHeld:
		r.Verdict = ShrinkStands
	case info.JobModifyIndex == rec.JobModifyIndex:
		r.Verdict, r.Why = ShrinkNotMade, "the scale never reached Nomad"
	case rec.Phase == state.ShrinkScaling && info.Version == rec.Version+1 && countsAre(info, rec):
		r.Verdict = ShrinkLanded
	default:
		r.Verdict, r.Why = ShrinkOwnerChanged, fmt.Sprintf("the job was changed since the service scaled it (job modify index %d, recorded %d): its counts are its owner's", info.JobModifyIndex, rec.JobModifyIndex)
	}
	return r
}

// countsAre says whether every group of rec runs at its recorded count in
// info.
func countsAre(info *JobInfo, rec state.Shrink) bool {
	for name, g := range rec.Groups {
		if c, ok := info.Groups[name]; !ok || c != g.Now {
			return false
		}
	}
	return true
}

// judgeShrinks gives every shrink record its verdict and reports those
// the service does not act on.
func (a *assembler) judgeShrinks() {
	a.v.RecordErrors = append(a.v.RecordErrors, a.in.ShrinkErrors...)
	for _, rec := range a.in.Shrinks {
		a.v.Shrinks[rec.Key()] = judgeShrink(rec, a.v.Jobs[rec.Key()])
	}
}

// addShrunkDemand adds, for a job whose shrink stands, each shrunk group's
// missing instances as Shrunk pending work: no demand, they grow back
// when nothing else waits.
func (a *assembler) addShrunkDemand(key string, spec *nomadapi.Job, submit int64) {
	r := a.v.Shrinks[key]
	if r == nil || !r.Stands() {
		return
	}
	info := a.v.Jobs[key]
	for _, tg := range spec.TaskGroups {
		if tg.Name == nil {
			continue
		}
		if n := r.Shrunk(*tg.Name); n > 0 {
			a.addPendingGroup(key, tg, n, submit, pendingKind{gang: info.Gang, shrunk: true, minCount: info.MinCounts[*tg.Name]})
		}
	}
}
