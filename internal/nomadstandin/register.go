package nomadstandin

import (
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/hashicorp/nomad/api"
)

// Registration is a job registration the stand-in applied: when, which
// job (namespace/ID) and whether it stopped the job.
type Registration struct {
	At   time.Time
	Job  string
	Stop bool
}

// Registrations returns the job registrations applied so far, oldest
// first.
func (s *Server) Registrations() []Registration {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return append([]Registration(nil), s.registered...)
}

// register applies a registration of a job the stand-in has, as Nomad
// does for the quota service's stop (Stop set) and resume: it enforces
// the job modify index when asked, makes a new version, and moves the
// job's allocations to stopped, or back to running where they were
// (Nomad would place new ones; the stand-in has no scheduler, and the
// GPUs a stop freed stay free). It publishes the job's and allocations'
// events. s.mu is held; the error is Nomad's answer to a refused write.
func (s *Server) register(req *api.JobRegisterRequest, idx uint64) error {
	j := req.Job
	if j.ID == nil || j.Namespace == nil {
		return fmt.Errorf("job without ID or namespace")
	}
	key := jobKey(j)
	old := s.jobs[key]
	if old == nil {
		return fmt.Errorf("the stand-in registers only jobs it has; %s is not one", key)
	}
	if req.EnforceIndex && req.JobModifyIndex != *old.JobModifyIndex {
		return fmt.Errorf("enforcing job modify index %d: job exists with conflicting job modify index: %d", req.JobModifyIndex, *old.JobModifyIndex)
	}
	next := *j
	stop := next.Stop != nil && *next.Stop
	status := "running"
	if stop {
		status = "dead"
	}
	next.Status, next.Stop = ptr(status), ptr(stop)
	next.Version = ptr(*old.Version + 1)
	next.CreateIndex, next.ModifyIndex, next.JobModifyIndex = old.CreateIndex, ptr(idx), ptr(idx)
	next.SubmitTime = ptr(time.Now().UnixNano())
	s.versions[key] = append([]*api.Job{&next}, s.versionsOf(key)...)
	s.jobs[key] = &next
	s.tables["jobs"] = idx
	s.publish(event{Topic: api.TopicJob, Type: "JobRegistered", Key: *next.ID, Namespace: *next.Namespace, Payload: map[string]any{"Job": &next}})
	for _, i := range s.w.jobAllocs[key] {
		s.moveAlloc(i, stop, *next.Version, idx)
	}
	s.registered = append(s.registered, Registration{At: time.Now(), Job: key, Stop: stop})
	return nil
}

// moveAlloc stops allocation i, or runs it again at version, and
// publishes it; s.mu is held.
func (s *Server) moveAlloc(i int, stop bool, version, idx uint64) {
	a := s.w.allocs[i]
	if stop {
		a.DesiredStatus, a.ClientStatus, a.ClientDescription = "stop", "complete", "All tasks have completed"
	} else {
		a.DesiredStatus, a.ClientStatus, a.ClientDescription = "run", "running", "Tasks are running"
		a.JobVersion, a.CreateTime = version, time.Now().UnixNano()
	}
	a.ModifyIndex, a.ModifyTime = idx, time.Now().UnixNano()
	s.tables["allocs"] = idx
	s.encodeAlloc(i)
	s.publish(event{Topic: api.TopicAllocation, Type: "AllocationUpdated", Key: a.ID, Namespace: a.Namespace,
		FilterKeys: []string{a.JobID}, Payload: map[string]any{"Allocation": fullAlloc(a)}})
}

// versionsOf is job key's versions, newest first; s.mu is held.
func (s *Server) versionsOf(key string) []*api.Job {
	if v, ok := s.versions[key]; ok {
		return v
	}
	if j := s.jobs[key]; j != nil {
		return []*api.Job{j}
	}
	return nil
}

// tag applies a version tag's write (PUT /v1/job/:id/versions/:name/tag,
// api.TagVersionRequest) or removal (DELETE), as Nomad does: a version
// carries at most one tag, a name at most one version, and removing a
// name no version carries is "not found". s.mu is held.
func (s *Server) tag(r *http.Request, key, name string, req *api.TagVersionRequest) (status int, err error) {
	versions := s.versionsOf(key)
	if len(versions) == 0 {
		return http.StatusNotFound, fmt.Errorf("job %s not found", key)
	}
	tagged := slices.IndexFunc(versions, func(j *api.Job) bool { return j.VersionTag != nil && j.VersionTag.Name == name })
	if r.Method == http.MethodDelete {
		if tagged < 0 {
			return http.StatusNotFound, fmt.Errorf("tag %q not found", name)
		}
		v := *versions[tagged]
		v.VersionTag = nil
		versions[tagged] = &v
		s.versions[key], s.jobs[key] = versions, versions[0]
		return http.StatusOK, nil
	}
	at := slices.IndexFunc(versions, func(j *api.Job) bool { return *j.Version == req.Version })
	switch {
	case at < 0:
		return http.StatusNotFound, fmt.Errorf("version %d of job %s not found", req.Version, key)
	case tagged >= 0 && tagged != at:
		return http.StatusBadRequest, fmt.Errorf("tag %q already exists on a different version of job %s", name, key)
	}
	v := *versions[at]
	v.VersionTag = &api.JobVersionTag{Name: name, Description: req.Description, TaggedTime: time.Now().UnixNano()}
	versions[at] = &v
	s.versions[key], s.jobs[key] = versions, versions[0]
	return http.StatusOK, nil
}
