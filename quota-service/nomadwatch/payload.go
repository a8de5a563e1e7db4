package nomadwatch

import (
	"encoding/json"
	"fmt"
	"math"

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
//
// A metadata write (the placement ranks, every 2 s at most) changes only
// the node's Meta and ModifyIndex: when the rest of the node digests the
// same too, the cached entry is kept with the event's Meta and index.
func (c *cache) decodeNodeEvent(ev *nomadapi.Event) (nodeEntry, error) {
	raw, _ := ev.Payload["Node"].(map[string]any)
	if raw == nil {
		return nodeEntry{}, orMissing(nil)
	}
	res, rest := nodeResources(raw["NodeResources"]), nodeRest(raw)
	var same *nodeEntry // the cached entry, when its resources digest as res
	if old, ok := c.nodes[ev.Key]; ok && old.resources != 0 && old.resources == res {
		same = &old
	}
	if same != nil && same.rest == rest {
		if e, ok := same.withMeta(raw); ok {
			return e, nil
		}
	}
	e, err := decodeNode(same, raw, res)
	e.rest = rest
	return e, err
}

// withMeta is the entry with the Meta and ModifyIndex of raw, a node
// payload that differs from the entry's in nothing else; false when raw's
// Meta or ModifyIndex are not what a node's are (the payload is then
// decoded in full, which says what is wrong).
func (e nodeEntry) withMeta(raw map[string]any) (nodeEntry, bool) {
	index, ok := raw["ModifyIndex"].(float64)
	if !ok || index < 0 || index >= 1<<63 || index != math.Trunc(index) {
		return nodeEntry{}, false
	}
	var meta map[string]string
	switch m := raw["Meta"].(type) {
	case nil:
	case map[string]any:
		meta = make(map[string]string, len(m))
		for k, v := range m {
			s, ok := v.(string)
			if !ok {
				return nodeEntry{}, false
			}
			meta[k] = s
		}
	default:
		return nodeEntry{}, false
	}
	full := *e.full
	full.Meta, full.ModifyIndex = shared(meta), uint64(index)
	e.full, e.stub = &full, nodeStub(&full)
	return e, true
}

// decodeNode decodes a node payload raw whose NodeResources digest to
// res, keeping the devices of same, the cached entry whose resources
// digest the same (nil: none).
func decodeNode(same *nodeEntry, raw map[string]any, res uint64) (nodeEntry, error) {
	if same != nil {
		n, err := decodeValue[nomadapi.Node](without(raw, "NodeResources"), "Node")
		if err != nil {
			return nodeEntry{}, err
		}
		full, _ := compactNode(n)
		full.NodeResources = same.full.NodeResources
		return nodeEntry{stub: nodeStub(full), full: full, dev: same.dev, resources: res}, nil
	}
	n, err := decodeNodeTree(raw)
	if err != nil {
		return nodeEntry{}, err
	}
	e := newNodeEntry(n)
	e.resources = res
	return e, nil
}

// nodeRest digests a node payload without its NodeResources, Meta and
// ModifyIndex (as nodeResources does); never 0.
func nodeRest(raw map[string]any) uint64 {
	var sum uint64
	for k, v := range raw {
		switch k {
		case "NodeResources", "Meta", "ModifyIndex":
		default:
			sum += pairDigest(k, v)
		}
	}
	return uint64(fnvOffset.u64(sum)) | 1
}

// nodeResources digests a node payload's NodeResources as the event's
// maps hold them (FNV-1a over the tree; a map is the sum of its pairs'
// digests, so that no keys are sorted); never 0.
func nodeResources(v any) uint64 {
	return uint64(fnvOffset.tree(v)) | 1
}

// fnv64 is an FNV-1a 64-bit hash state, written to without allocating.
type fnv64 uint64

const (
	fnvOffset fnv64 = 14695981039346656037
	fnvPrime  fnv64 = 1099511628211
)

func (h fnv64) byte(b byte) fnv64 { return (h ^ fnv64(b)) * fnvPrime }

func (h fnv64) str(s string) fnv64 {
	for i := 0; i < len(s); i++ {
		h = (h ^ fnv64(s[i])) * fnvPrime
	}
	return h.byte(0)
}

func (h fnv64) u64(x uint64) fnv64 {
	for i := 0; i < 8; i++ {
		h = h.byte(byte(x >> (8 * i)))
	}
	return h
}

// pairDigest digests one key and value of a map on its own.
func pairDigest(k string, v any) uint64 {
	return uint64(fnvOffset.str(k).tree(v))
}

// tree adds v, a JSON value as encoding/json decodes it into an any.
func (h fnv64) tree(v any) fnv64 {
	switch x := v.(type) {
	case map[string]any:
		var sum uint64
		for k, e := range x {
			sum += pairDigest(k, e)
		}
		return h.byte('{').u64(sum).u64(uint64(len(x)))
	case []any:
		h = h.byte('[')
		for _, e := range x {
			h = h.tree(e).byte(',')
		}
		return h.byte(']')
	case string:
		return h.byte('s').str(x)
	case float64:
		return h.byte('f').u64(math.Float64bits(x))
	case bool:
		if x {
			return h.byte('t')
		}
		return h.byte('F')
	case nil:
		return h.byte('n')
	default:
		return h.byte('?').str(fmt.Sprintf("%T%v", x, x))
	}
}
