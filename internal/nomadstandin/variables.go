package nomadstandin

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"

	"github.com/hashicorp/nomad/api"
)

// variables serves Nomad Variables (/v1/vars, /v1/var/:path), which the
// service publishes each node's demand in: a list by prefix, reads, and
// writes and deletes with Nomad's check-and-set (?cas=).
func (s *Server) variables(rw http.ResponseWriter, r *http.Request, p string) {
	ns := r.URL.Query().Get("namespace")
	if ns == "" {
		ns = "default"
	}
	if p == "vars" {
		s.listVariables(rw, ns, r.URL.Query().Get("prefix"))
		return
	}
	key := ns + "/" + strings.TrimPrefix(p, "var/")
	var in api.Variable
	if r.Method == http.MethodPut {
		if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
			http.Error(rw, "decoding the variable: "+err.Error(), http.StatusBadRequest)
			return
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := s.vars[key]
	if cas := r.URL.Query().Get("cas"); cas != "" && r.Method != http.MethodGet {
		want, err := strconv.ParseUint(cas, 10, 64)
		if err != nil {
			http.Error(rw, "bad cas: "+err.Error(), http.StatusBadRequest)
			return
		}
		if have := modifyIndex(cur); have != want {
			s.headers(rw)
			rw.WriteHeader(http.StatusConflict)
			_ = json.NewEncoder(rw).Encode(cur)
			return
		}
	}
	switch r.Method {
	case http.MethodGet:
		if cur == nil {
			http.Error(rw, "variable not found", http.StatusNotFound)
			return
		}
		s.headers(rw)
		_ = json.NewEncoder(rw).Encode(cur)
	case http.MethodPut:
		s.index++
		in.Namespace, in.Path, in.ModifyIndex = ns, strings.TrimPrefix(p, "var/"), s.index
		in.CreateIndex = s.index
		if cur != nil {
			in.CreateIndex = cur.CreateIndex
		}
		s.vars[key] = &in
		s.headers(rw)
		_ = json.NewEncoder(rw).Encode(&in)
	case http.MethodDelete:
		s.index++
		delete(s.vars, key)
		s.headers(rw)
	default:
		http.Error(rw, fmt.Sprintf("method %s on a variable", r.Method), http.StatusMethodNotAllowed)
	}
}

// listVariables lists the metadata of namespace ns's variables under
// prefix, by path.
func (s *Server) listVariables(rw http.ResponseWriter, ns, prefix string) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := []*api.VariableMetadata{}
	for _, v := range s.vars {
		if v.Namespace == ns && strings.HasPrefix(v.Path, prefix) {
			out = append(out, &api.VariableMetadata{Namespace: v.Namespace, Path: v.Path, CreateIndex: v.CreateIndex, ModifyIndex: v.ModifyIndex})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	s.headers(rw)
	_ = json.NewEncoder(rw).Encode(out)
}

func modifyIndex(v *api.Variable) uint64 {
	if v == nil {
		return 0
	}
	return v.ModifyIndex
}
