package nomadwatch

import (
	"cmp"
	"fmt"
	"reflect"
	"slices"
	"strings"

	"github.com/gpushare/nomad-gpushare/vocab"
	"github.com/gpushare/nomad-gpushare/vocab/nomadread"
	nomadapi "github.com/hashicorp/nomad/api"
)

// kind is one kind of object the cache keeps.
type kind int

const (
	kindNode kind = iota
	kindAlloc
	kindJob
	numKinds
)

// String names the kind as the resync metric labels it.
func (k kind) String() string { return [...]string{"node", "allocation", "job"}[k] }

// nodeEntry is a node as the cache keeps it, decoded once per modify
// index: the full node (attributes, meta, device groups without their
// instance lists), what its device inventory holds, and the stub Assemble
// reads, derived from it.
type nodeEntry struct {
	stub *nomadapi.NodeListStub
	full *nomadapi.Node
	dev  *nodeDevices
	// resources is the digest of the NodeResources of the node event
	// the entry was decoded from (0 from a listing; see nodeResources),
	// rest that of the rest of it but Meta and ModifyIndex (nodeRest).
	resources, rest uint64
}

// newNodeEntry is the cache's entry of a node read in full.
func newNodeEntry(n *nomadapi.Node) nodeEntry {
	full, dev := compactNode(n)
	return nodeEntry{stub: nodeStub(full), full: full, dev: dev}
}

// allocEntry is a live (desired to run) allocation. versionKnown is false
// for an allocation that came from the event stream and was placed or
// updated in place since the service last listed it: Nomad's allocation
// events leave the job out, and with it the version the allocation runs.
type allocEntry struct {
	// stub is the allocation without its AllocatedResources, which res
	// holds as Assemble reads them.
	stub         *nomadapi.AllocationListStub
	res          *allocResources
	versionKnown bool
	// placed is the allocation's AllocModifyIndex (placement or in-place
	// update) when it came from an event; 0 from a listing.
	placed uint64
}

// newAllocEntry is the cache's entry of an allocation stub with resources
// r (which the entry keeps as Assemble reads them).
func newAllocEntry(stub *nomadapi.AllocationListStub, r *nomadapi.AllocatedResources) allocEntry {
	return allocEntry{stub: leanAllocStub(stub), res: readAllocResources(r)}
}

// leanAllocStub is the part of an allocation stub that the cache and
// Assemble read: a cluster has a hundred thousand allocations, and the
// rest of a stub (its resources, deployment and network status, metrics)
// is most of its size. Its names but the allocation's own ID are
// interned: many allocations name the same job, group and node.
func leanAllocStub(s *nomadapi.AllocationListStub) *nomadapi.AllocationListStub {
	return &nomadapi.AllocationListStub{ID: s.ID, Namespace: interned(s.Namespace), JobID: interned(s.JobID), JobType: interned(s.JobType),
		JobVersion: s.JobVersion, TaskGroup: interned(s.TaskGroup), NodeID: interned(s.NodeID), DesiredStatus: interned(s.DesiredStatus),
		ClientStatus: interned(s.ClientStatus), NextAllocation: s.NextAllocation, FollowupEvalID: s.FollowupEvalID,
		RescheduleTracker: s.RescheduleTracker, CreateIndex: s.CreateIndex, ModifyIndex: s.ModifyIndex,
		CreateTime: s.CreateTime, ModifyTime: s.ModifyTime}
}

// allocResources is what Assemble reads of an allocation's resources: its
// tasks' CPU and memory, and the GPUs it holds.
type allocResources struct {
	cpu, mem int64
	held     vocab.Held
}

// readAllocResources reads r; nil when the allocation has none.
func readAllocResources(r *nomadapi.AllocatedResources) *allocResources {
	if r == nil {
		return nil
	}
	cpu, mem := allocatedCPUMemory(r)
	return &allocResources{cpu: cpu, mem: mem, held: nomadread.HeldDevices(r)}
}

// cache is the service's view of Nomad: every node, every allocation
// desired to run and every job, each at the modify index Nomad last showed
// for it, kept by one listing and then by the event stream.
type cache struct {
	nodes  map[string]nodeEntry
	allocs map[string]allocEntry
	// order is every cached allocation, sorted by node and ID, the order
	// Assemble adds them in, kept as allocations come and go so that a
	// cycle does not sort a hundred thousand of them.
	order []allocRef
	jobs  map[string]*nomadapi.JobListStub
	// index is, by kind, the Nomad index the cache is current at: the
	// listing's, then every event's applied.
	index [numKinds]uint64
	// latest is the index of the newest event applied, of any topic.
	latest uint64
	// listedAt is, by kind, the index of the last listing adopted.
	listedAt [numKinds]uint64
	// deleted holds, by kind, the objects events deleted since the last
	// listing, at the index of their deletion, so that a listing read
	// before the deletion does not bring them back.
	deleted [numKinds]map[string]uint64
	// dirtySummary are the system and sysbatch jobs whose summary (their
	// queued instances, which no event carries) must be read again.
	dirtySummary map[string]bool
	// touched are the nodes whose entry or allocations changed since the
	// last View took them (takeTouched); allTouched says every node did
	// (a listing adopted): the View derives them all again.
	touched    map[string]bool
	allTouched bool
	// touchedJobs are the jobs whose listing came, changed or went since
	// the last View took them (with touched).
	touchedJobs map[string]bool
	// unversioned holds every cached allocation whose job version may be
	// unknown (allocEntry.versionKnown), and maybe some that no longer
	// are: readVersions looks only at these, not at every allocation.
	unversioned map[string]bool
	// news says an event applied since takeNews changed something a View
	// reads; an event that only moved an object's modify index (a client's
	// task-state update, an evaluation or deployment of a job whose
	// summary no one reads) is no news and wakes no cycle.
	news bool
}

func newCache() *cache {
	c := &cache{nodes: map[string]nodeEntry{}, allocs: map[string]allocEntry{}, jobs: map[string]*nomadapi.JobListStub{},
		dirtySummary: map[string]bool{}, touched: map[string]bool{}, touchedJobs: map[string]bool{}, allTouched: true,
		unversioned: map[string]bool{}}
	for k := range c.deleted {
		c.deleted[k] = map[string]uint64{}
	}
	return c
}

// apply applies one event. An event older than what the cache holds of
// its object is ignored, so that events replayed after a listing change
// nothing. It fails only on a payload that does not decode, which the
// caller must treat as a gap.
func (c *cache) apply(ev *nomadapi.Event) error {
	c.latest = max(c.latest, ev.Index)
	var err error
	switch ev.Topic {
	case nomadapi.TopicNode:
		err = c.applyNode(ev)
	case nomadapi.TopicAllocation:
		err = c.applyAlloc(ev)
	case nomadapi.TopicJob:
		err = c.applyJob(ev)
	case nomadapi.TopicEvaluation:
		var e *nomadapi.Evaluation
		if e, err = ev.Evaluation(); err == nil && e != nil {
			c.touchSummary(Key(e.Namespace, e.JobID))
		}
	}
	if err != nil {
		return fmt.Errorf("decoding Nomad %s event at index %d: %w", ev.Topic, ev.Index, err)
	}
	return nil
}

// payloadIndex is the ModifyIndex of the payload's object, read without
// decoding it, or 0.
func payloadIndex(ev *nomadapi.Event, field string) uint64 {
	obj, _ := ev.Payload[field].(map[string]any)
	f, _ := obj["ModifyIndex"].(float64)
	return uint64(f)
}

func (c *cache) applyNode(ev *nomadapi.Event) error {
	c.index[kindNode] = max(c.index[kindNode], ev.Index)
	if ev.Type == "NodeDeregistration" {
		c.remove(kindNode, ev.Key, ev.Index)
		return nil
	}
	// A node's device inventory is large: decode it only when it moved.
	if old, ok := c.nodes[ev.Key]; ok && older(payloadIndex(ev, "Node"), old.full.ModifyIndex, ev.Index) {
		return nil
	}
	e, err := c.decodeNodeEvent(ev)
	if err != nil {
		return fmt.Errorf("node %s: %w", ev.Key, err)
	}
	c.putNode(e, ev.Index)
	return nil
}

// putNode stores a node's entry unless the cache holds a newer one or it
// was deleted since.
func (c *cache) putNode(e nodeEntry, at uint64) bool {
	n := e.full
	old, had := c.nodes[n.ID]
	if (had && older(n.ModifyIndex, old.full.ModifyIndex, at)) || !c.fresh(kindNode, n.ID, had, n.ModifyIndex) {
		return false
	}
	c.nodes[n.ID] = e
	c.touched[n.ID], c.news = true, true
	return true
}

func (c *cache) applyAlloc(ev *nomadapi.Event) error {
	c.index[kindAlloc] = max(c.index[kindAlloc], ev.Index)
	if old, ok := c.allocs[ev.Key]; ok && older(payloadIndex(ev, "Allocation"), old.stub.ModifyIndex, ev.Index) {
		return nil
	}
	a, err := decodePayload[nomadapi.Allocation](ev, "Allocation")
	if err != nil || a == nil {
		return fmt.Errorf("allocation %s: %w", ev.Key, orMissing(err))
	}
	old, had := c.allocs[a.ID]
	if !c.fresh(kindAlloc, a.ID, had, a.ModifyIndex) {
		return nil
	}
	if a.DesiredStatus != nomadapi.AllocDesiredStatusRun {
		c.remove(kindAlloc, a.ID, ev.Index)
		return nil
	}
	stub := a.Stub()
	stub.TaskStates = nil
	e := newAllocEntry(stub, a.AllocatedResources)
	e.placed = a.AllocModifyIndex
	if had && (old.placed == a.AllocModifyIndex || (old.placed == 0 && a.AllocModifyIndex <= c.listedAt[kindAlloc])) {
		// Same placement (a client update): same job version.
		e.stub.JobVersion, e.stub.JobType, e.versionKnown = old.stub.JobVersion, old.stub.JobType, old.versionKnown
		if old.sameForView(e) {
			c.storeAlloc(e) // the modify index moved, nothing a View reads
			return nil
		}
	}
	c.putAlloc(e)
	c.touchSummary(Key(a.Namespace, a.JobID))
	return nil
}

// sameForView says that e, a client's update of the same placement, shows
// a View nothing that o did not: only the modify index and time differ.
func (o allocEntry) sameForView(e allocEntry) bool {
	if o.versionKnown != e.versionKnown || !reflect.DeepEqual(o.res, e.res) {
		return false
	}
	was, is := *o.stub, *e.stub
	was.ModifyIndex, was.ModifyTime = is.ModifyIndex, is.ModifyTime
	return reflect.DeepEqual(&was, &is)
}

// allocRef places an allocation in cache.order.
type allocRef struct{ node, id string }

func compareAllocRefs(x, y allocRef) int {
	return cmp.Or(strings.Compare(x.node, y.node), strings.Compare(x.id, y.id))
}

func refOf(s *nomadapi.AllocationListStub) allocRef { return allocRef{node: s.NodeID, id: s.ID} }

// putAlloc stores an allocation entry; a new allocation takes its place
// in the order.
func (c *cache) putAlloc(e allocEntry) {
	if old, had := c.allocs[e.stub.ID]; had && old.stub.NodeID != e.stub.NodeID {
		c.dropAlloc(e.stub.ID) // Nomad never moves one; a test may
	}
	c.touched[e.stub.NodeID], c.news = true, true
	if _, had := c.allocs[e.stub.ID]; !had {
		ref := refOf(e.stub)
		i, _ := slices.BinarySearchFunc(c.order, ref, compareAllocRefs)
		c.order = slices.Insert(c.order, i, ref)
	}
	c.storeAlloc(e)
}

// storeAlloc stores allocation entry e in the cache's table, noting it
// in unversioned when its job version is not known.
func (c *cache) storeAlloc(e allocEntry) {
	c.allocs[e.stub.ID] = e
	if !e.versionKnown {
		c.unversioned[e.stub.ID] = true
	}
}

// dropAlloc deletes an allocation entry and its place in the order.
func (c *cache) dropAlloc(id string) {
	e, ok := c.allocs[id]
	if !ok {
		return
	}
	c.touched[e.stub.NodeID], c.news = true, true
	if i, found := slices.BinarySearchFunc(c.order, refOf(e.stub), compareAllocRefs); found {
		c.order = slices.Delete(c.order, i, i+1)
	}
	delete(c.allocs, id)
	delete(c.unversioned, id)
}

// reorder sorts every cached allocation again and notes again those
// whose job version is not known (after a listing replaced them).
func (c *cache) reorder() {
	c.order = c.order[:0]
	c.unversioned = map[string]bool{}
	for id, e := range c.allocs {
		c.order = append(c.order, refOf(e.stub))
		if !e.versionKnown {
			c.unversioned[id] = true
		}
	}
	slices.SortFunc(c.order, compareAllocRefs)
}

// takeNews says whether an event applied since the last call was news,
// and forgets it.
func (c *cache) takeNews() bool {
	news := c.news
	c.news = false
	return news
}

// takeTouched returns the nodes touched since the last call, and whether
// all were, and forgets them.
func (c *cache) takeTouched() (nodes, jobs map[string]bool, all bool) {
	nodes, jobs, all = c.touched, c.touchedJobs, c.allTouched
	c.touched, c.touchedJobs, c.allTouched = map[string]bool{}, map[string]bool{}, false
	return nodes, jobs, all
}

// nodeData is what node id's segment is derived from, as the cache holds
// it now.
func (c *cache) nodeData(id string) *nodeData {
	d := &nodeData{id: id}
	if n, ok := c.nodes[id]; ok {
		d.stub, d.full, d.dev = n.stub, n.full, n.dev
	}
	i, _ := slices.BinarySearchFunc(c.order, allocRef{node: id}, compareAllocRefs)
	for ; i < len(c.order) && c.order[i].node == id; i++ {
		e := c.allocs[c.order[i].id]
		d.allocs = append(d.allocs, e.stub)
		d.res = append(d.res, e.res)
	}
	return d
}

// viewInputs are Assemble's inputs from the cache with memo, the
// segments of the last View: the jobs, and the nodes touched since. With
// every node touched (a listing adopted) or no memo, the memo is a new
// one and every node is read: the full rebuild.
func (c *cache) viewInputs(memo *segmentMemo) (Inputs, *segmentMemo) {
	touched, jobs, all := c.takeTouched()
	if all || memo == nil {
		memo, touched = newSegmentMemo(), c.allNodeIDs()
		memo.list = newJobList(len(c.jobs))
		for key, j := range c.jobs {
			memo.list.put(key, j)
		}
		jobs = nil
	}
	in := Inputs{memo: memo, changed: make([]*nodeData, 0, len(touched)), changedJobs: jobs}
	for id := range touched {
		in.changed = append(in.changed, c.nodeData(id))
	}
	for key := range jobs {
		if j := c.jobs[key]; j != nil {
			memo.list.put(key, j)
		} else {
			memo.list.drop(key)
		}
	}
	in.jobs = memo.list
	in.Jobs = in.jobs.stubs
	return in, memo
}

// allNodeIDs are the IDs of every node the cache holds or that an
// allocation names.
func (c *cache) allNodeIDs() map[string]bool {
	ids := make(map[string]bool, len(c.nodes))
	for id := range c.nodes {
		ids[id] = true
	}
	for _, ref := range c.order {
		ids[ref.node] = true
	}
	return ids
}

// older says an event's object (modify index got, in an event at index
// at) is no news next to the cache's (modify index have). One Nomad
// transaction may change an object twice (a job registered, then its
// status set by its evaluation), each change an event at the same index:
// a change made at the cached index is applied again, in order, so the
// last one wins; an event that only carries the object along (a node in a
// plan result) is not.
func older(got, have, at uint64) bool {
	return got < have || (got == have && at != got)
}

// fresh says a change of an object (at its modify index) is news to the
// cache: newer than the listing that did not have it, and than its
// deletion.
func (c *cache) fresh(k kind, key string, had bool, modifyIndex uint64) bool {
	if !had && modifyIndex <= c.listedAt[k] {
		return false // the newer listing no longer had it
	}
	if del, ok := c.deleted[k][key]; ok && del >= modifyIndex {
		return false
	}
	return true
}

func (c *cache) applyJob(ev *nomadapi.Event) error {
	c.index[kindJob] = max(c.index[kindJob], ev.Index)
	j, deleted, err := ev.DeregisteredJob()
	if err != nil || j == nil || j.ID == nil {
		return fmt.Errorf("job %s: %w", ev.Key, orMissing(err))
	}
	key := Key(str(j.Namespace), *j.ID)
	if deleted {
		c.remove(kindJob, key, ev.Index)
		for id, a := range c.allocs {
			if a.stub.Namespace == str(j.Namespace) && a.stub.JobID == *j.ID {
				c.remove(kindAlloc, id, ev.Index)
			}
		}
		return nil
	}
	c.putJob(stubOfJob(j, c.jobs[key]), ev.Index)
	c.touchSummary(key)
	return nil
}

// putJob stores a job stub unless the cache holds a newer one or the job
// was purged since.
func (c *cache) putJob(s *nomadapi.JobListStub, at uint64) bool {
	key := Key(s.Namespace, s.ID)
	old, had := c.jobs[key]
	if (had && older(s.ModifyIndex, old.ModifyIndex, at)) || !c.fresh(kindJob, key, had, s.ModifyIndex) {
		return false
	}
	c.jobs[key] = s
	c.touchedJobs[key] = true
	c.news = c.news || !had || !sameJobForView(old, s)
	return true
}

// sameJobForView says that job stub s shows a View nothing that was did
// not: only the modify index differs (a new job modify index is a new
// spec, to read).
func sameJobForView(was, s *nomadapi.JobListStub) bool {
	a := *was
	a.ModifyIndex = s.ModifyIndex
	return reflect.DeepEqual(&a, s)
}

// touchSummary marks a system or sysbatch job's summary for a re-read.
func (c *cache) touchSummary(key string) {
	if j := c.jobs[key]; j != nil && (j.Type == "system" || j.Type == "sysbatch") {
		c.dirtySummary[key], c.news = true, true
	}
}

// remove deletes an object at the index of its deletion, unless the
// cache holds it at that index or newer (a deletion replayed after the
// object came back).
func (c *cache) remove(k kind, key string, index uint64) {
	switch k {
	case kindNode:
		if n, ok := c.nodes[key]; ok && n.full.ModifyIndex >= index {
			return
		}
		delete(c.nodes, key)
		c.touched[key], c.news = true, true
	case kindAlloc:
		if a, ok := c.allocs[key]; ok && a.stub.ModifyIndex >= index {
			return
		}
		c.dropAlloc(key)
	case kindJob:
		if j, ok := c.jobs[key]; ok && j.ModifyIndex >= index {
			return
		}
		if _, ok := c.jobs[key]; ok {
			c.news, c.touchedJobs[key] = true, true
		}
		delete(c.jobs, key)
		delete(c.dirtySummary, key)
	}
	c.deleted[k][key] = max(c.deleted[k][key], index)
}

func orMissing(err error) error {
	if err == nil {
		return fmt.Errorf("payload missing")
	}
	return err
}

func str(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// nodeStub is the listing's stub of a full node, with its resources: the
// fields Assemble reads.
func nodeStub(n *nomadapi.Node) *nomadapi.NodeListStub {
	return &nomadapi.NodeListStub{ID: n.ID, Datacenter: n.Datacenter, Name: n.Name, NodeClass: n.NodeClass,
		NodePool: n.NodePool, Version: n.Attributes["nomad.version"], Drain: n.Drain,
		SchedulingEligibility: n.SchedulingEligibility, Status: n.Status, StatusDescription: n.StatusDescription,
		NodeResources: n.NodeResources, ReservedResources: n.ReservedResources, LastDrain: n.LastDrain,
		CreateIndex: n.CreateIndex, ModifyIndex: n.ModifyIndex}
}

// stubOfJob is the listing's stub of a job from an event; the summary, which
// events do not carry, is the previous stub's until it is read again.
func stubOfJob(j *nomadapi.Job, prev *nomadapi.JobListStub) *nomadapi.JobListStub {
	s := &nomadapi.JobListStub{ID: *j.ID, ParentID: str(j.ParentID), Name: str(j.Name), Namespace: str(j.Namespace),
		Datacenters: j.Datacenters, Type: str(j.Type), Status: str(j.Status), StatusDescription: str(j.StatusDescription),
		Periodic: j.Periodic != nil, ParameterizedJob: j.ParameterizedJob != nil && !j.Dispatched, Meta: j.Meta}
	if j.Priority != nil {
		s.Priority = *j.Priority
	}
	if j.Stop != nil {
		s.Stop = *j.Stop
	}
	for _, p := range []struct {
		dst *uint64
		src *uint64
	}{{&s.CreateIndex, j.CreateIndex}, {&s.ModifyIndex, j.ModifyIndex}, {&s.JobModifyIndex, j.JobModifyIndex}} {
		if p.src != nil {
			*p.dst = *p.src
		}
	}
	if j.SubmitTime != nil {
		s.SubmitTime = *j.SubmitTime
	}
	if prev != nil {
		s.JobSummary = prev.JobSummary
	}
	return s
}

// fingerprint is what the resync compares of an object: what Assemble
// reads of it, so that a difference is one the plan could see.
func (e nodeEntry) fingerprint() string {
	s := e.stub
	return fmt.Sprintf("%d|%s|%t|%s|%s", s.ModifyIndex, s.Status, s.Drain, s.SchedulingEligibility, s.NodePool) + e.dev.fingerprint()
}

func (e allocEntry) fingerprint() string {
	s := e.stub
	held := ""
	if e.res != nil {
		held = fmt.Sprint(e.res.held)
	}
	return fmt.Sprintf("%d|%s|%s|%s|%s|%s", s.ModifyIndex, s.NodeID, s.DesiredStatus, s.ClientStatus, s.NextAllocation, held)
}

func jobFingerprint(s *nomadapi.JobListStub) string {
	return fmt.Sprintf("%d|%d|%s|%t|%d", s.ModifyIndex, s.JobModifyIndex, s.Status, s.Stop, s.Priority)
}
