package nomadstandin

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/hashicorp/nomad/api"
)

// Server is the stand-in. Listings are kept pre-encoded, one JSON value
// per object, and re-encoded only when an event changes the object, so
// that answering costs the stand-in little beside the service it serves.
type Server struct {
	w *world

	mu    sync.RWMutex
	index uint64
	// nodeJSON: each node's list stub with resources; nodeFull: /v1/node/:id.
	nodeJSON [][]byte
	nodeFull map[string][]byte
	// allocJSON and allocLean: each allocation's list stub with resources,
	// with and without task states.
	allocJSON, allocLean [][]byte
	jobs                 map[string]*api.Job // by namespace/ID
	jobOrder             []string
	rng                  *rand.Rand
	subs                 map[chan []byte]struct{}
	// Requests counts the requests served, by route.
	requests map[string]int
}

// New generates the cluster and returns its stand-in.
func New(c Config) (*Server, error) {
	w, err := generate(c)
	if err != nil {
		return nil, err
	}
	s := &Server{w: w, index: 1_000_000, nodeFull: map[string][]byte{}, jobs: map[string]*api.Job{},
		rng: rand.New(rand.NewPCG(7, 7)), subs: map[chan []byte]struct{}{}, requests: map[string]int{}}
	for _, n := range w.nodes {
		s.nodeJSON = append(s.nodeJSON, mustJSON(nodeStub(n)))
		s.nodeFull[n.ID] = mustJSON(n)
	}
	s.allocJSON = make([][]byte, len(w.allocs))
	s.allocLean = make([][]byte, len(w.allocs))
	for i := range w.allocs {
		s.encodeAlloc(i)
	}
	for _, j := range w.jobs {
		s.jobs[jobKey(j)] = j
		s.jobOrder = append(s.jobOrder, jobKey(j))
	}
	// The generated objects are encoded; keep only what events change.
	for _, n := range w.nodes {
		n.NodeResources = nil
	}
	return s, nil
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

func (s *Server) encodeAlloc(i int) {
	a := s.w.allocs[i]
	s.allocJSON[i] = mustJSON(a)
	ts := a.TaskStates
	a.TaskStates = nil
	s.allocLean[i] = mustJSON(a)
	a.TaskStates = ts
}

// Sizes reports the generated cluster: nodes, allocations, jobs and the
// bytes of the node and allocation listings.
func (s *Server) Sizes() (nodes, allocs, jobs, nodeBytes, allocBytes int) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, b := range s.nodeJSON {
		nodeBytes += len(b) + 1
	}
	for _, b := range s.allocJSON {
		allocBytes += len(b) + 1
	}
	return len(s.nodeJSON), len(s.allocJSON), len(s.jobs), nodeBytes, allocBytes
}

// Requests returns how many requests each route served.
func (s *Server) Requests() map[string]int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := map[string]int{}
	for k, v := range s.requests {
		out[k] = v
	}
	return out
}

// ServeHTTP answers Nomad API requests.
func (s *Server) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	p := strings.TrimPrefix(r.URL.Path, "/v1/")
	route := p
	if i := strings.IndexByte(p, '/'); i >= 0 && (strings.HasPrefix(p, "node/") || strings.HasPrefix(p, "job/")) {
		route = p[:i] + "/:id"
		if rest := strings.SplitN(p, "/", 3); len(rest) == 3 {
			route += "/" + rest[2]
		}
	}
	s.mu.Lock()
	s.requests[r.Method+" "+route]++
	s.mu.Unlock()
	if r.Method != http.MethodGet {
		s.write(rw, r)
		return
	}
	switch {
	case p == "event/stream":
		s.stream(rw, r)
	case p == "nodes":
		s.list(rw, func(yield func([]byte)) {
			for _, b := range s.nodeJSON {
				yield(b)
			}
		})
	case strings.HasPrefix(p, "node/"):
		s.node(rw, strings.TrimPrefix(p, "node/"))
	case p == "allocations":
		lean := r.URL.Query().Get("task_states") == "false"
		ns := r.URL.Query().Get("namespace")
		s.list(rw, func(yield func([]byte)) {
			for i, a := range s.w.allocs {
				if ns != "*" && ns != "" && ns != a.Namespace {
					continue
				}
				if lean {
					yield(s.allocLean[i])
				} else {
					yield(s.allocJSON[i])
				}
			}
		})
	case p == "jobs":
		s.listJobs(rw, r.URL.Query().Get("namespace"))
	case strings.HasPrefix(p, "job/"):
		s.job(rw, r, strings.TrimPrefix(p, "job/"))
	case p == "namespaces":
		var out []*api.Namespace
		for i := range max(s.w.cfg.Projects, 1) {
			out = append(out, &api.Namespace{Name: s.w.project(i)})
		}
		out = append(out, &api.Namespace{Name: "default"})
		s.json(rw, out)
	case p == "acl/token/self":
		http.Error(rw, "ACL support disabled", http.StatusBadRequest)
	case p == "status/leader":
		s.json(rw, "127.0.0.1:4647")
	case p == "agent/self":
		s.json(rw, map[string]any{"config": map[string]any{"Region": "global", "Datacenter": "dc1"}, "member": map[string]any{"Name": "standin.global"}})
	default:
		http.Error(rw, "no such endpoint in the stand-in: "+r.URL.Path, http.StatusNotFound)
	}
}

// headers sets the query metadata headers Nomad sends; s.mu is held.
func (s *Server) headers(rw http.ResponseWriter) {
	h := rw.Header()
	h.Set("Content-Type", "application/json")
	h.Set("X-Nomad-Index", strconv.FormatUint(s.index, 10))
	h.Set("X-Nomad-KnownLeader", "true")
	h.Set("X-Nomad-LastContact", "0")
}

func (s *Server) json(rw http.ResponseWriter, v any) {
	s.mu.RLock()
	s.headers(rw)
	s.mu.RUnlock()
	_ = json.NewEncoder(rw).Encode(v)
}

// list writes a JSON array of pre-encoded values under the read lock.
func (s *Server) list(rw http.ResponseWriter, each func(yield func([]byte))) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	s.headers(rw)
	var buf bytes.Buffer
	buf.WriteByte('[')
	first := true
	each(func(b []byte) {
		if !first {
			buf.WriteByte(',')
		}
		first = false
		buf.Write(b)
		if buf.Len() > 1<<20 {
			_, _ = rw.Write(buf.Bytes())
			buf.Reset()
		}
	})
	buf.WriteByte(']')
	_, _ = rw.Write(buf.Bytes())
}

func (s *Server) node(rw http.ResponseWriter, id string) {
	s.mu.RLock()
	b, ok := s.nodeFull[id]
	s.headers(rw)
	s.mu.RUnlock()
	if !ok {
		http.Error(rw, "node not found", http.StatusNotFound)
		return
	}
	_, _ = rw.Write(b)
}

// running counts a job's allocations.
func (s *Server) running(key string) int { return len(s.w.jobAllocs[key]) }

func (s *Server) listJobs(rw http.ResponseWriter, ns string) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	s.headers(rw)
	out := make([]*api.JobListStub, 0, len(s.jobOrder))
	for _, k := range s.jobOrder {
		j := s.jobs[k]
		if ns != "*" && ns != "" && ns != *j.Namespace {
			continue
		}
		run := s.running(k)
		out = append(out, jobStub(j, run, *j.TaskGroups[0].Count-run))
	}
	_ = json.NewEncoder(rw).Encode(out)
}

func (s *Server) job(rw http.ResponseWriter, r *http.Request, rest string) {
	ns := r.URL.Query().Get("namespace")
	if ns == "" {
		ns = "default"
	}
	name, sub, _ := strings.Cut(rest, "/")
	s.mu.RLock()
	j := s.jobs[ns+"/"+name]
	s.mu.RUnlock()
	if j == nil {
		http.Error(rw, "job not found", http.StatusNotFound)
		return
	}
	switch sub {
	case "":
		s.json(rw, j)
	case "summary":
		run := s.running(ns + "/" + name)
		s.json(rw, jobStub(j, run, *j.TaskGroups[0].Count-run).JobSummary)
	case "versions":
		s.json(rw, map[string]any{"Versions": []*api.Job{j}, "Diffs": nil})
	case "allocations":
		var out []*api.AllocationListStub
		for _, i := range s.w.jobAllocs[ns+"/"+name] {
			out = append(out, s.w.allocs[i])
		}
		s.json(rw, out)
	default:
		http.Error(rw, "no such job endpoint in the stand-in", http.StatusNotFound)
	}
}

// write acknowledges a write as Nomad would, changing nothing.
func (s *Server) write(rw http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.index++
	idx := s.index
	s.mu.Unlock()
	rw.Header().Set("X-Nomad-Index", strconv.FormatUint(idx, 10))
	rw.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(rw, `{"EvalID":"%s","EvalCreateIndex":%d,"JobModifyIndex":%d,"Index":%d}`, id('w', int(idx)), idx, idx, idx)
}
