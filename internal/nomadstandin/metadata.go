package nomadstandin

import (
	"encoding/json"
	"net/http"
	"slices"

	"github.com/hashicorp/nomad/api"
)

// metadata serves /v1/client/metadata: a node's dynamic metadata (GET,
// ?node_id=) and changes to it (POST, api.NodeMetaApplyRequest; a null
// value unsets a key). As on a real cluster, a change moves the node's
// modify index and publishes a Node event with the whole node, device
// inventory included.
func (s *Server) metadata(rw http.ResponseWriter, r *http.Request) {
	id := r.URL.Query().Get("node_id")
	var change api.NodeMetaApplyRequest
	if r.Method != http.MethodGet {
		if err := json.NewDecoder(r.Body).Decode(&change); err != nil {
			http.Error(rw, "decoding the metadata change: "+err.Error(), http.StatusBadRequest)
			return
		}
		id = change.NodeID
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	i := slices.IndexFunc(s.w.nodes, func(n *api.Node) bool { return n.ID == id })
	if i < 0 {
		http.Error(rw, "node not found", http.StatusNotFound)
		return
	}
	if len(change.Meta) > 0 {
		s.applyMeta(i, change.Meta)
	}
	n := s.w.nodes[i]
	dyn := s.dynamic[id]
	s.headers(rw, "nodes")
	_ = json.NewEncoder(rw).Encode(api.NodeMetaResponse{Meta: n.Meta, Dynamic: dyn, Static: map[string]string{}})
}

// applyMeta changes node i's dynamic metadata and publishes the node;
// s.mu is held.
func (s *Server) applyMeta(i int, change map[string]*string) {
	n := s.w.nodes[i]
	if s.dynamic[n.ID] == nil {
		s.dynamic[n.ID] = map[string]*string{}
	}
	meta := make(map[string]string, len(n.Meta)+len(change))
	for k, v := range n.Meta {
		meta[k] = v
	}
	for k, v := range change {
		s.dynamic[n.ID][k] = v
		if v == nil {
			delete(meta, k)
		} else {
			meta[k] = *v
		}
	}
	s.index++
	s.tables["nodes"] = s.index
	updated := *n
	updated.Meta, updated.ModifyIndex = meta, s.index
	s.w.nodes[i] = &updated
	s.encodeNode(i)
	s.publish(event{Topic: api.TopicNode, Type: "NodeRegistration", Key: n.ID, FilterKeys: []string{}, Payload: map[string]any{"Node": &updated}})
}

// encodeNode encodes node i's answers: its stub with and without
// resources, and the node in full.
func (s *Server) encodeNode(i int) {
	n := s.w.nodes[i]
	stub := nodeStub(n)
	s.nodeJSON[i] = mustJSON(stub)
	stub.NodeResources, stub.ReservedResources = nil, nil
	s.nodeLean[i] = mustJSON(stub)
	s.nodeFull[n.ID] = mustJSON(n)
}
