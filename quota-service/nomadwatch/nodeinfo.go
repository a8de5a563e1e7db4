package nomadwatch

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/gpushare/nomad-gpushare/device/ids"
	nomadapi "github.com/hashicorp/nomad/api"
)

// nodeReads bounds the node reads in flight at once: a new leader reads
// every GPU node once, and a cluster has thousands.
const nodeReads = 8

// cachedNode is a full node and the modify index its listing showed when
// it was read.
type cachedNode struct {
	index uint64
	node  *nomadapi.Node
}

// nodeInfo returns the full node (attributes and meta, which constraints
// read and the node list leaves out) of every listed node that publishes
// gpushare devices, reading a node again only when its modify index
// changed; nodes no longer listed leave the cache.
func (b *Builder) nodeInfo(ctx context.Context, stubs []*nomadapi.NodeListStub) (map[string]*nomadapi.Node, error) {
	out := map[string]*nomadapi.Node{}
	var stale []*nomadapi.NodeListStub
	b.mu.Lock()
	for _, n := range stubs {
		if !publishesGPUs(n) {
			continue
		}
		if c, ok := b.nodes[n.ID]; ok && c.index == n.ModifyIndex {
			out[n.ID] = c.node
		} else {
			stale = append(stale, n)
		}
	}
	b.mu.Unlock()
	read, err := b.readNodes(ctx, stale)
	if err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, n := range stale {
		out[n.ID] = read[n.ID]
		b.nodes[n.ID] = cachedNode{index: n.ModifyIndex, node: read[n.ID]}
	}
	for id := range b.nodes {
		if out[id] == nil {
			delete(b.nodes, id)
		}
	}
	return out, nil
}

// readNodes reads the given nodes, nodeReads at a time.
func (b *Builder) readNodes(ctx context.Context, stubs []*nomadapi.NodeListStub) (map[string]*nomadapi.Node, error) {
	var (
		mu   sync.Mutex
		wg   sync.WaitGroup
		errs []error
		read = map[string]*nomadapi.Node{}
		slot = make(chan struct{}, nodeReads)
	)
	for _, n := range stubs {
		wg.Add(1)
		slot <- struct{}{}
		go func() {
			defer func() { <-slot; wg.Done() }()
			full, _, err := b.nomad.Nodes().Info(n.ID, (&nomadapi.QueryOptions{}).WithContext(ctx))
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, fmt.Errorf("reading Nomad node %s: %w", n.ID, err))
				return
			}
			read[n.ID] = full
		}()
	}
	wg.Wait()
	return read, errors.Join(errs...)
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
