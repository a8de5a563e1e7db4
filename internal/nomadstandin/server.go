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

	mu sync.RWMutex
	// index is the last raft index; tables the index of each table's
	// last write, which its reads answer with, as Nomad's do.
	index  uint64
	tables map[string]uint64
	// nodeJSON and nodeLean: each node's list stub with resources
	// (?resources=true) and without; nodeFull: /v1/node/:id.
	nodeJSON, nodeLean [][]byte
	// dynamic is each node's dynamic metadata (/v1/client/metadata).
	dynamic  map[string]map[string]*string
	nodeFull map[string][]byte
	// allocJSON and allocLean: each allocation's list stub with resources,
	// with and without task states.
	allocJSON, allocLean [][]byte
	jobs                 map[string]*api.Job // by namespace/ID
	jobOrder             []string
	rng                  *rand.Rand
	subs                 map[chan []byte]struct{}
	// registered are the job registrations applied (register), and
	// versions each registered job's versions, newest first.
	registered []Registration
	versions   map[string][]*api.Job
	// vars are the Nomad Variables, by namespace/path.
	vars map[string]*api.Variable
	// Requests counts the requests served, by route.
	requests map[string]int
}

// New generates the cluster and returns its stand-in.
func New(c Config) (*Server, error) {
	w, err := generate(c)
	if err != nil {
		return nil, err
	}
	s := &Server{w: w, index: 1_000_000, tables: map[string]uint64{"nodes": 1_000_000, "allocs": 1_000_000, "jobs": 1_000_000}, nodeFull: map[string][]byte{}, dynamic: map[string]map[string]*string{}, jobs: map[string]*api.Job{}, versions: map[string][]*api.Job{}, vars: map[string]*api.Variable{},
		rng: rand.New(rand.NewPCG(7, 7)), subs: map[chan []byte]struct{}{}, requests: map[string]int{}}
	s.nodeJSON, s.nodeLean = make([][]byte, len(w.nodes)), make([][]byte, len(w.nodes))
	for i, n := range w.nodes {
		s.encodeNode(i, n)
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
	route := routeOf(p)
	s.mu.Lock()
	s.requests[r.Method+" "+route]++
	s.mu.Unlock()
	if p == "client/metadata" {
		s.metadata(rw, r)
		return
	}
	if p == "vars" || strings.HasPrefix(p, "var/") {
		s.variables(rw, r, p)
		return
	}
	if r.Method != http.MethodGet {
		s.write(rw, r)
		return
	}
	switch {
	case p == "event/stream":
		s.stream(rw, r)
	case p == "nodes":
		// Nomad adds a node's resources to its stub only when asked.
		stubs := s.nodeLean
		if r.URL.Query().Get("resources") == "true" {
			stubs = s.nodeJSON
		}
		s.list(rw, r, "nodes", func(yield func(int, []byte) bool) {
			for i, b := range stubs {
				if !yield(i, b) {
					return
				}
			}
		})
	case strings.HasPrefix(p, "node/"):
		s.node(rw, strings.TrimPrefix(p, "node/"))
	case p == "allocations":
		lean := r.URL.Query().Get("task_states") == "false"
		ns := r.URL.Query().Get("namespace")
		only := filterIDs(r.URL.Query().Get("filter"))
		s.list(rw, r, "allocs", func(yield func(int, []byte) bool) {
			for i, a := range s.w.allocs {
				if ns != "*" && ns != "" && ns != a.Namespace || only != nil && !only[a.ID] {
					continue
				}
				b := s.allocJSON[i]
				if lean {
					b = s.allocLean[i]
				}
				if !yield(i, b) {
					return
				}
			}
		})
	case p == "jobs":
		s.listJobs(rw, r)
	case strings.HasPrefix(p, "job/"):
		s.job(rw, r, strings.TrimPrefix(p, "job/"))
	case p == "namespaces":
		var out []*api.Namespace
		for i := range max(s.w.cfg.Projects, 1) {
			out = append(out, &api.Namespace{Name: s.w.project(i)})
		}
		out = append(out, &api.Namespace{Name: ReclaimNamespace}, &api.Namespace{Name: "default"})
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

// routeOf is the route of API path p (after /v1/), IDs, paths and tag
// names left out, for counting requests.
func routeOf(p string) string {
	switch {
	case strings.HasPrefix(p, "var/"):
		return "var/:path"
	case strings.HasPrefix(p, "node/"), strings.HasPrefix(p, "job/"):
		parts := strings.Split(p, "/")
		parts[1] = ":id"
		if len(parts) == 5 && parts[2] == "versions" {
			parts[3] = ":tag"
		}
		return strings.Join(parts, "/")
	}
	return p
}

// tagPath reads /v1/job/:id/versions/:name/tag.
func tagPath(p string) (job, name string, ok bool) {
	rest, ok := strings.CutPrefix(p, "/v1/job/")
	if !ok {
		return "", "", false
	}
	parts := strings.Split(rest, "/")
	if len(parts) != 4 || parts[1] != "versions" || parts[3] != "tag" {
		return "", "", false
	}
	return parts[0], parts[2], true
}

// filterIDs reads the allocation IDs of a filter expression of the form
// `ID == "a" or ID == "b"` (the one kind of ID filter the service sends);
// nil when the filter names no ID. Other filters (`DesiredStatus ==
// "run"`) hold for every allocation the stand-in has.
func filterIDs(f string) map[string]bool {
	if !strings.Contains(f, `ID == "`) {
		return nil
	}
	out := map[string]bool{}
	for _, part := range strings.Split(f, `ID == "`)[1:] {
		if id, _, ok := strings.Cut(part, `"`); ok {
			out[id] = true
		}
	}
	return out
}

// headers sets the query metadata headers Nomad sends, with the index of
// table (the last raft index when ""); s.mu is held.
func (s *Server) headers(rw http.ResponseWriter, table ...string) {
	idx := s.index
	if len(table) > 0 {
		idx = s.tables[table[0]]
	}
	h := rw.Header()
	h.Set("Content-Type", "application/json")
	h.Set("X-Nomad-Index", strconv.FormatUint(idx, 10))
	h.Set("X-Nomad-KnownLeader", "true")
	h.Set("X-Nomad-LastContact", "0")
}

func (s *Server) json(rw http.ResponseWriter, v any) {
	s.mu.RLock()
	s.headers(rw)
	s.mu.RUnlock()
	_ = json.NewEncoder(rw).Encode(v)
}

// list writes a JSON array of pre-encoded values of table under the read
// lock. each yields the values with their positions in table; with
// per_page, the list is one page of them from position next_token on, and
// X-Nomad-NextToken names the position of the next page's first value, as
// Nomad pages its listings.
func (s *Server) list(rw http.ResponseWriter, r *http.Request, table string, each func(yield func(pos int, b []byte) bool)) {
	q := r.URL.Query()
	limit, err := strconv.Atoi(q.Get("per_page"))
	if err != nil || limit <= 0 {
		limit = -1
	}
	from, _ := strconv.Atoi(q.Get("next_token"))
	s.mu.RLock()
	defer s.mu.RUnlock()
	s.headers(rw, table)
	var buf bytes.Buffer
	buf.WriteByte('[')
	n, next := 0, -1
	each(func(pos int, b []byte) bool {
		if pos < from {
			return true
		}
		if n == limit {
			next = pos
			return false
		}
		if n > 0 {
			buf.WriteByte(',')
		}
		n++
		buf.Write(b)
		if limit < 0 && buf.Len() > 1<<20 {
			// Unpaged: streamed (a page waits for its next token, a
			// header).
			_, _ = rw.Write(buf.Bytes())
			buf.Reset()
		}
		return true
	})
	if next >= 0 {
		rw.Header().Set("X-Nomad-NextToken", strconv.Itoa(next))
	}
	buf.WriteByte(']')
	_, _ = rw.Write(buf.Bytes())
}

func (s *Server) node(rw http.ResponseWriter, id string) {
	s.mu.RLock()
	b, ok := s.nodeFull[id]
	s.headers(rw, "nodes")
	s.mu.RUnlock()
	if !ok {
		http.Error(rw, "node not found", http.StatusNotFound)
		return
	}
	_, _ = rw.Write(b)
}

// running counts a job's running allocations.
func (s *Server) running(key string) int {
	n := 0
	for _, i := range s.w.jobAllocs[key] {
		if s.w.allocs[i].ClientStatus == "running" {
			n++
		}
	}
	return n
}

// stub is job j (key k) as Nomad lists it: a stopped job queues nothing.
func (s *Server) stub(k string, j *api.Job) *api.JobListStub {
	run, queued := s.running(k), 0
	if !*j.Stop {
		queued = max(*j.TaskGroups[0].Count-run, 0)
	}
	return jobStub(j, run, queued)
}

func (s *Server) listJobs(rw http.ResponseWriter, r *http.Request) {
	ns := r.URL.Query().Get("namespace")
	limit, err := strconv.Atoi(r.URL.Query().Get("per_page"))
	if err != nil || limit <= 0 {
		limit = -1
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	s.headers(rw, "jobs")
	out := make([]*api.JobListStub, 0, len(s.jobOrder))
	for _, k := range s.jobOrder {
		if len(out) == limit {
			break
		}
		j := s.jobs[k]
		if ns != "*" && ns != "" && ns != *j.Namespace {
			continue
		}
		out = append(out, s.stub(k, j))
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
		s.mu.RLock()
		stub := s.stub(ns+"/"+name, j)
		s.mu.RUnlock()
		s.json(rw, stub.JobSummary)
	case "versions":
		s.mu.RLock()
		versions := s.versionsOf(ns + "/" + name)
		s.mu.RUnlock()
		s.json(rw, map[string]any{"Versions": versions, "Diffs": nil})
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

// write acknowledges a write as Nomad would. A job registration
// (/v1/jobs) of a job the stand-in has is applied (register); every other
// write changes nothing.
func (s *Server) write(rw http.ResponseWriter, r *http.Request) {
	var reg *api.JobRegisterRequest
	if r.URL.Path == "/v1/jobs" {
		reg = new(api.JobRegisterRequest)
		if err := json.NewDecoder(r.Body).Decode(reg); err != nil || reg.Job == nil {
			http.Error(rw, fmt.Sprintf("decoding the job registration: %v", err), http.StatusBadRequest)
			return
		}
	}
	job, tagName, isTag := tagPath(r.URL.Path)
	tagReq := new(api.TagVersionRequest)
	if isTag && r.Method != http.MethodDelete {
		if err := json.NewDecoder(r.Body).Decode(tagReq); err != nil {
			http.Error(rw, fmt.Sprintf("decoding the tag request: %v", err), http.StatusBadRequest)
			return
		}
	}
	s.mu.Lock()
	s.index++
	idx := s.index
	status, err := http.StatusInternalServerError, error(nil)
	switch {
	case reg != nil:
		err = s.register(reg, idx)
	case isTag:
		ns := r.URL.Query().Get("namespace")
		if ns == "" {
			ns = "default"
		}
		status, err = s.tag(r, ns+"/"+job, tagName, tagReq)
	}
	s.mu.Unlock()
	if err != nil {
		http.Error(rw, err.Error(), status)
		return
	}
	rw.Header().Set("X-Nomad-Index", strconv.FormatUint(idx, 10))
	rw.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(rw, `{"EvalID":"%s","EvalCreateIndex":%d,"JobModifyIndex":%d,"Index":%d}`, id('w', int(idx)), idx, idx, idx)
}
