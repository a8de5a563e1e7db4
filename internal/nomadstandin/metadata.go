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
// s.mu is held. The generated nodes keep no resources (New), so the node
// is read back from its encoding.
func (s *Server) applyMeta(i int, change map[string]*string) {
	id := s.w.nodes[i].ID
	var n api.Node
	if err := json.Unmarshal(s.nodeFull[id], &n); err != nil {
		panic(err) // the stand-in's own encoding
	}
	if s.dynamic[id] == nil {
		s.dynamic[id] = map[string]*string{}
	}
	if n.Meta == nil {
		n.Meta = map[string]string{}
	}
	for k, v := range change {
		s.dynamic[id][k] = v
		if v == nil {
			delete(n.Meta, k)
		} else {
			n.Meta[k] = *v
		}
	}
	s.index++
	s.tables["nodes"] = s.index
	n.ModifyIndex = s.index
	s.encodeNode(i, &n)
	kept := *s.w.nodes[i]
	kept.Meta, kept.ModifyIndex = n.Meta, n.ModifyIndex
	s.w.nodes[i] = &kept
	s.publish(event{Topic: api.TopicNode, Type: "NodeRegistration", Key: id, FilterKeys: []string{}, Payload: map[string]any{"Node": &n}})
}

// encodeNode encodes node i's answers from n: its stub with and without
// resources, and the node in full.
func (s *Server) encodeNode(i int, n *api.Node) {
	stub := nodeStub(n)
	s.nodeJSON[i] = mustJSON(stub)
	stub.NodeResources, stub.ReservedResources = nil, nil
	s.nodeLean[i] = mustJSON(stub)
	s.nodeFull[n.ID] = mustJSON(n)
}
