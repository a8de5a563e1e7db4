package soak

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

const (
	mib = 1 << 20
	// rssWarmup is how long a process runs before its RSS is its
	// baseline (its caches, the first cycles' allocations settle).
	rssWarmup = 30 * time.Second
	// rssSlack is the growth every process may have over its baseline
	// whatever its size.
	rssSlack = 64 * mib
)

// rssBound is the most a process whose RSS after warm-up was warm may
// hold: twice its baseline, or its baseline plus 64 MiB, whichever is
// more. A leak grows without bound over a soak and crosses it; a heap
// that doubles once (Go's GC target is twice the live heap) does not.
func rssBound(warm int64) int64 {
	return max(2*warm, warm+rssSlack)
}

// rssProc is what the tracker knows of one process: when it was first
// seen, its baseline (0 before warm-up ends) and its peak.
type rssProc struct {
	first      time.Time
	warm, peak int64
	reported   bool
}

// rssTracker follows the resident set size of processes by role
// ("service", "plugin") and key (role and PID: a restarted process is a
// new one with a new baseline).
type rssTracker struct {
	procs map[string]*rssProc
	peaks map[string]int64 // role -> highest RSS seen
}

func newRSSTracker() *rssTracker {
	return &rssTracker{procs: map[string]*rssProc{}, peaks: map[string]int64{}}
}

// observe notes one sample of process pid of role at now; it returns a
// violation's text the first time the process is over its bound.
func (t *rssTracker) observe(role string, pid int, now time.Time, rss int64) string {
	key := fmt.Sprintf("%s/%d", role, pid)
	p := t.procs[key]
	if p == nil {
		p = &rssProc{first: now}
		t.procs[key] = p
	}
	p.peak = max(p.peak, rss)
	t.peaks[role] = max(t.peaks[role], rss)
	if p.warm == 0 {
		if now.Sub(p.first) >= rssWarmup {
			p.warm = rss
		}
		return ""
	}
	if rss <= rssBound(p.warm) || p.reported {
		return ""
	}
	p.reported = true
	return fmt.Sprintf("memory: %s process %d holds %.1f MiB, over its bound %.1f MiB (RSS %.1f MiB after its %s warm-up)",
		role, pid, float64(rss)/mib, float64(rssBound(p.warm))/mib, float64(p.warm)/mib, rssWarmup)
}

// peakMiB is the highest RSS seen of a role's processes, in MiB.
func (t *rssTracker) peakMiB(role string) float64 { return float64(t.peaks[role]) / mib }

// forget drops the processes not seen in alive (role/PID keys), so that
// a PID reused by a new process starts with a new baseline.
func (t *rssTracker) forget(alive map[string]bool) {
	for k := range t.procs {
		if !alive[k] {
			delete(t.procs, k)
		}
	}
}

// readRSS reads VmRSS of process pid, in bytes.
func readRSS(pid int) (int64, error) {
	f, err := os.Open(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	return parseVmRSS(f)
}

// parseVmRSS reads the VmRSS line of a /proc/<pid>/status file.
func parseVmRSS(r interface{ Read([]byte) (int, error) }) (int64, error) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) != 2 || f[1] != "kB" {
			return 0, fmt.Errorf("unexpected VmRSS line %q", sc.Text())
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("parsing VmRSS %q: %w", f[0], err)
		}
		return kb * 1024, nil
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("reading status: %w", err)
	}
	return 0, fmt.Errorf("no VmRSS line (a zombie or a kernel thread)")
}

// sampleMemory samples every process procs names (by role) once.
func (c *checker) sampleMemory(procs map[string][]int) {
	now := time.Now()
	alive := map[string]bool{}
	var found []string
	c.mu.Lock()
	for role, pids := range procs {
		for _, pid := range pids {
			rss, err := readRSS(pid)
			if err != nil {
				continue // it just exited
			}
			alive[fmt.Sprintf("%s/%d", role, pid)] = true
			if v := c.memory.observe(role, pid, now, rss); v != "" {
				found = append(found, v)
			}
		}
	}
	c.memory.forget(alive)
	c.mu.Unlock()
	for _, v := range found {
		c.violation("%s", v)
	}
}
