package nomadwatch

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash"
	"hash/fnv"
	"math"
	"slices"

	nomadapi "github.com/hashicorp/nomad/api"
)

// decodePayload reads field of an event's payload (which the API client
// decoded into maps) into a T. The client's own accessors (Event.Node,
// Event.Allocation) decode those maps with mapstructure, which took 46%
// of the service's CPU at 500 nodes of 808 device instances each while
// ranks were published (`scalebench -cpu-profile`, docs/scale.md):
// every metadata write is a node event that carries the whole node. The
// maps go through encoding/json instead, which reads the same field
// names. A payload without field is (nil, nil).
func decodePayload[T any](ev *nomadapi.Event, field string) (*T, error) {
	raw, ok := ev.Payload[field]
	if !ok || raw == nil {
		return nil, nil
	}
	return decodeValue[T](raw, field)
}

// decodeValue reads raw, a payload's field (or part of one) as the API
// client decoded it, into a T.
func decodeValue[T any](raw any, field string) (*T, error) {
	b, err := json.Marshal(raw)
	if err != nil {
		return nil, fmt.Errorf("re-encoding the event's %s: %w", field, err)
	}
	out := new(T)
	if err := json.Unmarshal(b, out); err != nil {
		return nil, fmt.Errorf("decoding the event's %s: %w", field, err)
	}
	return out, nil
}

// decodeNodeEvent is the cache's entry for a node event. Most node events
// change no resources: a metadata write (the placement ranks), a status or
// eligibility change, a heartbeat's. When the event's NodeResources, the
// bulk of a GPU node (808 device instances at 8 GPUs and 100 shares
// each), digest the same as those of the event the cached entry was
// decoded from, the rest of the node is decoded and the cached resources
// and devices are kept.
func (c *cache) decodeNodeEvent(ev *nomadapi.Event) (nodeEntry, error) {
	raw, _ := ev.Payload["Node"].(map[string]any)
	if raw == nil {
		return nodeEntry{}, orMissing(nil)
	}
	res := nodeResources(raw["NodeResources"])
	if old, ok := c.nodes[ev.Key]; ok && old.resources != 0 && old.resources == res {
		rest := make(map[string]any, len(raw))
		for k, v := range raw {
			if k != "NodeResources" {
				rest[k] = v
			}
		}
		n, err := decodeValue[nomadapi.Node](rest, "Node")
		if err != nil {
			return nodeEntry{}, err
		}
		full, _ := compactNode(n)
		full.NodeResources = old.full.NodeResources
		return nodeEntry{stub: nodeStub(full), full: full, dev: old.dev, resources: res}, nil
	}
	n, err := decodePayload[nomadapi.Node](ev, "Node")
	if err != nil || n == nil {
		return nodeEntry{}, orMissing(err)
	}
	e := newNodeEntry(n)
	e.resources = res
	return e, nil
}

// nodeResources digests a node payload's NodeResources as the event's
// maps hold them (FNV-1a over the tree, map keys in order); never 0.
func nodeResources(v any) uint64 {
	h := fnv.New64a()
	digestTree(h, v)
	return h.Sum64() | 1
}

func digestTree(h hash.Hash64, v any) {
	var buf [9]byte
	switch x := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		h.Write([]byte{'{'})
		for _, k := range keys {
			h.Write([]byte(k))
			h.Write([]byte{':'})
			digestTree(h, x[k])
		}
		h.Write([]byte{'}'})
	case []any:
		h.Write([]byte{'['})
		for _, e := range x {
			digestTree(h, e)
			h.Write([]byte{','})
		}
		h.Write([]byte{']'})
	case string:
		h.Write([]byte{'s'})
		h.Write([]byte(x))
		h.Write([]byte{0})
	case float64:
		buf[0] = 'f'
		binary.LittleEndian.PutUint64(buf[1:], math.Float64bits(x))
		h.Write(buf[:])
	case bool:
		if x {
			h.Write([]byte{'t'})
		} else {
			h.Write([]byte{'F'})
		}
	case nil:
		h.Write([]byte{'n'})
	default:
		fmt.Fprintf(h, "?%T%v", x, x)
	}
}
