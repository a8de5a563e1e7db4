package alloctrack

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/hashicorp/nomad/api"
)

// TestPlansApplied: a family is proven applied below an index when no
// pending or blocked evaluation written before it belongs to a job that
// could ask this node for that family; the evaluations are read from the
// leader with the servers' filter.
func TestPlansApplied(t *testing.T) {
	job := func(id string, version uint64, dc, pool string, types ...string) *api.Job {
		j := &api.Job{ID: &id, Datacenters: []string{dc}, NodePool: &pool, JobModifyIndex: &version}
		task := &api.Task{Name: "t", Resources: &api.Resources{}}
		for _, typ := range types {
			task.Resources.Devices = append(task.Resources.Devices, &api.RequestedDevice{Name: typ})
		}
		j.TaskGroups = []*api.TaskGroup{{Name: new("g"), Tasks: []*api.Task{task}}}
		return j
	}
	jobs := map[string]*api.Job{
		"whole":      job("whole", 5, "dc1", "default", "nvidia/gpu"),
		"share":      job("share", 5, "dc1", "default", "gpu-share"),
		"both":       job("both", 5, "dc1", "default", "nvidia/gpu", "nvidia/gpu-share"),
		"cpu":        job("cpu", 5, "dc1", "default"),
		"amd":        job("amd", 5, "dc1", "default", "amd/gpu"),
		"other-dc":   job("other-dc", 5, "dc2", "default", "nvidia/gpu"),
		"other-pool": job("other-pool", 5, "dc1", "cpu", "nvidia/gpu-share"),
	}
	eval := func(jobID, status string, modify uint64) *api.Evaluation {
		return &api.Evaluation{ID: "e-" + jobID, Namespace: "default", JobID: jobID, Status: status, ModifyIndex: modify, JobModifyIndex: 5}
	}
	tests := []struct {
		name         string
		evals        []*api.Evaluation
		whole, share bool
	}{
		{"no live evaluation", nil, true, true},
		{"a pending whole job from before", []*api.Evaluation{eval("whole", "pending", 99)}, false, true},
		{"a blocked share job from before", []*api.Evaluation{eval("share", "blocked", 50)}, true, false},
		{"written at the index or later: processed from a newer state", []*api.Evaluation{eval("both", "pending", 100), eval("share", "blocked", 101)}, true, true},
		{"a job asking for both", []*api.Evaluation{eval("both", "blocked", 10)}, false, false},
		{"no gpushare device", []*api.Evaluation{eval("cpu", "pending", 10), eval("amd", "blocked", 10)}, true, true},
		{"another datacenter or node pool", []*api.Evaluation{eval("other-dc", "pending", 10), eval("other-pool", "blocked", 10)}, true, true},
		{"another version of the job: both", []*api.Evaluation{func() *api.Evaluation { e := eval("cpu", "pending", 10); e.JobModifyIndex = 4; return e }()}, false, false},
		{"a job that cannot be read: both", []*api.Evaluation{eval("gone", "blocked", 10)}, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				switch {
				case r.URL.Path == "/v1/node/n1":
					json.NewEncoder(w).Encode(&api.Node{ID: "n1", Datacenter: "dc1", NodePool: "default"})
				case r.URL.Path == "/v1/node/n1/allocations":
					json.NewEncoder(w).Encode([]*api.Allocation{})
				case r.URL.Path == "/v1/evaluations":
					q := r.URL.Query()
					if q.Get("filter") != liveEvals || q.Get("namespace") != "*" || q.Has("stale") {
						http.Error(w, "want the live evaluations of every namespace from the leader", http.StatusBadRequest)
						return
					}
					json.NewEncoder(w).Encode(tt.evals)
				case strings.HasPrefix(r.URL.Path, "/v1/job/") && jobs[strings.TrimPrefix(r.URL.Path, "/v1/job/")] != nil:
					json.NewEncoder(w).Encode(jobs[strings.TrimPrefix(r.URL.Path, "/v1/job/")])
				default:
					http.NotFound(w, r)
				}
			}))
			defer srv.Close()
			tr, err := New(Config{Address: srv.URL, NodeID: "n1"})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := tr.Read(context.Background(), ReadOptions{}); err != nil {
				t.Fatal(err)
			}
			got, err := tr.PlansApplied(context.Background(), 100)
			if err != nil {
				t.Fatal(err)
			}
			if got.Whole != tt.whole || got.Share != tt.share {
				t.Errorf("applied whole %v share %v, want %v %v (%s)", got.Whole, got.Share, tt.whole, tt.share, got.Why)
			}
		})
	}
}
