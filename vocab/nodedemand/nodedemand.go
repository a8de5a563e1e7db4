// Package nodedemand is the wire format of the demand the quota service's
// leader publishes for each node's idle GPUs (docs/design.md, Partition
// protocol, "Published demand"): which whole and share requests the
// service's plan places on the node. It is published as Nomad Variables
// (namespace DefaultNamespace): a heartbeat at <prefix>/leader that the
// leader rewrites every beat period, and one variable per node with demand
// at <prefix>/nodes/<node ID>, written only when that node's demand
// changes. A node variable counts only when its epoch is the heartbeat's
// (the leader that wrote it still leads).
//
// Nothing here is a trust root: the plugin's partition protocol stays safe
// whatever a variable says (demand only picks the family an idle GPU is
// switched to; the switch protocol and Reserve keep a GPU out of both
// families at once). So Decode only refuses what it cannot read or what is
// out of range; a bogus value costs switches, never a double booking.
package nodedemand

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/gpushare/nomad-gpushare/vocab"
)

// DefaultPrefix is the default variable path prefix.
const DefaultPrefix = "gpushare/demand"

// DefaultNamespace is the namespace of the variables.
const DefaultNamespace = "default"

// DefaultBeat is the leader's default heartbeat period.
const DefaultBeat = 15 * time.Second

// StaleBeats is how many beat periods without a new heartbeat make the
// published demand stale: the plugin then reads Nomad itself.
const StaleBeats = 3

// Bounds a plugin accepts; anything beyond is nonsense (Decode refuses it).
const (
	// MinBeat and MaxBeat bound the heartbeat period a plugin believes.
	MinBeat = time.Second
	MaxBeat = 5 * time.Minute
	// MaxRequests bounds the requests of one node's demand.
	MaxRequests = 1024
	// MaxWhole bounds one whole request's GPU count.
	MaxWhole = 64
)

// LeaderPath is the heartbeat's path under prefix.
func LeaderPath(prefix string) string { return strings.TrimSuffix(prefix, "/") + "/leader" }

// NodesPrefix is the folder of the node variables under prefix.
func NodesPrefix(prefix string) string { return strings.TrimSuffix(prefix, "/") + "/nodes/" }

// NodePath is node's variable path under prefix.
func NodePath(prefix, node string) string { return NodesPrefix(prefix) + node }

// Item names.
const (
	itemEpoch    = "epoch"
	itemInstance = "instance"
	itemBeat     = "beat"
	itemSeq      = "seq"
	itemDemand   = "demand"
)

// Leader is the heartbeat: which leader publishes (Epoch, new at each
// leadership), every how often it beats, and a sequence number that makes
// each beat a change.
type Leader struct {
	Epoch    string
	Instance string
	Beat     time.Duration
	Seq      uint64
}

// Items encodes the heartbeat.
func (l Leader) Items() map[string]string {
	return map[string]string{itemEpoch: l.Epoch, itemInstance: l.Instance, itemBeat: l.Beat.String(), itemSeq: strconv.FormatUint(l.Seq, 10)}
}

// DecodeLeader reads a heartbeat; an error says why it is nonsense.
func DecodeLeader(items map[string]string) (Leader, error) {
	l := Leader{Epoch: items[itemEpoch], Instance: items[itemInstance]}
	if l.Epoch == "" {
		return Leader{}, errors.New("heartbeat without an epoch")
	}
	b, err := time.ParseDuration(items[itemBeat])
	if err != nil {
		return Leader{}, fmt.Errorf("heartbeat period %q: %w", items[itemBeat], err)
	}
	if b < MinBeat || b > MaxBeat {
		return Leader{}, fmt.Errorf("heartbeat period %s outside [%s, %s]", b, MinBeat, MaxBeat)
	}
	l.Beat = b
	if l.Seq, err = strconv.ParseUint(items[itemSeq], 10, 64); err != nil {
		return Leader{}, fmt.Errorf("heartbeat sequence %q: %w", items[itemSeq], err)
	}
	return l, nil
}

// Request is one instance the plan places on the node: Whole GPUs, or
// Shares units of one GPU (exactly one is positive).
type Request struct {
	Whole  int `json:"whole,omitempty"`
	Shares int `json:"shares,omitempty"`
}

// Node is one node's demand: the requests in the plan's order (the
// service's priority order), and the epoch of the leader that computed it.
type Node struct {
	Epoch    string
	Requests []Request
}

// Empty reports whether the node has no demand.
func (n Node) Empty() bool { return len(n.Requests) == 0 }

// Whole is the number of whole GPUs the requests want.
func (n Node) Whole() int {
	w := 0
	for _, r := range n.Requests {
		w += r.Whole
	}
	return w
}

// Items encodes a node's demand.
func (n Node) Items() map[string]string {
	b, _ := json.Marshal(n.Requests) // a slice of plain structs always encodes
	if n.Requests == nil {
		b = []byte("[]")
	}
	return map[string]string{itemEpoch: n.Epoch, itemDemand: string(b)}
}

// Same reports whether two demands publish the same value.
func (n Node) Same(o Node) bool {
	if n.Epoch != o.Epoch || len(n.Requests) != len(o.Requests) {
		return false
	}
	for i := range n.Requests {
		if n.Requests[i] != o.Requests[i] {
			return false
		}
	}
	return true
}

// DecodeNode reads a node's demand; an error says why it is nonsense.
func DecodeNode(items map[string]string) (Node, error) {
	n := Node{Epoch: items[itemEpoch]}
	if n.Epoch == "" {
		return Node{}, errors.New("node demand without an epoch")
	}
	if err := json.Unmarshal([]byte(items[itemDemand]), &n.Requests); err != nil {
		return Node{}, fmt.Errorf("node demand %q: %w", items[itemDemand], err)
	}
	if len(n.Requests) > MaxRequests {
		return Node{}, fmt.Errorf("node demand of %d requests (at most %d)", len(n.Requests), MaxRequests)
	}
	for i, r := range n.Requests {
		switch {
		case r.Whole > 0 && r.Shares == 0 && r.Whole <= MaxWhole:
		case r.Shares > 0 && r.Whole == 0 && r.Shares <= vocab.UnitsPerGPU:
		default:
			return Node{}, fmt.Errorf("node demand request %d: %+v is neither 1 to %d whole GPUs nor 1 to %d units of one", i, r, MaxWhole, vocab.UnitsPerGPU)
		}
	}
	return n, nil
}
