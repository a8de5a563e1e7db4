package soak

import (
	"fmt"
	"time"
)

// lockKeep is how long the checker keeps reads of the leader lock: a
// write is judged once a read after it came in, within seconds; dropping
// older reads only shortens the tenures they prove.
const lockKeep = 3 * time.Minute

// fencing is the checker's record of the leader lock and of the
// instances' Nomad writes (no action on stale state).
type fencing struct {
	obs     []lockObs
	pending []write
	// writes counts the instances' accepted job writes; inTenure those
	// proven made by the lock's holder, unjudged those no tenure covers.
	writes, inTenure, unjudged int
}

func (c *checker) noteLock(o lockObs) {
	c.mu.Lock()
	defer c.mu.Unlock()
	f := &c.fencing
	f.obs = append(f.obs, o)
	cut := 0
	for cut < len(f.obs) && o.start.Sub(f.obs[cut].end) > lockKeep {
		cut++
	}
	f.obs = f.obs[cut:]
}

func (c *checker) noteWrite(w write) {
	c.mu.Lock()
	c.fencing.pending = append(c.fencing.pending, w)
	c.fencing.writes++
	c.mu.Unlock()
	c.hist.Add("service write: %s", w)
}

// judgeWrites judges every write that a lock read has followed: a write
// made while another instance held the lock is a stale action.
func (c *checker) judgeWrites() {
	c.mu.Lock()
	f := &c.fencing
	if len(f.obs) == 0 {
		c.mu.Unlock()
		return
	}
	last := f.obs[len(f.obs)-1].start
	ts := tenures(f.obs)
	var keep []write
	var staleMsgs, unjudgedMsgs []string
	for _, w := range f.pending {
		if !last.After(w.end) {
			keep = append(keep, w)
			continue
		}
		switch v, t := judge(w, ts); v {
		case inTenure:
			f.inTenure++
		case stale:
			staleMsgs = append(staleMsgs, fmt.Sprintf("stale action: %s, while %s held the leader lock (one unchanged lock session from %s to %s)",
				w, t.holder, t.from.UTC().Format("15:04:05.000"), t.to.UTC().Format("15:04:05.000")))
		default:
			f.unjudged++
			unjudgedMsgs = append(unjudgedMsgs, w.String())
		}
	}
	f.pending = keep
	c.mu.Unlock()
	for _, m := range unjudgedMsgs {
		c.hist.Add("fencing: unjudged (no tenure of the lock proven around it): %s", m)
	}
	for _, m := range staleMsgs {
		c.violation("%s", m)
	}
}

// endWrites counts the writes no lock read followed (the soak ended
// first) as unjudged.
func (c *checker) endWrites() {
	c.mu.Lock()
	left := c.fencing.pending
	c.fencing.pending = nil
	c.fencing.unjudged += len(left)
	c.mu.Unlock()
	for _, w := range left {
		c.hist.Add("fencing: unjudged (no lock read after it before the end): %s", w)
	}
}
