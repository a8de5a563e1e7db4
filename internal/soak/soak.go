package soak

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"syscall"
	"time"

	nomadapi "github.com/hashicorp/nomad/api"

	"github.com/gpushare/nomad-gpushare/internal/localcluster"
	"github.com/gpushare/nomad-gpushare/quota-service/kvlayout"
	"github.com/gpushare/nomad-gpushare/quota-service/recordkey"
	"github.com/gpushare/nomad-gpushare/quota-service/service"
	"github.com/gpushare/nomad-gpushare/quota-service/state"
	"github.com/gpushare/nomad-gpushare/vocab"
)

// Config says how long and how hard to soak.
type Config struct {
	// Seed seeds the driver's and the fault injector's choices.
	Seed int64
	// Duration is the chaos phase: random work, owner actions, quota
	// edits and faults. A settle phase follows, with no fault and no
	// owner action, in which every project owed work must be served: it
	// ends once the checker has seen no project owed work for 10 s of
	// polls, or after RestoreBound plus 15 s.
	Duration time.Duration
	// Clients and GPUs: Nomad client nodes (the server's own among them)
	// and simulated GPUs on each. Zero: 2 and 4.
	Clients, GPUs int
	// RestoreBound is how long after the last disturbance a project
	// under its guarantee with placeable waiting work may wait. Zero:
	// 60 s.
	RestoreBound time.Duration
	// FaultEvery is the mean time between faults. Zero: 12 s.
	FaultEvery time.Duration
	// Faults restricts the fault kinds (names as in faultKinds); empty:
	// all.
	Faults []string
	// Avoid lists known findings (FindingScaleSuspended) whose trigger
	// the driver leaves out until they are fixed.
	Avoid []string
	// Dir holds the agents, the plugins, the control files and the
	// quota-service instances' logs (soak-a.log, soak-b.log). Empty: a temporary directory,
	// removed at the end.
	Dir string
	// ServiceLogLevel is the quota-service instances' -log-level (empty:
	// info; debug logs every cycle's plan).
	ServiceLogLevel string
	// Out receives the event history as it happens (nil: discarded; the
	// history around a violation is in Result.Report either way).
	Out io.Writer
}

// Result is what a soak saw.
type Result struct {
	Seconds      float64
	Jobs, Faults int
	Suspensions  int
	Resumes      int
	Violations   []string
	// Known are the violations that are cases of known findings
	// (knownFinding), also in Violations.
	Known      []string
	MaxRestore time.Duration
	Polls      int
	// MaxRSSService and MaxRSSPlugin are the highest resident set sizes
	// seen of a quota-service instance and of a device plugin, in MiB.
	MaxRSSService, MaxRSSPlugin float64
	// ServiceWrites are the job writes the instances made that Nomad
	// accepted; WritesInTenure those proven made while their instance
	// held the leader lock (the rest: unjudged, or stale violations).
	ServiceWrites, WritesInTenure int
	// Report is the event history around each violation.
	Report string
	// Logs, when there are violations, are what the quota-service
	// instances decided and the device plugins did in the last
	// RestoreBound plus a minute (diagnostics): what a failed run in CI
	// leaves to diagnose it.
	Logs string
}

// Summary is the one-line summary.
func (r Result) Summary() string {
	return fmt.Sprintf("soak seconds=%.0f jobs=%d faults=%d suspensions=%d resumes=%d violations=%d max_restore_s=%.1f known_findings=%d max_rss_service_mib=%.1f max_rss_plugin_mib=%.1f service_writes=%d writes_in_tenure=%d",
		r.Seconds, r.Jobs, r.Faults, r.Suspensions, r.Resumes, len(r.Violations), r.MaxRestore.Seconds(), len(r.Known), r.MaxRSSService, r.MaxRSSPlugin,
		r.ServiceWrites, r.WritesInTenure)
}

// faultKinds are the faults the injector draws from, with weights.
var faultKinds = []struct {
	name   string
	weight int
}{
	{"kill-leader", 4},
	{"kill-standby", 2},
	{"pause-leader", 2},
	{"gc", 3},
	{"restart-nomad", 1},
	{"restart-consul", 1},
	{"kill-plugin", 2},
	{"restart-client", 1},
	{"pause-client", 1},
	{"drain-node", 1},
}

// FaultKinds names the faults the soak injects.
func FaultKinds() []string {
	var out []string
	for _, f := range faultKinds {
		out = append(out, f.name)
	}
	return out
}

var projects = []string{"team-a", "team-b", "team-c"}

// Run soaks a fresh local cluster: real Consul and Nomad agents, the
// device plugin on simulated GPUs, two quota-service instances.
func Run(ctx context.Context, cfg Config) (Result, error) {
	if cfg.Clients == 0 {
		cfg.Clients = 2
	}
	if cfg.GPUs == 0 {
		cfg.GPUs = 4
	}
	if cfg.RestoreBound == 0 {
		cfg.RestoreBound = 60 * time.Second
	}
	if cfg.FaultEvery == 0 {
		cfg.FaultEvery = 12 * time.Second
	}
	dir := cfg.Dir
	if dir == "" {
		d, err := os.MkdirTemp("", "gpushare-soak-")
		if err != nil {
			return Result{}, err
		}
		dir = d
		defer func() {
			if os.Getenv("GPUSHARE_KEEP_CLUSTER") == "" {
				os.RemoveAll(d)
			}
		}()
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return Result{}, err
	}
	hist := newHistory(5000, cfg.Out)
	hist.Add("soak seed=%d duration=%s clients=%d gpus=%d restore_bound=%s dir=%s", cfg.Seed, cfg.Duration, cfg.Clients, cfg.GPUs, cfg.RestoreBound, dir)
	c, err := startAgents(dir, cfg.Clients, cfg.GPUs, 30*time.Second)
	if err != nil {
		return Result{}, err
	}
	defer c.Close()
	nomad, consul, err := clients(c)
	if err != nil {
		return Result{}, err
	}
	control := filepath.Join(dir, "control")
	if err := os.MkdirAll(control, 0o777); err != nil {
		return Result{}, err
	}
	os.Chmod(control, 0o777)
	layout := kvlayout.New("gpushare-soak")
	for _, p := range projects {
		if _, err := nomad.Namespaces().Register(&nomadapi.Namespace{Name: p}, nil); err != nil {
			return Result{}, fmt.Errorf("creating namespace %s: %w", p, err)
		}
	}
	nodes, err := gpusByNode(nomad, c.NodeIDs)
	if err != nil {
		return Result{}, err
	}
	table := &jobTable{jobs: map[string]*job{}}
	drv := &driver{rng: rand.New(rand.NewSource(cfg.Seed)), nomad: nomad, consul: consul, layout: layout, control: control,
		hist: hist, table: table, projects: projects, gpus: cfg.Clients * cfg.GPUs, maxJobs: 2 * cfg.Clients * cfg.GPUs,
		quotas: map[string]float64{}}
	store := state.New(consul, layout)
	store.Keys = &recordkey.Variable{Client: nomad, Namespace: "default", Path: service.DefaultRecordKeyPath}
	drv.store = store
	drv.avoid = map[string]bool{}
	for _, f := range cfg.Avoid {
		drv.avoid[f] = true
	}
	drv.editQuotas(false)
	chk := &checker{nomad: nomad, store: store, hist: hist, table: table, driver: drv, nodes: nodes, bound: cfg.RestoreBound,
		starvedSince: map[string]time.Time{}, reported: map[string]bool{}, seenHistory: map[string]bool{},
		overbooked: map[string]bool{}, lost: map[string]bool{}, lastEvent: map[string]state.Entry{}, memory: newRSSTracker()}

	// The instances: the chk hears of their crashes.
	bin := filepath.Join(dir, "gpushare-quota")
	var insts []*instance
	for _, name := range []string{"soak-a", "soak-b"} {
		port, err := freePort()
		if err != nil {
			return Result{}, err
		}
		// Each instance reaches Nomad through a proxy that tells the
		// checker its job writes.
		proxy, err := startNomadProxy(name, c.NomadAddr, chk.noteWrite)
		if err != nil {
			return Result{}, err
		}
		defer proxy.close()
		insts = append(insts, &instance{name: name, bin: bin, port: port, args: serviceArgs(c, proxy.addr, layout.Root, cfg.ServiceLogLevel),
			logPath: filepath.Join(dir, name+".log"), onCrash: func(name, why string) {
				msg := fmt.Sprintf("quota-service instance %s crashed: %s", name, why)
				chk.report(knownFinding(msg), msg)
			}})
	}
	defer func() {
		for _, i := range insts {
			i.kill()
		}
	}()
	for _, i := range insts {
		if err := i.start(); err != nil {
			return Result{}, err
		}
	}

	pluginBin := filepath.Join(dir, "plugins", "nomad-device-gpushare")
	procs := func() map[string][]int {
		out := map[string][]int{"plugin": processesOf(pluginBin)}
		for _, i := range insts {
			if pid := i.pid(); pid != 0 {
				out["service"] = append(out["service"], pid)
			}
		}
		return out
	}
	start := time.Now()
	chaosEnd := start.Add(cfg.Duration)
	chkCtx, stopChecker := context.WithCancel(ctx)
	checkerDone := make(chan struct{})
	lockDone := make(chan struct{})
	go func() {
		defer close(lockDone)
		watchLock(chkCtx, consul, layout.Leader(), chk.noteLock)
	}()
	go func() {
		defer close(checkerDone)
		for chkCtx.Err() == nil {
			pctx, cancel := context.WithTimeout(chkCtx, 10*time.Second)
			chk.poll(pctx)
			cancel()
			chk.sampleMemory(procs())
			chk.judgeWrites()
			select {
			case <-chkCtx.Done():
			case <-time.After(time.Second):
			}
		}
	}()

	inj := &injector{rng: rand.New(rand.NewSource(cfg.Seed + 1)), c: c, plugin: pluginBin, insts: insts, nomad: nomad, hist: hist, chk: chk, only: cfg.Faults}
	faultsDone := make(chan struct{})
	go func() {
		defer close(faultsDone)
		for time.Now().Before(chaosEnd) && ctx.Err() == nil {
			// load pacing: exponential gaps around FaultEvery
			gap := time.Duration(inj.rng.ExpFloat64() * float64(cfg.FaultEvery))
			if time.Now().Add(gap).After(chaosEnd) {
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(gap):
			}
			inj.inject()
		}
	}()
	for time.Now().Before(chaosEnd) && ctx.Err() == nil {
		drv.step()
		// load pacing between owner actions
		select {
		case <-ctx.Done():
		case <-time.After(time.Duration(300+drv.rng.Intn(1700)) * time.Millisecond):
		}
	}
	<-faultsDone
	// Settle: everything up, no owner action; every owed project must be
	// served within the bound.
	if err := inj.heal(); err != nil {
		hist.Add("healing the cluster failed: %v", err)
	}
	chk.disturb()
	hist.Add("settle phase: up to %s with no fault and no owner action", cfg.RestoreBound+15*time.Second)
	chk.settle(ctx, cfg.RestoreBound+15*time.Second)
	stopChecker()
	<-checkerDone
	<-lockDone
	chk.judgeWrites()
	chk.endWrites()

	chk.mu.Lock()
	defer chk.mu.Unlock()
	res := Result{Seconds: time.Since(start).Seconds(), Jobs: drv.submitted, Faults: inj.faults, Suspensions: chk.suspensions,
		Resumes: chk.resumes, Violations: append([]string(nil), chk.violations...), Known: append([]string(nil), chk.known...), MaxRestore: chk.maxRestore, Polls: chk.polls,
		MaxRSSService: chk.memory.peakMiB("service"), MaxRSSPlugin: chk.memory.peakMiB("plugin"),
		ServiceWrites: chk.fencing.writes, WritesInTenure: chk.fencing.inTenure}
	if len(res.Violations) > 0 {
		res.Report = hist.Around(time.Now(), time.Since(start)+time.Minute)
		res.Logs = diagnostics(dir, time.Now().Add(-cfg.RestoreBound-time.Minute))
	}
	hist.Add("%s polls=%d failed_polls=%d", res.Summary(), chk.polls, chk.failedPolls)
	return res, ctx.Err()
}

// gpusByNode reads each client node's GPU UUIDs (its whole-GPU
// instances).
func gpusByNode(nomad *nomadapi.Client, ids []string) (map[string][]string, error) {
	out := map[string][]string{}
	for _, id := range ids {
		n, _, err := nomad.Nodes().Info(id, nil)
		if err != nil {
			return nil, fmt.Errorf("reading node %s: %w", id, err)
		}
		if n.NodeResources == nil {
			continue
		}
		seen := map[string]bool{}
		for _, g := range n.NodeResources.Devices {
			if g.Vendor != vocab.Vendor || g.Type != vocab.TypeWhole && g.Type != vocab.TypeShare {
				continue
			}
			for _, inst := range g.Instances {
				if v, err := vocab.Parse(inst.ID); err == nil && !seen[v.UUID] {
					seen[v.UUID] = true
					out[id] = append(out[id], v.UUID)
				}
			}
		}
		sort.Strings(out[id])
	}
	return out, nil
}

// injector injects faults.
type injector struct {
	rng    *rand.Rand
	c      *localcluster.Cluster
	insts  []*instance
	nomad  *nomadapi.Client
	hist   *History
	chk    *checker
	only   []string
	faults int
	// plugin is the device plugin's binary: its processes are the
	// plugins the cluster's agents started.
	plugin string
}

func (f *injector) pick() string {
	total := 0
	var names []string
	var weights []int
	for _, k := range faultKinds {
		allowed := len(f.only) == 0
		for _, o := range f.only {
			allowed = allowed || o == k.name
		}
		if allowed {
			names, weights = append(names, k.name), append(weights, k.weight)
			total += k.weight
		}
	}
	if total == 0 {
		return ""
	}
	n := f.rng.Intn(total)
	for i, w := range weights {
		if n < w {
			return names[i]
		}
		n -= w
	}
	return ""
}

// inject draws one fault and carries it out; the checker's restore
// clock restarts when it is over.
func (f *injector) inject() {
	name := f.pick()
	down := time.Duration(1000+f.rng.Intn(5000)) * time.Millisecond
	defer f.chk.disturb()
	switch name {
	case "kill-leader", "kill-standby", "pause-leader":
		target := f.instance(name != "kill-standby")
		if target == nil {
			f.hist.Add("fault %s: no such instance now", name)
			return
		}
		f.faults++
		if name == "pause-leader" {
			// Paused past its session TTL (10 s) a leader loses the
			// lock while it cannot know it.
			down = time.Duration(2000+f.rng.Intn(16000)) * time.Millisecond
			f.hist.Add("fault %s: SIGSTOP to %s for %s", name, target.name, down)
			err := target.pause(true)
			time.Sleep(down) // the fault's length, not synchronization
			err = errors.Join(err, target.pause(false))
			f.hist.Add("fault %s: SIGCONT to %s: %s", name, target.name, errString(err))
			return
		}
		f.hist.Add("fault %s: SIGKILL to %s, down for %s", name, target.name, down)
		target.kill()
		time.Sleep(down) // the fault's length, not synchronization
		err := target.start()
		f.hist.Add("fault %s: %s started again: %s", name, target.name, errString(err))
	case "gc":
		f.faults++
		err := f.nomad.System().GarbageCollect()
		f.hist.Add("fault gc: %v", errString(err))
	case "restart-nomad":
		f.faults++
		f.hist.Add("fault restart-nomad: restarting the Nomad server (and its client)")
		err := f.c.RestartNomad()
		f.hist.Add("fault restart-nomad: back: %v", errString(err))
	case "kill-plugin":
		pids := processesOf(f.plugin)
		if len(pids) == 0 {
			f.hist.Add("fault kill-plugin: no plugin process now")
			return
		}
		pid := pids[f.rng.Intn(len(pids))]
		f.faults++
		err := syscall.Kill(pid, syscall.SIGKILL)
		f.hist.Add("fault kill-plugin: SIGKILL to device plugin pid %d (of %d): %v (Nomad starts it again)", pid, len(pids), errString(err))
	case "restart-client":
		f.restartClient()
	case "pause-client":
		f.pauseClient()
	case "drain-node":
		f.drainNode()
	case "restart-consul":
		f.faults++
		f.hist.Add("fault restart-consul: stopping Consul for %s", down)
		f.c.StopConsul()
		time.Sleep(down) // the fault's length, not synchronization
		err := f.c.StartConsul()
		f.hist.Add("fault restart-consul: back: %v", errString(err))
	}
}

// instance returns the running instance that leads (leader) or does not,
// nil when there is none.
func (f *injector) instance(leader bool) *instance {
	for _, i := range f.insts {
		if i.running() && i.leading() == leader {
			return i
		}
	}
	return nil
}

// heal makes sure every instance runs (the agents are restarted within
// their fault).
func (f *injector) heal() error {
	var errs []error
	for _, i := range f.insts {
		errs = append(errs, i.start())
	}
	return errors.Join(errs...)
}

// processesOf returns the PIDs of the processes running the binary at
// path, sorted.
func processesOf(path string) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if exe, err := os.Readlink(filepath.Join("/proc", e.Name(), "exe")); err == nil && exe == path {
			out = append(out, pid)
		}
	}
	sort.Ints(out)
	return out
}

func errString(err error) string {
	if err == nil {
		return "ok"
	}
	return err.Error()
}
