package nomadwatch

import (
	"context"
	"fmt"

	"github.com/gpushare/nomad-gpushare/device/ids"
	nomadapi "github.com/hashicorp/nomad/api"
)

// nodeInfo returns the full node (attributes and meta, which constraints
// read and the node list leaves out) of every listed node that publishes
// gpushare devices, reading a node again only when its modify index
// changed; nodes no longer listed leave the cache.
func (b *Builder) nodeInfo(ctx context.Context, stubs []*nomadapi.NodeListStub) (map[string]*nomadapi.Node, error) {
	out := map[string]*nomadapi.Node{}
	for _, n := range stubs {
		if !publishesGPUs(n) {
			continue
		}
		b.mu.Lock()
		cached := b.nodes[n.ID]
		b.mu.Unlock()
		if cached == nil || cached.ModifyIndex != n.ModifyIndex {
			full, _, err := b.nomad.Nodes().Info(n.ID, (&nomadapi.QueryOptions{}).WithContext(ctx))
			if err != nil {
				return nil, fmt.Errorf("reading Nomad node %s: %w", n.ID, err)
			}
			cached = full
			b.mu.Lock()
			b.nodes[n.ID] = full
			b.mu.Unlock()
		}
		out[n.ID] = cached
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for id := range b.nodes {
		if out[id] == nil {
			delete(b.nodes, id)
		}
	}
	return out, nil
}

// publishesGPUs reports whether a listed node has a gpushare device group.
func publishesGPUs(n *nomadapi.NodeListStub) bool {
	if n.NodeResources == nil {
		return false
	}
	for _, g := range n.NodeResources.Devices {
		if g != nil && g.Vendor == ids.Vendor && (g.Type == ids.TypeWhole || g.Type == ids.TypeShare) {
			return true
		}
	}
	return false
}
