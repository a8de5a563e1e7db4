package device

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpushare/nomad-gpushare/vocab"
	"github.com/hashicorp/nomad/api"
	dev "github.com/hashicorp/nomad/plugins/device"
)

// fakeNomad serves the endpoints the plugin reads, /v1/node/:id,
// /v1/node/:id/allocations, /v1/evaluations?status=blocked, /v1/job/:id
// and the token's ACL (/v1/acl/token/self, /v1/acl/policy/self and
// /v1/acl/policy/:name), for unit tests; the real agent is covered by the
// integration tests. ACLs are off unless a policy is set (setPolicy).
type fakeNomad struct {
	*httptest.Server
	mu     sync.Mutex
	allocs []*api.Allocation
	view   []*api.NodeDeviceResource
	evals  []*api.Evaluation
	jobs   map[string]*api.Job
	down   bool
	// stopped lists the allocations stopped through
	// /v1/allocation/:id/stop, in order.
	stopped []string
	// foreign are device groups another plugin publishes on the node.
	foreign []*api.NodeDeviceResource
	// policy is the rules of the token's one policy; "" means ACLs off.
	// policyIndex is its modify index.
	policy      string
	policyIndex uint64
	// jobReads counts /v1/job/:id requests; refused those answered while
	// down.
	jobReads, refused int
	// index is the last X-Nomad-Index; bodies the last answer of each
	// path, with its index (serveIndexed).
	index  uint64
	bodies map[string]indexedBody
	// nodeModify is the node's modify index when set (withModifyIndex):
	// it moves with each change of the servers' view (sync).
	nodeModify uint64
}

type indexedBody struct {
	body  string
	index uint64
}

const fakeNodeID = "11111111-2222-3333-4444-555555555555"

func newFakeNomad(t testing.TB) *fakeNomad {
	f := &fakeNomad{}
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.down {
			f.refused++
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		switch r.URL.Path {
		case "/v1/node/" + fakeNodeID:
			devices := append(append([]*api.NodeDeviceResource{}, f.view...), f.foreign...)
			f.serveIndexed(w, r, &api.Node{ID: fakeNodeID, Datacenter: "dc1", NodePool: "default", ModifyIndex: f.nodeModify, NodeResources: &api.NodeResources{Devices: devices}})
		case "/v1/node/" + fakeNodeID + "/allocations":
			f.serveIndexed(w, r, f.allocs)
		case "/v1/acl/token/self", "/v1/acl/policy/self", "/v1/acl/policy/plugin":
			f.serveACL(w, r)
		case "/v1/evaluations":
			if !strings.Contains(r.URL.Query().Get("filter"), `Status == "blocked"`) || r.URL.Query().Get("namespace") != "*" {
				http.Error(w, `fake: want filter Status == "blocked" and namespace=*`, http.StatusBadRequest)
				return
			}
			f.serveIndexed(w, r, append([]*api.Evaluation{}, f.evals...))
		default:
			if id, ok := strings.CutPrefix(r.URL.Path, "/v1/allocation/"); ok && (r.Method == http.MethodPut || r.Method == http.MethodPost) && strings.HasSuffix(id, "/stop") {
				f.stopAlloc(strings.TrimSuffix(id, "/stop"))
				json.NewEncoder(w).Encode(&api.AllocStopResponse{EvalID: "eval-stop"})
				return
			}
			if j := f.jobs[strings.TrimPrefix(r.URL.Path, "/v1/job/")]; j != nil && strings.HasPrefix(r.URL.Path, "/v1/job/") {
				f.jobReads++
				json.NewEncoder(w).Encode(j)
				return
			}
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(f.Close)
	return f
}

// serveIndexed answers v in JSON with an X-Nomad-Index that moves when
// the answer of the path changes, as Nomad's does when what it lists
// changes. Blocking queries are answered at once: a fake change makes no
// event to wait for, so a watch re-asks every MinInterval.
func (f *fakeNomad) serveIndexed(w http.ResponseWriter, r *http.Request, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	if f.bodies == nil {
		f.bodies = map[string]indexedBody{}
	}
	last := f.bodies[r.URL.Path]
	if last.index == 0 || last.body != string(b) {
		f.index++
		last = indexedBody{body: string(b), index: f.index}
		f.bodies[r.URL.Path] = last
	}
	w.Header().Set("X-Nomad-Index", strconv.FormatUint(last.index, 10))
	w.Write(b)
}

// serveACL answers the ACL endpoints for a token with one policy,
// "plugin", or as a Nomad with ACLs off.
func (f *fakeNomad) serveACL(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.URL.Path == "/v1/acl/token/self" && f.policy == "":
		json.NewEncoder(w).Encode(&api.ACLToken{AccessorID: "acls-disabled", Type: "client"})
	case r.URL.Path == "/v1/acl/token/self":
		json.NewEncoder(w).Encode(&api.ACLToken{AccessorID: "a", Type: "client", Policies: []string{"plugin"}})
	case r.URL.Path == "/v1/acl/policy/self":
		json.NewEncoder(w).Encode([]*api.ACLPolicyListStub{{Name: "plugin", ModifyIndex: f.policyIndex}})
	default:
		json.NewEncoder(w).Encode(&api.ACLPolicy{Name: "plugin", Rules: f.policy, ModifyIndex: f.policyIndex})
	}
}

// setPolicy turns ACLs on with a token that has one policy with these
// rules ("" turns them off again).
func (f *fakeNomad) setPolicy(rules string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.policy = rules
	f.policyIndex++
}

// block registers a job with one group "main" whose task asks for count
// devices of typ, and a blocked evaluation for it that failed on missing
// devices.
func (f *fakeNomad) block(jobID, typ string, count uint64, submitted time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.jobs == nil {
		f.jobs = map[string]*api.Job{}
	}
	job := api.NewBatchJob(jobID, jobID, "global", 50)
	job.Datacenters = []string{"dc1"}
	job.JobModifyIndex, job.SubmitTime = ptrTo(uint64(7)), ptrTo(submitted.UnixNano())
	task := api.NewTask("main", "raw_exec")
	task.Resources = &api.Resources{Devices: []*api.RequestedDevice{{Name: "nvidia/" + typ, Count: &count}}}
	job.AddTaskGroup(api.NewTaskGroup("main", 1).AddTask(task))
	f.jobs[jobID] = job
	f.evals = append(f.evals, &api.Evaluation{ID: "eval-" + jobID, Namespace: "default", JobID: jobID, JobModifyIndex: 7, Status: "blocked",
		FailedTGAllocs: map[string]*api.AllocationMetric{"main": {ConstraintFiltered: map[string]int{"missing devices": 1}}}})
}

// unblock removes the job's blocked evaluation.
func (f *fakeNomad) unblock(jobID string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, e := range f.evals {
		if e.JobID == jobID {
			f.evals = append(f.evals[:i], f.evals[i+1:]...)
			return
		}
	}
}

func ptrTo[T any](v T) *T { return &v }

// refusedRequests counts the requests answered while down.
func (f *fakeNomad) refusedRequests() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.refused
}

// setDown makes every request fail (Nomad unreachable).
func (f *fakeNomad) setDown(down bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.down = down
}

// place adds a running allocation holding the given device IDs.
func (f *fakeNomad) place(allocID, typ string, deviceIDs ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.allocs = append(f.allocs, &api.Allocation{
		ID: allocID, ClientStatus: api.AllocClientStatusRunning,
		AllocatedResources: &api.AllocatedResources{Tasks: map[string]*api.AllocatedTaskResources{
			"main": {Devices: []*api.AllocatedDeviceResource{{Vendor: "nvidia", Type: typ, Name: "x", DeviceIDs: deviceIDs}}},
		}},
	})
}

// placeBy adds a running allocation of job jobID's group "main", placed
// by its blocked evaluation (see block), holding the given device IDs.
func (f *fakeNomad) placeBy(allocID, jobID, typ string, deviceIDs ...string) {
	f.place(allocID, typ, deviceIDs...)
	f.mu.Lock()
	defer f.mu.Unlock()
	a := f.allocs[len(f.allocs)-1]
	a.Namespace, a.JobID, a.TaskGroup, a.EvalID = "default", jobID, "main", "eval-"+jobID
}

// finish marks an allocation complete.
func (f *fakeNomad) finish(allocID string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, a := range f.allocs {
		if a.ID == allocID {
			a.ClientStatus = api.AllocClientStatusComplete
		}
	}
}

// sync makes the servers' view of the node what the plugin publishes, as
// the Nomad client would after a fingerprint.
func (f *fakeNomad) sync(groups []*dev.DeviceGroup) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.nodeModify > 0 {
		f.nodeModify++
	}
	f.view = nil
	for _, g := range groups {
		r := &api.NodeDeviceResource{Vendor: g.Vendor, Type: g.Type, Name: g.Name, Attributes: map[string]*api.Attribute{}}
		for k, a := range g.Attributes {
			if v, ok := a.GetString(); ok {
				r.Attributes[k] = &api.Attribute{StringVal: &v}
			}
		}
		for _, d := range g.Devices {
			r.Instances = append(r.Instances, &api.NodeDevice{ID: d.ID, Healthy: d.Healthy, HealthDescription: d.HealthDesc})
		}
		f.view = append(f.view, r)
	}
}

func shares(uuid string, from, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = vocab.Share(uuid, from+i)
	}
	return out
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }
