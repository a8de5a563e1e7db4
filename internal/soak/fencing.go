package soak

import (
	"fmt"
	"net/http"
	"strings"
	"time"
)

// lockObs is one read of the leader lock's key: the key as Consul
// returned it, at some moment between start and end.
type lockObs struct {
	start, end time.Time
	// holder is the key's value (the instance's name) and session its
	// session; both empty when the key is absent or not held.
	holder, session string
	// createIndex, modifyIndex and lockIndex identify the key's state: a
	// key whose three indexes and session are the same in two reads was
	// held by that session all the time between them (a release, a
	// re-acquire or a delete and re-create changes one of them).
	createIndex, modifyIndex, lockIndex uint64
}

func (o lockObs) sameTenure(p lockObs) bool {
	return o.session != "" && o.session == p.session && o.holder == p.holder &&
		o.createIndex == p.createIndex && o.modifyIndex == p.modifyIndex && o.lockIndex == p.lockIndex
}

// tenure is a span in which one instance provably held the lock.
type tenure struct {
	holder   string
	from, to time.Time
}

// tenures returns the spans proven by consecutive reads of the same key
// state: from the end of the first read to the start of the last.
func tenures(obs []lockObs) []tenure {
	var out []tenure
	for i := 0; i < len(obs); {
		j := i
		for j+1 < len(obs) && obs[j+1].sameTenure(obs[i]) {
			j++
		}
		if j > i && obs[i].end.Before(obs[j].start) {
			out = append(out, tenure{holder: obs[i].holder, from: obs[i].end, to: obs[j].start})
		}
		i = j + 1
	}
	return out
}

// write is one Nomad write a quota-service instance made, as its proxy
// saw it: sent to Nomad after start, answered with success before end,
// so Nomad applied it in between.
type write struct {
	by, what   string
	start, end time.Time
}

// verdict is what the lock's tenures prove of a write.
type verdict int

const (
	unjudged verdict = iota // no tenure covers it (the lock changed around it)
	inTenure                // made while its instance provably held the lock
	stale                   // made while another instance provably held the lock
)

// judge says whether w was made while its instance held the lock, or
// while another one did (a stale action), or neither can be proven.
func judge(w write, ts []tenure) (verdict, tenure) {
	for _, t := range ts {
		if t.from.After(w.start) || t.to.Before(w.end) {
			continue
		}
		if t.holder == w.by {
			return inTenure, t
		}
		return stale, t
	}
	return unjudged, tenure{}
}

// jobWrite names a request that changes a job in Nomad ("" for anything
// else): register, stop (deregister), scale, or another job write (a
// version tag, a revert...). Plans, parses and validations change
// nothing.
func jobWrite(method, path string) string {
	if method == http.MethodGet || method == http.MethodHead {
		return ""
	}
	rest, ok := strings.CutPrefix(path, "/v1/job")
	if !ok {
		return ""
	}
	switch {
	case rest == "s":
		return "register"
	case strings.HasPrefix(rest, "s/"): // /v1/jobs/parse, /v1/jobs/statuses
		return ""
	case !strings.HasPrefix(rest, "/"):
		return ""
	}
	parts := strings.Split(strings.Trim(rest, "/"), "/")
	switch {
	case len(parts) == 1 && method == http.MethodDelete:
		return "stop"
	case len(parts) == 1:
		return "register"
	case parts[len(parts)-1] == "plan" || parts[len(parts)-1] == "validate":
		return ""
	case parts[1] == "scale":
		return "scale"
	case parts[1] == "versions" && parts[len(parts)-1] == "tag":
		return "tag"
	}
	return "write " + strings.Join(parts[1:], "/")
}

func (w write) String() string {
	return fmt.Sprintf("%s by %s sent %s, answered %s", w.what, w.by,
		w.start.UTC().Format("15:04:05.000"), w.end.UTC().Format("15:04:05.000"))
}
