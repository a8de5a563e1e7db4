package tenants

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
)

// Identity is one process as the kernel shows it.
type Identity struct {
	PID int
	// StartTicks is the start time in clock ticks since boot: with the PID
	// it names one process for good, even after the PID is recycled.
	StartTicks uint64
	Comm       string
	Owner      Owner
}

// ErrGone is returned for a process that no longer exists.
var ErrGone = errors.New("process no longer exists")

// Resolver finds the owners of processes under a /proc root, caching each
// process's owner by PID and start time (a process's owner never changes,
// and re-reading the environment of every GPU process every cycle would be
// most of the monitor's cost). Only owners found are cached: a process
// read in the middle of its exec shows an empty environment (the kernel
// has switched its program but not yet laid out its new environment), and
// caching that would make a tenant's process an outsider for good. It is
// safe for concurrent use.
type Resolver struct {
	root string

	mu    sync.Mutex
	cache map[int]Identity
}

// NewResolver reads processes under procRoot ("/proc" on a host; tests use
// a directory of their own).
func NewResolver(procRoot string) *Resolver {
	if procRoot == "" {
		procRoot = "/proc"
	}
	return &Resolver{root: procRoot, cache: map[int]Identity{}}
}

// Resolve returns the identity of pid: its start time is read every time
// (one small read), its owner only when the PID is new or was recycled.
// A process whose environment and cgroup cannot be read or name no
// allocation has the zero Owner.
func (r *Resolver) Resolve(pid int) (Identity, error) {
	comm, start, err := r.stat(pid)
	if err != nil {
		return Identity{}, err
	}
	r.mu.Lock()
	c, ok := r.cache[pid]
	r.mu.Unlock()
	if ok && c.StartTicks == start {
		return c, nil
	}
	id := Identity{PID: pid, StartTicks: start, Comm: comm, Owner: r.owner(pid)}
	r.mu.Lock()
	if id.Owner.Known() {
		r.cache[pid] = id
	} else {
		delete(r.cache, pid)
	}
	r.mu.Unlock()
	return id, nil
}

// Forget drops the cached processes that are not in keep.
func (r *Resolver) Forget(keep map[int]bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for pid := range r.cache {
		if !keep[pid] {
			delete(r.cache, pid)
		}
	}
}

func (r *Resolver) path(pid int, name string) string {
	return filepath.Join(r.root, strconv.Itoa(pid), name)
}

// stat reads the command name and start time of pid: one open and one
// read into a stack buffer (it runs for every GPU process every cycle).
func (r *Resolver) stat(pid int) (string, uint64, error) {
	var buf [1024]byte
	b, err := readSmall(r.path(pid, "stat"), buf[:])
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH) {
		return "", 0, fmt.Errorf("pid %d: %w", pid, ErrGone)
	}
	if err != nil {
		return "", 0, fmt.Errorf("pid %d: %w", pid, err)
	}
	comm, start, err := ParseStat(b)
	if err != nil {
		return "", 0, fmt.Errorf("pid %d: %w", pid, err)
	}
	return comm, start, nil
}

// owner reads the environment, then the cgroup.
func (r *Resolver) owner(pid int) Owner {
	if b, err := os.ReadFile(r.path(pid, "environ")); err == nil {
		if o := ParseEnviron(b); o.Known() {
			return o
		}
	}
	if b, err := os.ReadFile(r.path(pid, "cgroup")); err == nil {
		return ParseCgroup(b)
	}
	return Owner{}
}

// StartTicks returns the start time of pid, for callers that only need to
// check that a PID still names the process they saw.
func (r *Resolver) StartTicks(pid int) (uint64, error) {
	_, start, err := r.stat(pid)
	return start, err
}

// Kill sends SIGKILL to the process id names, and to no other: the PID is
// opened first (a pidfd, so the handle cannot move to another process),
// then its start time is checked against id's. A process already gone is
// no error.
func (r *Resolver) Kill(id Identity) error {
	p, err := os.FindProcess(id.PID)
	if err != nil {
		return fmt.Errorf("pid %d: %w", id.PID, err)
	}
	defer p.Release()
	start, err := r.StartTicks(id.PID)
	if errors.Is(err, ErrGone) {
		return nil
	}
	if err != nil {
		return err
	}
	if start != id.StartTicks {
		return nil // recycled: the process seen is gone
	}
	if err := p.Signal(syscall.SIGKILL); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("kill pid %d: %w", id.PID, err)
	}
	return nil
}

// readSmall reads a small file (a /proc entry) into buf with plain system
// calls, so that buf can live on the caller's stack.
func readSmall(path string, buf []byte) ([]byte, error) {
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	defer syscall.Close(fd)
	n := 0
	for n < len(buf) {
		m, err := syscall.Read(fd, buf[n:])
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return nil, &fs.PathError{Op: "read", Path: path, Err: err}
		}
		if m == 0 {
			break
		}
		n += m
	}
	return buf[:n], nil
}
