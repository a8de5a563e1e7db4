package nomadwatch

import (
	"github.com/gpushare/nomad-gpushare/scheduler/cluster"
	nomadapi "github.com/hashicorp/nomad/api"
)

// jobList is a listing of jobs with each job's Key, made once per View:
// a Build's passes over 11,000 jobs would otherwise join each job's
// namespace and ID again in every one.
type jobList struct {
	stubs []*nomadapi.JobListStub
	// keys are the Keys of stubs, in order; byKey the stubs by Key.
	keys  []string
	byKey map[string]*nomadapi.JobListStub
}

// listJobs keys stubs.
func listJobs(stubs []*nomadapi.JobListStub) jobList {
	l := jobList{stubs: stubs, keys: make([]string, len(stubs)), byKey: make(map[string]*nomadapi.JobListStub, len(stubs))}
	for i, j := range stubs {
		key := Key(j.Namespace, j.ID)
		l.keys[i], l.byKey[key] = key, j
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
