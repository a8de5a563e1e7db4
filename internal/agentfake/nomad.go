// Package agentfake serves in-memory stand-ins for the parts of Nomad's
// and Consul's HTTP APIs that the quota service writes through: jobs with
// their versions and version tags (register with check-and-set, stop,
// purge, tag, untag), and Consul KV with its transactions. Fast tests of
// the code that stops and starts jobs run the real API clients against
// them; the integration tests run the same code against real agents.
//
// The fakes keep Nomad's rules the service relies on: every change of a
// job makes a version and moves its job modify index; a stop is a new
// version with Stop set; a new version inherits the current version's
// tag; register with an enforced index fails when the index moved (0:
// when the job exists); Consul's check-and-set fails when the key's index
// moved (0: when the key exists).
package agentfake

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"

	nomadapi "github.com/hashicorp/nomad/api"
)

// Nomad is an in-memory Nomad HTTP API for jobs.
type Nomad struct {
	srv *httptest.Server

	mu    sync.Mutex
	index uint64
	// jobs holds each job's versions, oldest first, by "namespace/id".
	jobs map[string][]*nomadapi.Job
	// Writes counts the writes by kind ("register", "stop", "purge",
	// "tag", "untag", "evaluate") and job ("namespace/id").
	writes []Write
}

// Write is one write the fake Nomad answered.
type Write struct {
	Kind string
	Job  string
}

// NewNomad starts a fake Nomad; Close stops it.
func NewNomad() *Nomad {
	n := &Nomad{jobs: map[string][]*nomadapi.Job{}, index: 100}
	n.srv = httptest.NewServer(http.HandlerFunc(n.serve))
	return n
}

// Close stops the server.
func (n *Nomad) Close() { n.srv.Close() }

// Client returns an API client of the fake.
func (n *Nomad) Client() *nomadapi.Client {
	c, err := nomadapi.NewClient(&nomadapi.Config{Address: n.srv.URL})
	if err != nil {
		panic(err) // only a malformed address fails
	}
	return c
}

func key(ns, id string) string { return ns + "/" + id }

// Put registers job as its owner would (a new version); it returns the
// version as stored.
func (n *Nomad) Put(job *nomadapi.Job) *nomadapi.Job {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.register(job)
}

// register stores a new version of job (n.mu held).
func (n *Nomad) register(job *nomadapi.Job) *nomadapi.Job {
	k := key(*job.Namespace, *job.ID)
	versions := n.jobs[k]
	var stored nomadapi.Job
	data, _ := json.Marshal(job)
	_ = json.Unmarshal(data, &stored)
	n.index++
	version := uint64(0)
	if len(versions) > 0 {
		prev := versions[len(versions)-1]
		version = *prev.Version + 1
		if stored.VersionTag == nil && prev.VersionTag != nil {
			tag := *prev.VersionTag
			stored.VersionTag = &tag
		}
	}
	if stored.Stop == nil {
		stored.Stop = ptr(false)
	}
	stored.Version, stored.JobModifyIndex, stored.ModifyIndex = ptr(version), ptr(n.index), ptr(n.index)
	stored.SubmitTime = ptr(int64(n.index))
	status := "running"
	if *stored.Stop {
		status = "dead"
	}
	stored.Status = &status
	n.jobs[k] = append(versions, &stored)
	return &stored
}

// KeepLatestVersion drops every version of a job but its current one, as
// Nomad's garbage collector does with versions past the ones it tracks.
func (n *Nomad) KeepLatestVersion(ns, id string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	k := key(ns, id)
	if versions := n.jobs[k]; len(versions) > 1 {
		n.jobs[k] = versions[len(versions)-1:]
	}
}

// Job returns the current version of a job, nil when Nomad has none.
func (n *Nomad) Job(ns, id string) *nomadapi.Job {
	n.mu.Lock()
	defer n.mu.Unlock()
	versions := n.jobs[key(ns, id)]
	if len(versions) == 0 {
		return nil
	}
	return copyJob(versions[len(versions)-1])
}

// Stubs lists the jobs as Nomad's job listing does.
func (n *Nomad) Stubs() []*nomadapi.JobListStub {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []*nomadapi.JobListStub
	for _, versions := range n.jobs {
		j := versions[len(versions)-1]
		out = append(out, &nomadapi.JobListStub{ID: *j.ID, Namespace: *j.Namespace, Type: "batch", Priority: 50,
			Stop: *j.Stop, Status: *j.Status, ModifyIndex: *j.ModifyIndex, JobModifyIndex: *j.JobModifyIndex, SubmitTime: *j.SubmitTime})
	}
	return out
}

// Writes returns the writes answered so far.
func (n *Nomad) Writes() []Write {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]Write(nil), n.writes...)
}

func copyJob(j *nomadapi.Job) *nomadapi.Job {
	var out nomadapi.Job
	data, _ := json.Marshal(j)
	_ = json.Unmarshal(data, &out)
	return &out
}

func ptr[T any](v T) *T { return &v }

// serve routes a request.
func (n *Nomad) serve(w http.ResponseWriter, r *http.Request) {
	n.mu.Lock()
	defer n.mu.Unlock()
	ns := r.URL.Query().Get("namespace")
	if ns == "" {
		ns = "default"
	}
	path := r.URL.Path
	switch {
	case path == "/v1/acl/token/self":
		http.Error(w, "ACL support disabled", http.StatusBadRequest)
	case path == "/v1/jobs" && r.Method == http.MethodPut:
		n.serveRegister(w, r)
	case strings.HasPrefix(path, "/v1/job/"):
		n.serveJob(w, r, ns, strings.TrimPrefix(path, "/v1/job/"))
	default:
		http.Error(w, "the fake Nomad does not serve "+path, http.StatusNotImplemented)
	}
}

func (n *Nomad) serveRegister(w http.ResponseWriter, r *http.Request) {
	var req nomadapi.JobRegisterRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Job == nil || req.Job.ID == nil || req.Job.Namespace == nil {
		http.Error(w, "bad register request", http.StatusBadRequest)
		return
	}
	versions := n.jobs[key(*req.Job.Namespace, *req.Job.ID)]
	if req.EnforceIndex {
		var cur uint64
		if len(versions) > 0 {
			cur = *versions[len(versions)-1].JobModifyIndex
		}
		if cur != req.JobModifyIndex || (req.JobModifyIndex == 0 && len(versions) > 0) {
			http.Error(w, fmt.Sprintf("Enforcing job modify index %d: job exists with conflicting job modify index: %d", req.JobModifyIndex, cur), http.StatusBadRequest)
			return
		}
	}
	stored := n.register(req.Job)
	n.writes = append(n.writes, Write{"register", key(*stored.Namespace, *stored.ID)})
	writeJSON(w, stored.JobModifyIndex, nomadapi.JobRegisterResponse{JobModifyIndex: *stored.JobModifyIndex, EvalID: "eval"})
}

func (n *Nomad) serveJob(w http.ResponseWriter, r *http.Request, ns, rest string) {
	id, sub, _ := strings.Cut(rest, "/")
	k := key(ns, id)
	versions := n.jobs[k]
	if len(versions) == 0 {
		http.Error(w, "job not found", http.StatusNotFound)
		return
	}
	cur := versions[len(versions)-1]
	switch {
	case sub == "" && r.Method == http.MethodGet:
		writeJSON(w, cur.ModifyIndex, cur)
	case sub == "" && r.Method == http.MethodDelete:
		if r.URL.Query().Get("purge") == "true" {
			delete(n.jobs, k)
			n.index++
			n.writes = append(n.writes, Write{"purge", k})
			writeJSON(w, &n.index, nomadapi.JobDeregisterResponse{JobModifyIndex: n.index})
			return
		}
		stop := copyJob(cur)
		stop.Stop = ptr(true)
		stored := n.register(stop)
		n.writes = append(n.writes, Write{"stop", k})
		writeJSON(w, stored.JobModifyIndex, nomadapi.JobDeregisterResponse{JobModifyIndex: *stored.JobModifyIndex, EvalID: "eval"})
	case sub == "versions":
		out := nomadapi.JobVersionsResponse{}
		for i := len(versions) - 1; i >= 0; i-- {
			out.Versions = append(out.Versions, versions[i])
		}
		writeJSON(w, cur.ModifyIndex, out)
	case sub == "evaluate":
		n.writes = append(n.writes, Write{"evaluate", k})
		writeJSON(w, &n.index, nomadapi.JobRegisterResponse{EvalID: "eval"})
	case strings.HasPrefix(sub, "versions/") && strings.HasSuffix(sub, "/tag"):
		n.serveTag(w, r, k, versions, strings.TrimSuffix(strings.TrimPrefix(sub, "versions/"), "/tag"))
	default:
		http.Error(w, "the fake Nomad does not serve "+r.URL.Path, http.StatusNotImplemented)
	}
}

// serveTag tags a version (PUT) or removes a tag (DELETE). Tagging moves
// the job's modify index, not its job modify index.
func (n *Nomad) serveTag(w http.ResponseWriter, r *http.Request, k string, versions []*nomadapi.Job, name string) {
	cur := versions[len(versions)-1]
	switch r.Method {
	case http.MethodPut:
		var req nomadapi.TagVersionRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, "bad tag request", http.StatusBadRequest)
			return
		}
		for _, v := range versions {
			if v.VersionTag != nil && v.VersionTag.Name == name && *v.Version != req.Version {
				http.Error(w, "tag "+name+" already exists on a different version", http.StatusBadRequest)
				return
			}
		}
		for _, v := range versions {
			if *v.Version == req.Version {
				v.VersionTag = &nomadapi.JobVersionTag{Name: name, Description: req.Description}
			}
		}
		n.writes = append(n.writes, Write{"tag", k})
	case http.MethodDelete:
		found := false
		for i := len(versions) - 1; i >= 0 && !found; i-- {
			if v := versions[i]; v.VersionTag != nil && v.VersionTag.Name == name {
				v.VersionTag, found = nil, true
			}
		}
		if !found {
			http.Error(w, "tag not found", http.StatusNotFound)
			return
		}
		n.writes = append(n.writes, Write{"untag", k})
	}
	n.index++
	cur.ModifyIndex = ptr(n.index)
	writeJSON(w, &n.index, struct{}{})
}

func writeJSON(w http.ResponseWriter, index *uint64, v any) {
	w.Header().Set("Content-Type", "application/json")
	if index != nil {
		w.Header().Set("X-Nomad-Index", strconv.FormatUint(*index, 10))
	}
	_ = json.NewEncoder(w).Encode(v)
}
