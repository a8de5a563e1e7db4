// Package alloctrack reads, from the Nomad API, which gpushare device
// instances the live allocations of this node hold, and which instances the
// Nomad servers currently see published. Nomad gives device plugins no
// release callback, so this is how the plugin learns that a reservation
// ended; everything is rebuilt from the API on each read, so nothing is lost
// when the plugin or the Nomad client restarts.
//
// A read says whether it can be trusted as complete: the token's policies
// are checked (package aclview), because Nomad silently leaves out the
// allocations of namespaces a token cannot read. Its indexes never go
// backwards: reads are stale (any server answers) unless asked otherwise,
// and an answer older than one already seen is refused and read again from
// the leader.
//
// While Watch runs, the node, its allocations and the blocked evaluations
// are followed with Nomad's blocking queries (watch.go), and Read answers
// from what they last returned unless asked for a fresh read: an idle node
// then costs a few requests per blocking-query wait instead of a full read
// per poll.
package alloctrack

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/gpushare/nomad-gpushare/device/aclview"
	"github.com/gpushare/nomad-gpushare/vocab"
	"github.com/gpushare/nomad-gpushare/vocab/nomadread"
	hclog "github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"
)

// Config says how to reach Nomad and which node is ours.
type Config struct {
	// Address of the Nomad HTTP API; empty means NOMAD_ADDR, else
	// http://127.0.0.1:4646.
	Address string
	// Token is the ACL token; empty means NOMAD_TOKEN.
	Token string
	// NodeID, if set, is used as is. Otherwise NodeName, if set, is looked
	// up; otherwise the local agent's own node ID (/v1/agent/self), else the
	// node whose name is the hostname.
	NodeID   string
	NodeName string
	// Timeout bounds each HTTP request (default 5s).
	Timeout time.Duration
	// Demand: Read also lists the waiting demand (see Demand).
	Demand bool
	// Published: where the quota service publishes each node's demand
	// (published.go); while it is fresh, Read takes the demand from there
	// instead of listing the blocked evaluations.
	Published PublishedConfig
	// Logger, if set, gets debug messages.
	Logger hclog.Logger
}

// GPUHolding is what Nomad says holds one GPU: the live allocations that
// hold it, and whether the servers see it offered.
type GPUHolding struct {
	// WholeAllocs are the live allocations holding the GPU whole.
	WholeAllocs []string
	// ShareUnits held by live allocations, and by whom.
	ShareUnits  int
	ShareAllocs []string
	// ServerWhole / ServerShare: the servers' view of the node has a
	// healthy instance of the GPU in the whole / share family.
	ServerWhole, ServerShare bool
}

// Snapshot is one read of the node.
type Snapshot struct {
	// Started is taken before anything is read, so every placement applied
	// before Started is in the snapshot (for a Consistent one; a stale read
	// may lag). For a Watched snapshot it is when the request was sent
	// whose answer the snapshot holds (or that confirmed it unchanged).
	Started time.Time
	// Current is when the snapshot was last known to be current: Started
	// for a read made for it; for a Watched one, the time of the Read (the
	// blocking queries had reported no change by then; like a stale read,
	// a change applied a moment before may still be on its way).
	Current time.Time
	// Watched: answered from the blocking queries of Watch, without a
	// request.
	Watched bool
	NodeID  string
	// NodeIndex is the modify index of the servers' view of the node.
	NodeIndex uint64
	GPUs      map[string]*GPUHolding
	// Tenants are the tasks of the live allocations that hold gpushare
	// devices.
	Tenants []Tenant
	// Consistent is set when the node and its allocations were read from
	// the leader (ReadOptions.Consistent, or a stale answer refused).
	Consistent bool
	// Hidden says which allocations the token may not see (see package
	// aclview); empty when the allocation list is complete.
	Hidden string
	// Foreign are the nvidia device groups of the node that another plugin
	// publishes (HashiCorp's nvidia plugin): "vendor/type/name", sorted.
	Foreign []string
	// Demand waiting that this node could serve (Config.Demand). When it
	// could not be read, DemandErr says why and Demand is empty.
	Demand    []Demand
	DemandErr error
	// FromService: Demand is the quota service's published demand (see
	// PublishedConfig); else it was read from the blocked evaluations,
	// and Published says why the service's was not taken.
	FromService bool
	Published   PublishedState
}

// Tracker reads snapshots. Read is not safe for concurrent Read calls;
// Watch runs beside it.
type Tracker struct {
	cfg    Config
	client *api.Client
	now    func() time.Time
	jobs   jobCache // used by Read only
	// fenceJobs are the jobs of the live evaluations PlansApplied last
	// read; used by PlansApplied only (the loop's goroutine, as Read).
	fenceJobs jobCache

	idMu   sync.Mutex
	nodeID string

	aclMu sync.Mutex
	acl   *aclview.Checker
	// verdict is the last check of the token, nil before the first.
	verdict *aclview.Verdict

	mu   sync.Mutex
	view view
	// nodeChanged gets a token when Watch takes a changed view of the node.
	nodeChanged chan struct{}
}

// view is the last accepted read of the node, its allocations and the
// blocked evaluations, whether by Read or by Watch.
type view struct {
	node   *api.Node
	allocs []*api.Allocation
	// seen are the indexes of node and allocs: an answer below them is
	// refused.
	seen indexes
	// nodeAt / allocsAt: node / allocs hold every change applied before.
	nodeAt, allocsAt time.Time
	// hidden is the token check of the read that gave allocs (Snapshot.Hidden).
	hidden string
	// nodeLive / allocsLive / evalsLive: Watch runs and the last blocking
	// query of the node / the allocations / the blocked evaluations
	// succeeded, so a change since is reported at once.
	nodeLive, allocsLive, evalsLive bool
	// allocsChanged: the request that brought the last change of allocs
	// (its index moved) was sent then.
	allocsChanged time.Time
	// placedIndex is the highest create index of the node's allocations
	// (the Raft index of the newest placement), placedAt when the plugin
	// first saw it (published.go).
	placedIndex uint64
	placedAt    time.Time
	// evals are the blocked evaluations, evalsIndex their index, evalsAt
	// when the request that returned them was sent.
	evals      []*api.Evaluation
	evalsIndex uint64
	evalsAt    time.Time
	// pub is the published demand (published.go).
	pub published
}

// indexes are the X-Nomad-Index values of one read of the node and of its
// allocation list.
type indexes struct{ node, allocs uint64 }

// New makes a tracker; it does not contact Nomad yet.
func New(cfg Config) (*Tracker, error) {
	ac := api.DefaultConfig() // reads NOMAD_ADDR, NOMAD_TOKEN, TLS variables
	if cfg.Address != "" {
		ac.Address = cfg.Address
	}
	if cfg.Token != "" {
		ac.SecretID = cfg.Token
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 5 * time.Second
	}
	c, err := api.NewClient(ac)
	if err != nil {
		return nil, fmt.Errorf("nomad API client for %s: %w", ac.Address, err)
	}
	return &Tracker{cfg: cfg, client: c, nodeID: cfg.NodeID, now: time.Now, acl: aclview.NewChecker(c), nodeChanged: make(chan struct{}, 1)}, nil
}

// NodeChanged receives a token when Watch takes a changed view of the node
// from the servers (one token may stand for several changes).
func (t *Tracker) NodeChanged() <-chan struct{} { return t.nodeChanged }

// Address is the Nomad address in use.
func (t *Tracker) Address() string { return t.client.Address() }

// q returns options for one request: a stale read (any server answers),
// bounded by Config.Timeout.
func (t *Tracker) q(ctx context.Context) (*api.QueryOptions, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(ctx, t.cfg.Timeout)
	return (&api.QueryOptions{AllowStale: true}).WithContext(ctx), cancel
}

// ErrNodeNotFound is returned when the plugin cannot tell which node it
// runs on.
var ErrNodeNotFound = errors.New("nomad node of this plugin not found")

// NodeID returns this plugin's node ID, resolving it once: Config.NodeID,
// else the node named Config.NodeName, else the local agent's own node
// (/v1/agent/self), else the node named like the hostname. When the agent
// cannot tell and the hostname lookup fails too, the error carries both
// reasons (an ACL denial on the agent reads as one, not as a missing node).
func (t *Tracker) NodeID(ctx context.Context) (string, error) {
	t.idMu.Lock()
	defer t.idMu.Unlock()
	if t.nodeID != "" {
		return t.nodeID, nil
	}
	if t.cfg.NodeName != "" {
		return t.nodeNamed(ctx, t.cfg.NodeName)
	}
	id, agentErr := t.agentNodeID(ctx)
	if agentErr == nil {
		t.nodeID = id
		return id, nil
	}
	h, err := os.Hostname()
	if err != nil {
		return "", fmt.Errorf("%w: set node_id or node_name in the plugin config (hostname: %v; %w)", ErrNodeNotFound, err, agentErr)
	}
	id, err = t.nodeNamed(ctx, h)
	if err != nil {
		return "", fmt.Errorf("%w (and %w)", err, agentErr)
	}
	return id, nil
}

// agentNodeID asks the local agent for its client's node ID.
func (t *Tracker) agentNodeID(ctx context.Context) (string, error) {
	var self api.AgentSelf
	q, cancel := t.q(ctx)
	defer cancel()
	if _, err := t.client.Raw().Query("/v1/agent/self", &self, q); err != nil {
		return "", fmt.Errorf("asking the local agent for its node (%s/v1/agent/self): %w", t.client.Address(), err)
	}
	id := self.Stats["client"]["node_id"]
	if id == "" {
		return "", fmt.Errorf("the agent at %s runs no client", t.client.Address())
	}
	return id, nil
}

// nodeNamed looks the node up by name and remembers its ID.
func (t *Tracker) nodeNamed(ctx context.Context, name string) (string, error) {
	q, cancel := t.q(ctx)
	defer cancel()
	nodes, _, err := t.client.Nodes().List(q)
	if err != nil {
		return "", fmt.Errorf("list nodes at %s: %w", t.client.Address(), err)
	}
	var match []string
	for _, n := range nodes {
		if n.Name == name {
			match = append(match, n.ID)
		}
	}
	switch len(match) {
	case 1:
		t.nodeID = match[0]
		return t.nodeID, nil
	case 0:
		return "", fmt.Errorf("%w: no node named %q at %s; set node_id or node_name in the plugin config", ErrNodeNotFound, name, t.client.Address())
	default:
		return "", fmt.Errorf("%w: %d nodes named %q; set node_id in the plugin config", ErrNodeNotFound, len(match), name)
	}
}

// ReadOptions tune one Read.
type ReadOptions struct {
	// Consistent reads the node and its allocations from the leader
	// instead of any server: the answer then includes every allocation
	// placed before the read began.
	Consistent bool
	// Fresh reads the node and its allocations now (from any server)
	// instead of answering from the blocking queries of Watch, so that
	// Started is the time of this Read.
	Fresh bool
	// MaxAge, when set, reads the node and its allocations now when what
	// the blocking queries last returned (or confirmed) is older: a bound
	// on how long a query that does not answer can hide a change.
	MaxAge time.Duration
}

// Read takes one snapshot of the node: whether the token sees every
// allocation, the servers' view of the node's devices, the allocations, and
// (Config.Demand) the waiting demand. While Watch follows the node and its
// allocations, and the last answer was complete, it answers from them
// (Snapshot.Watched) unless o asks for a read. Indexes never go backwards:
// a stale answer older than one already accepted (a lagging server) is
// refused and the node read again from the leader, whose answer stands.
// Until a first answer is accepted there is nothing to compare with, so
// the first read is the leader's: a server that restarts answers stale
// reads from a state it has not finished restoring (an empty allocation
// list at index 1 was seen), and a plugin started at the same moment
// would take its GPUs for idle.
func (t *Tracker) Read(ctx context.Context, o ReadOptions) (Snapshot, error) {
	now := t.now()
	nodeID, err := t.NodeID(ctx)
	if err != nil {
		return Snapshot{}, err
	}
	var snap Snapshot
	var b *basis
	if o.Consistent || o.Fresh {
		snap, b, err = t.readActive(ctx, nodeID, o.Consistent)
	} else if snap, b = t.watched(nodeID, now, o.MaxAge); b == nil {
		snap, b, err = t.readActive(ctx, nodeID, false)
	}
	if err != nil {
		return Snapshot{}, err
	}
	if t.cfg.Demand {
		t.mu.Lock()
		idx, at := t.view.placedIndex, t.view.placedAt
		t.mu.Unlock()
		if d, st := t.publishedDemand(now, idx, at); st.Fresh {
			snap.Demand, snap.FromService, snap.Published = d, true, st
		} else {
			snap.Published = st
			snap.Demand, snap.DemandErr = t.readDemand(ctx, b)
		}
	}
	return snap, nil
}

// basis is what a snapshot was built from: the servers' view of the node
// and its allocation list. Demand is read against the same list, so that
// an allocation counted as usage is not counted as waiting too.
type basis struct {
	node   *api.Node
	allocs []*api.Allocation
}

// watched answers from the view when the blocking queries follow the node
// and its allocations, the last allocation list was complete and what they
// returned is at most maxAge old (0: any age); the basis is nil otherwise.
func (t *Tracker) watched(nodeID string, now time.Time, maxAge time.Duration) (Snapshot, *basis) {
	t.mu.Lock()
	defer t.mu.Unlock()
	v := &t.view
	if !v.nodeLive || !v.allocsLive || v.node == nil || v.node.ID != nodeID || v.hidden != "" {
		return Snapshot{}, nil
	}
	started := v.nodeAt
	if v.allocsAt.Before(started) {
		started = v.allocsAt
	}
	if maxAge > 0 && now.Sub(started) > maxAge {
		return Snapshot{}, nil
	}
	snap := t.snapshotLocked(nodeID, started, false)
	snap.Current, snap.Watched = now, true
	return snap, &basis{node: v.node, allocs: v.allocs}
}

// readActive checks the token, reads the node and its allocations now,
// and makes that the view unless a newer answer (of Watch) got there
// first; the snapshot is then the view's.
func (t *Tracker) readActive(ctx context.Context, nodeID string, consistent bool) (Snapshot, *basis, error) {
	started := t.now()
	before := t.checkVerdict(ctx)
	if t.seen() == (indexes{}) {
		consistent = true
	}
	node, allocs, idx, err := t.readNode(ctx, nodeID, consistent)
	if err == nil && !consistent && idx.behind(t.seen()) {
		t.debug("stale answer refused; reading from the leader", "node_index", idx.node, "allocs_index", idx.allocs)
		consistent = true
		node, allocs, idx, err = t.readNode(ctx, nodeID, true)
	}
	if err != nil {
		return Snapshot{}, nil, err
	}
	if allocs == nil {
		allocs = []*api.Allocation{}
	}
	hidden := combine(before, t.checkVerdict(ctx))
	t.mu.Lock()
	defer t.mu.Unlock()
	v := &t.view
	if consistent || !idx.behind(v.seen) {
		if idx.allocs != v.seen.allocs {
			v.allocsChanged = started
		}
		v.notePlaced(allocs, started)
		v.node, v.allocs, v.hidden = node, allocs, hidden
		v.nodeAt, v.allocsAt = started, started
		v.seen = idx.after(v.seen, consistent)
	}
	snap := t.snapshotLocked(nodeID, started, consistent)
	snap.Current = started
	return snap, &basis{node: v.node, allocs: v.allocs}, nil
}

// snapshotLocked builds a snapshot from the view; t.mu must be held.
func (t *Tracker) snapshotLocked(nodeID string, started time.Time, consistent bool) Snapshot {
	v := &t.view
	snap := Snapshot{Started: started, NodeID: nodeID, NodeIndex: v.node.ModifyIndex, GPUs: map[string]*GPUHolding{}, Consistent: consistent, Hidden: v.hidden}
	if v.node.NodeResources != nil {
		addServerView(snap.GPUs, v.node.NodeResources.Devices)
		snap.Foreign = foreignGroups(v.node.NodeResources.Devices)
	}
	addAllocations(snap.GPUs, v.allocs)
	snap.Tenants = tenantsOf(v.allocs)
	return snap
}

// seen returns the indexes accepted so far.
func (t *Tracker) seen() indexes {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.view.seen
}

// lastVerdict is the token's last check, made now if there was none.
func (t *Tracker) lastVerdict(ctx context.Context) aclview.Verdict {
	t.aclMu.Lock()
	v := t.verdict
	t.aclMu.Unlock()
	if v != nil {
		return *v
	}
	return t.checkVerdict(ctx)
}

// checkVerdict checks the token now and remembers the verdict.
func (t *Tracker) checkVerdict(ctx context.Context) aclview.Verdict {
	q, cancel := t.q(ctx)
	defer cancel()
	t.aclMu.Lock()
	defer t.aclMu.Unlock()
	v := t.acl.Check(q)
	t.verdict = &v
	return v
}

// combine is the Hidden of an answer from the checks of the token before
// the request was sent and after its answer came: Nomad resolves a
// request's token once, when it begins (a blocking query keeps it for its
// whole wait), and the token may change between a check and the request
// that follows it, so the answer is complete only when both checks are
// (barring a policy narrowed and widened again between them).
func combine(before, after aclview.Verdict) string {
	switch {
	case !after.Complete:
		return after.Reason
	case !before.Complete:
		return "the token's policies changed while the node was read, which may have left allocations out (" + before.Reason + "); reading again"
	}
	return ""
}

// readNode reads the servers' view of the node first, then its
// allocations: a placement made after the node view was read is still seen
// in the allocation list.
func (t *Tracker) readNode(ctx context.Context, nodeID string, consistent bool) (*api.Node, []*api.Allocation, indexes, error) {
	q, cancel := t.q(ctx)
	defer cancel()
	q.AllowStale = !consistent
	node, nm, err := t.client.Nodes().Info(nodeID, q)
	if err != nil {
		return nil, nil, indexes{}, fmt.Errorf("read node %s at %s: %w", nodeID, t.client.Address(), err)
	}
	allocs, am, err := t.client.Nodes().Allocations(nodeID, q)
	if err != nil {
		return nil, nil, indexes{}, fmt.Errorf("list allocations of node %s at %s: %w", nodeID, t.client.Address(), err)
	}
	return node, allocs, indexes{node: nm.LastIndex, allocs: am.LastIndex}, nil
}

// behind reports whether a read is older than one already accepted.
func (i indexes) behind(seen indexes) bool {
	return i.node < seen.node || i.allocs < seen.allocs
}

// after returns the indexes to keep once a read is accepted: the highest
// seen, unless the read came from the leader, which is authoritative (an
// allocation list's index can go down when the allocation that set it is
// garbage collected).
func (i indexes) after(seen indexes, consistent bool) indexes {
	if consistent {
		return i
	}
	return indexes{node: max(i.node, seen.node), allocs: max(i.allocs, seen.allocs)}
}

func get(m map[string]*GPUHolding, uuid string) *GPUHolding {
	u := m[uuid]
	if u == nil {
		u = &GPUHolding{}
		m[uuid] = u
	}
	return u
}

func addServerView(m map[string]*GPUHolding, groups []*api.NodeDeviceResource) {
	for _, g := range groups {
		if g == nil || g.Vendor != vocab.Vendor || (g.Type != vocab.TypeWhole && g.Type != vocab.TypeShare) {
			continue
		}
		for _, inst := range g.Instances {
			if inst == nil || !inst.Healthy {
				continue
			}
			id, err := vocab.Parse(inst.ID)
			if err != nil {
				continue
			}
			switch {
			case g.Type == vocab.TypeWhole && !id.IsShare:
				get(m, id.UUID).ServerWhole = true
			case g.Type == vocab.TypeShare && id.IsShare:
				get(m, id.UUID).ServerShare = true
			}
		}
	}
}

// foreignGroups lists the nvidia device groups without the plugin's
// sharing attribute: another plugin publishes them.
func foreignGroups(groups []*api.NodeDeviceResource) []string {
	var out []string
	for _, g := range groups {
		if g != nil && g.Vendor == vocab.Vendor && g.Attributes[vocab.SharingAttr] == nil {
			out = append(out, g.ID())
		}
	}
	sort.Strings(out)
	return out
}

// live reports whether an allocation may still be using its devices: every
// allocation that is not terminal on the client, whatever its desired
// status (a stopping allocation still runs).
func live(a *api.Allocation) bool {
	return !a.ClientTerminalStatus()
}

// addAllocations adds the devices held by the live allocations to m.
func addAllocations(m map[string]*GPUHolding, allocs []*api.Allocation) {
	for _, a := range allocs {
		if a == nil || !live(a) {
			continue
		}
		held := nomadread.HeldDevices(a.AllocatedResources)
		for _, u := range held.Whole {
			g := get(m, u)
			g.WholeAllocs = append(g.WholeAllocs, a.ID)
		}
		for _, s := range held.Shares {
			g := get(m, s.UUID)
			g.ShareUnits += s.Units
			g.ShareAllocs = append(g.ShareAllocs, a.ID)
		}
	}
}

// String summarizes a snapshot for logs.
func (s Snapshot) String() string {
	uuids := make([]string, 0, len(s.GPUs))
	for u := range s.GPUs {
		uuids = append(uuids, u)
	}
	sort.Strings(uuids)
	var b strings.Builder
	for _, u := range uuids {
		g := s.GPUs[u]
		fmt.Fprintf(&b, "%s: whole=%v shares=%d server(whole=%v share=%v); ", vocab.ShortUUID(u), g.WholeAllocs, g.ShareUnits, g.ServerWhole, g.ServerShare)
	}
	return b.String()
}
