package nomadstandin

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/hashicorp/nomad/api"
)

// frame is one line of /v1/event/stream.
type frame struct {
	Index  uint64
	Events []event
}

// event is Nomad's structs.Event as the stream encodes it (api.Event
// leaves out the namespace).
type event struct {
	Topic      api.Topic
	Type       string
	Key        string
	Namespace  string
	FilterKeys []string
	Index      uint64
	Payload    map[string]any
}

// stream serves /v1/event/stream: newline-delimited JSON frames of the
// events published from now on, and a heartbeat ({}) every 10 s, as Nomad
// does. Topics are not filtered: the stand-in publishes Allocation and
// Job events, and Node events when a node's metadata changes, all of
// which the service subscribes to.
func (s *Server) stream(rw http.ResponseWriter, r *http.Request) {
	ch := make(chan []byte, 1024)
	s.mu.Lock()
	s.subs[ch] = struct{}{}
	s.headers(rw)
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.subs, ch)
		s.mu.Unlock()
	}()
	rw.WriteHeader(http.StatusOK)
	fl, _ := rw.(http.Flusher)
	if fl != nil {
		fl.Flush()
	}
	hb := time.NewTicker(10 * time.Second)
	defer hb.Stop()
	for {
		var b []byte
		select {
		case <-r.Context().Done():
			return
		case <-hb.C:
			b = []byte("{}\n")
		case b = <-ch:
		}
		if _, err := rw.Write(b); err != nil {
			return
		}
		if fl != nil {
			fl.Flush()
		}
	}
}

// publish sends one event to every stream; s.mu is held. A stream that
// cannot keep up loses events, as a slow Nomad subscriber is dropped.
func (s *Server) publish(ev event) {
	ev.Index = s.index
	b, err := json.Marshal(frame{Index: s.index, Events: []event{ev}})
	if err != nil {
		panic(err)
	}
	b = append(b, '\n')
	for ch := range s.subs {
		select {
		case ch <- b:
		default:
		}
	}
}

// Run publishes rate events per second until ctx ends: four in five
// update a random allocation (a new modify index, as a client status
// update gives), one in five re-registers a random job (new job modify
// index).
func (s *Server) Run(ctx context.Context, rate float64) {
	if rate <= 0 {
		<-ctx.Done()
		return
	}
	t := time.NewTicker(time.Duration(float64(time.Second) / rate))
	defer t.Stop()
	for n := 0; ; n++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if n%5 == 4 {
			s.reregister()
		} else {
			s.updateAlloc()
		}
	}
}

func (s *Server) updateAlloc() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.w.allocs) == 0 {
		return
	}
	i := s.rng.IntN(len(s.w.allocs))
	s.index++
	a := s.w.allocs[i]
	a.ModifyIndex, a.ModifyTime = s.index, time.Now().UnixNano()
	s.tables["allocs"] = s.index
	s.encodeAlloc(i)
	s.publish(event{Topic: api.TopicAllocation, Type: "AllocationUpdated", Key: a.ID, Namespace: a.Namespace,
		FilterKeys: []string{a.JobID}, Payload: map[string]any{"Allocation": fullAlloc(a)}})
}

func (s *Server) reregister() {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := s.jobOrder[s.rng.IntN(len(s.jobOrder))]
	if *s.jobs[k].Stop {
		return // the service's stop: an owner's registration is not the load modelled
	}
	s.index++
	s.tables["jobs"] = s.index
	j := *s.jobs[k]
	j.ModifyIndex, j.JobModifyIndex = ptr(s.index), ptr(s.index)
	j.Version = ptr(*j.Version + 1)
	s.jobs[k] = &j
	s.publish(event{Topic: api.TopicJob, Type: "JobRegistered", Key: *j.ID, Namespace: *j.Namespace, Payload: map[string]any{"Job": &j}})
}

// Probe registers a new pending job (one share group, no allocation) in
// project 0's namespace and publishes its JobRegistered event; the
// service's pending workloads then grow by one. It returns the job's ID.
func (s *Server) Probe(n int) string {
	return s.probe(fmt.Sprintf("probe-%05d", n), s.w.project(0), false, s.w.shareCount(20))
}

// ReclaimNamespace is the namespace of ReclaimProbe's jobs, where nothing
// else runs.
const ReclaimNamespace = "reclaim"

// ReclaimProbe registers a new pending job of one whole GPU in namespace
// ReclaimNamespace. Every whole GPU of the stand-in runs work, so the job
// fits only where the service stops work of a project above its
// guarantee (given a guarantee to project ReclaimNamespace). It returns
// the job's ID.
func (s *Server) ReclaimProbe(n int) string {
	return s.probe(fmt.Sprintf("reclaim-%05d", n), ReclaimNamespace, true, 1)
}

// Unprobe purges a probe job (Probe's or ReclaimProbe's) and publishes its
// JobDeregistered event.
func (s *Server) Unprobe(jobID string) {
	ns := s.w.project(0)
	if strings.HasPrefix(jobID, "reclaim-") {
		ns = ReclaimNamespace
	}
	s.purge(ns + "/" + jobID)
}

func (s *Server) probe(name, ns string, whole bool, devCount int) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.index++
	j := s.w.jobSpec(name, ns, 1, whole, devCount)
	j.Status = ptr("pending")
	s.tables["jobs"] = s.index
	j.CreateIndex, j.ModifyIndex, j.JobModifyIndex = ptr(s.index), ptr(s.index), ptr(s.index)
	k := jobKey(j)
	s.jobs[k] = j
	s.jobOrder = append(s.jobOrder, k)
	s.publish(event{Topic: api.TopicJob, Type: "JobRegistered", Key: *j.ID, Namespace: *j.Namespace, Payload: map[string]any{"Job": j}})
	return *j.ID
}

// purge removes job k and publishes its JobDeregistered event; the
// service's pending workloads then shrink by one.
func (s *Server) purge(k string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	j := s.jobs[k]
	if j == nil {
		return
	}
	s.index++
	s.tables["jobs"] = s.index
	delete(s.jobs, k)
	for i, o := range s.jobOrder {
		if o == k {
			s.jobOrder = append(s.jobOrder[:i], s.jobOrder[i+1:]...)
			break
		}
	}
	stopped := *j
	stopped.Stop, stopped.Status = ptr(true), ptr("dead")
	stopped.ModifyIndex = ptr(s.index)
	s.publish(event{Topic: api.TopicJob, Type: "JobDeregistered", Key: *j.ID, Namespace: *j.Namespace, Payload: map[string]any{"Job": &stopped}})
}
