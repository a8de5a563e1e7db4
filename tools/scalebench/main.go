// Command scalebench measures the quota service at cluster scale: the real
// service binary (quota-service/cmd/gpushare-quota) against a real Consul
// agent (internal/localcluster) and a stand-in for Nomad's HTTP API and
// event stream (internal/nomadstandin) that serves nodes in the device
// plugin's real layout, allocations, jobs in one namespace per project,
// pending groups and events at a steady rate. It prints one line:
//
//	service_scale nodes=5000 allocs=100000 resync_s=<x> event_to_decision_ms_p50=<m> event_to_decision_ms_p99=<y> rss_mib=<z> cpu_pct=<w>
//
// resync_s: from the service's start until its first successful cycle (a
// full read of Nomad, a plan, the metrics set); event_to_decision_ms_p50 and _p99:
// from the stand-in publishing a job registration (or deregistration) of
// a pending group until the service's gpushare_pending_workloads counts it;
// rss_mib: the service's peak resident memory (VmHWM); cpu_pct: its CPU
// time over a steady window (events only, no probes), in % of one core.
//
// Run it with `make bench-scale` (full size) or, small and fast:
//
//	go run ./tools/scalebench -nodes 200 -allocs 4000 -projects 20 -pending 40
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gpushare/nomad-gpushare/internal/localcluster"
	"github.com/gpushare/nomad-gpushare/internal/nomadstandin"
	"github.com/gpushare/nomad-gpushare/quota-service/kvlayout"
	"github.com/gpushare/nomad-gpushare/quota-service/recordkey"
	consulapi "github.com/hashicorp/consul/api"
)

type options struct {
	cfg        nomadstandin.Config
	rate       float64
	steady     time.Duration
	probes     int
	serviceBin string
	startLimit time.Duration
	probeLimit time.Duration
	keep       bool
	logLevel   string
	memoryMiB  int
}

func main() {
	var o options
	flag.IntVar(&o.cfg.Nodes, "nodes", 5000, "GPU nodes (8 x H100 each)")
	flag.IntVar(&o.cfg.Allocations, "allocs", 100000, "running GPU allocations")
	flag.IntVar(&o.cfg.Projects, "projects", 500, "projects (one namespace and quota document each)")
	flag.IntVar(&o.cfg.Pending, "pending", 1000, "pending task groups")
	flag.IntVar(&o.cfg.SharesPerGPU, "shares-per-gpu", 100, "the plugin's shares_per_gpu on every node")
	flag.Float64Var(&o.rate, "rate", 50, "events per second (allocation updates and job registrations)")
	flag.DurationVar(&o.steady, "steady", 30*time.Second, "CPU measurement window")
	flag.IntVar(&o.probes, "probes", 20, "pending groups registered and removed to time event to decision (two samples each)")
	flag.StringVar(&o.serviceBin, "service-bin", "", "the gpushare-quota binary (default: built from this checkout)")
	flag.DurationVar(&o.startLimit, "start-timeout", 10*time.Minute, "how long to wait for the service's first successful cycle")
	flag.DurationVar(&o.probeLimit, "probe-timeout", 2*time.Minute, "how long to wait for one probe's decision")
	flag.BoolVar(&o.keep, "keep", false, "keep the working directory (service and Consul logs)")
	flag.StringVar(&o.logLevel, "service-log-level", "warn", "the service's -log-level (its log is service.log in the working directory)")
	flag.IntVar(&o.memoryMiB, "memory-mib", 0, "the service's memory_mb, as the jobspec gives it (GOMEMLIMIT at 90% of it); 0: no limit")
	flag.Parse()
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "scalebench:", err)
		os.Exit(1)
	}
}

func run(o options) error {
	dir, err := os.MkdirTemp("", "gpushare-scalebench-")
	if err != nil {
		return err
	}
	if !o.keep {
		defer os.RemoveAll(dir)
	} else {
		fmt.Fprintln(os.Stderr, "scalebench: working directory", dir)
	}
	bin := o.serviceBin
	if bin == "" {
		bin = filepath.Join(dir, "gpushare-quota")
		if err := localcluster.BuildBinary("./quota-service/cmd/gpushare-quota", bin); err != nil {
			return err
		}
	}
	t0 := time.Now()
	standin, err := nomadstandin.New(o.cfg)
	if err != nil {
		return err
	}
	nodes, allocs, jobs, nodeBytes, allocBytes := standin.Sizes()
	fmt.Fprintf(os.Stderr, "scalebench: stand-in: %d nodes (%d MiB listed), %d allocations (%d MiB listed), %d jobs, generated in %s\n",
		nodes, nodeBytes>>20, allocs, allocBytes>>20, jobs, time.Since(t0).Round(time.Millisecond))
	nomadAddr, stopNomad, err := serve(standin)
	if err != nil {
		return err
	}
	defer stopNomad()
	cluster, err := localcluster.New(localcluster.Options{ConsulOnly: true, Dir: filepath.Join(dir, "consul")})
	if err != nil {
		return err
	}
	defer cluster.Close()
	if err := writeQuotas(cluster.Consul, o.cfg); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go standin.Run(ctx, o.rate)

	svc, err := startService(bin, dir, o, nomadAddr, cluster.ConsulAddr)
	if err != nil {
		return err
	}
	defer svc.stop()
	resync, err := svc.firstCycle(o.startLimit)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "scalebench: first successful cycle after %.1f s\n", resync.Seconds())
	cpu, err := svc.cpuOver(o.steady)
	if err != nil {
		return err
	}
	lat, err := probe(standin, svc, o.probes, o.probeLimit)
	if err != nil {
		return err
	}
	rss, err := svc.peakRSS()
	if err != nil {
		return err
	}
	m, _ := svc.metrics()
	fmt.Fprintf(os.Stderr, "scalebench: cycles %.0f (mean %.2f s), requests to the stand-in: %v\n",
		m["gpushare_cycle_seconds_count"], m["gpushare_cycle_seconds_sum"]/max(m["gpushare_cycle_seconds_count"], 1), standin.Requests())
	fmt.Printf("service_scale nodes=%d allocs=%d resync_s=%.1f event_to_decision_ms_p50=%.0f event_to_decision_ms_p99=%.0f rss_mib=%.0f cpu_pct=%.0f\n",
		nodes, allocs, resync.Seconds(), percentile(lat, 50), percentile(lat, 99), rss, cpu)
	return nil
}

// serve serves the stand-in on a free local port.
func serve(h http.Handler) (string, func(), error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(l) }()
	return "http://" + l.Addr().String(), func() { _ = srv.Close() }, nil
}

// writeQuotas gives every project a guarantee: together 80% of the GPUs.
func writeQuotas(c *consulapi.Client, cfg nomadstandin.Config) error {
	layout := kvlayout.New("")
	each := float64(cfg.Nodes*8) * 0.8 / float64(max(cfg.Projects, 1))
	for i := range max(cfg.Projects, 1) {
		p := fmt.Sprintf("project-%03d", i)
		doc := fmt.Sprintf(`{"guaranteed": %.2f}`, each)
		if _, err := c.KV().Put(&consulapi.KVPair{Key: layout.Quota(p), Value: []byte(doc)}, nil); err != nil {
			return fmt.Errorf("writing the quota of %s: %w", p, err)
		}
	}
	return nil
}

// service is the running gpushare-quota process.
type service struct {
	cmd     *exec.Cmd
	addr    string
	started time.Time
	client  *http.Client
}

func startService(bin, dir string, o options, nomadAddr, consulAddr string) (*service, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := l.Addr().String()
	l.Close()
	logf, err := os.Create(filepath.Join(dir, "service.log"))
	if err != nil {
		return nil, err
	}
	// The stand-in serves no Nomad Variables: the record keys come from
	// a file, as -record-key-file allows.
	key, err := recordkey.Generate()
	if err != nil {
		return nil, err
	}
	keyFile := filepath.Join(dir, "record.key")
	if err := os.WriteFile(keyFile, []byte(recordkey.Encode(key)+"\n"), 0o600); err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "-listen", addr, "-log-level", o.logLevel, "-record-key-file", keyFile)
	cmd.Env = append(os.Environ(), "NOMAD_ADDR="+nomadAddr, "CONSUL_HTTP_ADDR="+strings.TrimPrefix(consulAddr, "http://"))
	if o.memoryMiB > 0 {
		// As jobspecs/quota-service.nomad.hcl sets it.
		cmd.Env = append(cmd.Env, fmt.Sprintf("GOMEMLIMIT=%dMiB", o.memoryMiB*9/10))
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	s := &service{cmd: cmd, addr: addr, started: time.Now(), client: &http.Client{Timeout: 10 * time.Second}}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", bin, err)
	}
	return s, nil
}

func (s *service) stop() { localcluster.StopProcess(s.cmd, 10*time.Second) }

// metrics reads the service's gauges and counters (label-free lines).
func (s *service) metrics() (map[string]float64, error) {
	resp, err := s.client.Get("http://" + s.addr + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<16), 1<<20)
	for sc.Scan() {
		name, val, ok := strings.Cut(sc.Text(), " ")
		if !ok || strings.HasPrefix(name, "#") || strings.Contains(name, "{") {
			continue
		}
		if v, err := strconv.ParseFloat(val, 64); err == nil {
			out[name] = v
		}
	}
	return out, sc.Err()
}

// firstCycle waits for cycle_ok = 1 and returns the time since start.
func (s *service) firstCycle(limit time.Duration) (time.Duration, error) {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		if m, err := s.metrics(); err == nil && m["gpushare_cycle_ok"] == 1 {
			return time.Since(s.started), nil
		}
		if s.cmd.ProcessState != nil {
			return 0, fmt.Errorf("the service exited: %s", s.cmd.ProcessState)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return 0, fmt.Errorf("no successful cycle within %s", limit)
}

// cpuOver returns the service's CPU use over d, in % of one core.
func (s *service) cpuOver(d time.Duration) (float64, error) {
	t0, err := cpuTicks(s.cmd.Process.Pid)
	if err != nil {
		return 0, err
	}
	start := time.Now()
	time.Sleep(d)
	t1, err := cpuTicks(s.cmd.Process.Pid)
	if err != nil {
		return 0, err
	}
	const clockTicks = 100 // USER_HZ on Linux
	return float64(t1-t0) / clockTicks / time.Since(start).Seconds() * 100, nil
}

// cpuTicks is utime+stime of a process from /proc/<pid>/stat.
func cpuTicks(pid int) (uint64, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// Fields after the command name (which may hold spaces), from state.
	f := strings.Fields(string(raw[strings.LastIndexByte(string(raw), ')')+2:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("short /proc/%d/stat", pid)
	}
	u, err1 := strconv.ParseUint(f[11], 10, 64)
	st, err2 := strconv.ParseUint(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("parsing /proc/%d/stat", pid)
	}
	return u + st, nil
}

// peakRSS is the service's VmHWM in MiB.
func (s *service) peakRSS() (float64, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", s.cmd.Process.Pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			return kb / 1024, err
		}
	}
	return 0, fmt.Errorf("no VmHWM in /proc/%d/status", s.cmd.Process.Pid)
}

// probe registers and removes n pending groups, one at a time, and times
// each event until the service's pending workloads count it.
func probe(st *nomadstandin.Server, s *service, n int, limit time.Duration) ([]time.Duration, error) {
	m, err := s.metrics()
	if err != nil {
		return nil, err
	}
	base := m["gpushare_pending_workloads"]
	var out []time.Duration
	wait := func(want float64) (time.Duration, error) {
		start := time.Now()
		for time.Since(start) < limit {
			if m, err := s.metrics(); err == nil && m["gpushare_pending_workloads"] == want {
				return time.Since(start), nil
			}
			// Scraping every 5 ms took 12% of the service's CPU at
			// 500 projects (docs/scale.md); 20 ms is a tenth of the
			// 200 ms target.
			time.Sleep(20 * time.Millisecond)
		}
		return 0, fmt.Errorf("pending workloads did not reach %.0f within %s", want, limit)
	}
	for i := range n {
		id := st.Probe(i)
		d, err := wait(base + 1)
		if err != nil {
			return nil, err
		}
		out = append(out, d)
		st.Unprobe(id)
		if d, err = wait(base); err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, nil
}

// percentile is the p-th percentile in milliseconds (the 99th: the
// largest below 100 samples).
func percentile(d []time.Duration, p int) float64 {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	return float64(d[min(len(d)*p/100, len(d)-1)].Microseconds()) / 1000
}
