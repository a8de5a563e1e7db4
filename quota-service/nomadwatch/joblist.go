package nomadwatch

import (
	"github.com/gpushare/nomad-gpushare/scheduler/cluster"
	nomadapi "github.com/hashicorp/nomad/api"
)

// jobList is a listing of jobs with each job's Key: a Build's passes
// over 11,000 jobs would otherwise join each job's namespace and ID again
// in every one. The Builder's memo keeps one, changed job by job as the
// cache's jobs change (put, drop), instead of making it again every
// View.
type jobList struct {
	stubs []*nomadapi.JobListStub
	// keys are the Keys of stubs, in order; byKey the stubs by Key, and
	// pos their positions (kept by put and drop only).
	keys  []string
	byKey map[string]*nomadapi.JobListStub
	pos   map[string]int
	// stopped are the Keys of the stopped jobs (Stop set).
	stopped map[string]bool
}

// newJobList is an empty list with room for n jobs.
func newJobList(n int) jobList {
	return jobList{stubs: make([]*nomadapi.JobListStub, 0, n), keys: make([]string, 0, n),
		byKey: make(map[string]*nomadapi.JobListStub, n), pos: make(map[string]int, n), stopped: map[string]bool{}}
}

// put adds job j (Key key) or replaces its listing.
func (l *jobList) put(key string, j *nomadapi.JobListStub) {
	if j.Stop {
		l.stopped[key] = true
	} else {
		delete(l.stopped, key)
	}
	if i, ok := l.pos[key]; ok {
		l.stubs[i], l.byKey[key] = j, j
		return
	}
	l.pos[key] = len(l.stubs)
	l.stubs, l.keys, l.byKey[key] = append(l.stubs, j), append(l.keys, key), j
}

// drop removes job key, if listed; the last job takes its place.
func (l *jobList) drop(key string) {
	i, ok := l.pos[key]
	if !ok {
		return
	}
	last := len(l.stubs) - 1
	l.stubs[i], l.keys[i] = l.stubs[last], l.keys[last]
	l.pos[l.keys[i]] = i
	l.stubs[last], l.keys[last] = nil, ""
	l.stubs, l.keys = l.stubs[:last], l.keys[:last]
	delete(l.pos, key)
	delete(l.byKey, key)
	delete(l.stopped, key)
}

// listJobs keys stubs.
func listJobs(stubs []*nomadapi.JobListStub) jobList {
	l := jobList{stubs: stubs, keys: make([]string, len(stubs)), byKey: make(map[string]*nomadapi.JobListStub, len(stubs)), stopped: map[string]bool{}}
	for i, j := range stubs {
		key := Key(j.Namespace, j.ID)
		l.keys[i], l.byKey[key] = key, j
		if j.Stop {
			l.stopped[key] = true
		}
	}
	return l
}

// listed is the Inputs' jobs with their Keys: as viewInputs made them,
// else made from Jobs (Inputs built by hand).
func (in *Inputs) listed() jobList {
	if in.jobs.byKey == nil || !cluster.SameList(in.jobs.stubs, in.Jobs) {
		in.jobs = listJobs(in.Jobs)
	}
	return in.jobs
}
