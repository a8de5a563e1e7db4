package utilization

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/gpushare/nomad-gpushare/vocab"
	"github.com/gpushare/nomad-gpushare/vocab/nodeusage"
	"github.com/hashicorp/go-hclog"
	nomadapi "github.com/hashicorp/nomad/api"
)

// Defaults of Config.
const (
	DefaultPeriod   = 15 * time.Second
	DefaultTimeout  = 3 * time.Second
	DefaultParallel = 32
	// staleAfter: a report older than this comes from a plugin whose
	// monitor is stuck; the node counts as failed.
	staleAfter = time.Minute
)

// Config says where the plugins serve their reports and how to read them.
type Config struct {
	Nomad *nomadapi.Client
	// Port is the plugins' usage_listen port; a node is read at its Nomad
	// advertise address and this port.
	Port int
	// Period between sweeps, Timeout per node, Parallel nodes at a time.
	Period   time.Duration
	Timeout  time.Duration
	Parallel int
	HTTP     *http.Client
	Log      hclog.Logger
}

// Sweep is one reading of every GPU node.
type Sweep struct {
	At       time.Time
	Duration time.Duration
	// Nodes is how many ready GPU nodes there were to read.
	Nodes   int
	Reports []nodeusage.Report
	// Failed says, by node name, why a node's report is missing.
	Failed map[string]string
	// Err is set when the nodes could not be listed (Reports are then
	// the previous sweep's).
	Err string
}

// Collector sweeps the GPU nodes every Period and keeps the last sweep.
type Collector struct {
	cfg Config

	mu   sync.Mutex
	last Sweep
}

// New makes a collector; Run starts it.
func New(cfg Config) *Collector {
	if cfg.Period <= 0 {
		cfg.Period = DefaultPeriod
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.Parallel <= 0 {
		cfg.Parallel = DefaultParallel
	}
	if cfg.HTTP == nil {
		cfg.HTTP = &http.Client{}
	}
	if cfg.Log == nil {
		cfg.Log = hclog.NewNullLogger()
	}
	return &Collector{cfg: cfg}
}

// Last returns the last sweep (zero before the first).
func (c *Collector) Last() Sweep {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.last
}

// Run sweeps at once and then every Period until ctx ends.
func (c *Collector) Run(ctx context.Context) {
	tick := time.NewTicker(c.cfg.Period)
	defer tick.Stop()
	for {
		s := c.Sweep(ctx)
		c.mu.Lock()
		if s.Err != "" {
			s.Reports, s.Nodes = c.last.Reports, c.last.Nodes
		}
		c.last = s
		c.mu.Unlock()
		if s.Err != "" {
			c.cfg.Log.Warn("cannot list GPU nodes for their usage; keeping the last reports", "error", s.Err)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// Sweep reads the report of every ready GPU node, Parallel at a time.
func (c *Collector) Sweep(ctx context.Context) Sweep {
	start := time.Now()
	s := Sweep{At: start, Failed: map[string]string{}}
	nodes, err := c.gpuNodes(ctx)
	if err != nil {
		s.Err = err.Error()
		return s
	}
	s.Nodes = len(nodes)
	type result struct {
		name string
		r    nodeusage.Report
		err  error
	}
	work, results := make(chan *nomadapi.NodeListStub), make(chan result)
	var wg sync.WaitGroup
	for i := 0; i < min(c.cfg.Parallel, len(nodes)); i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := range work {
				r, err := c.read(ctx, n)
				results <- result{n.Name, r, err}
			}
		}()
	}
	go func() {
		for _, n := range nodes {
			work <- n
		}
		close(work)
		wg.Wait()
		close(results)
	}()
	for res := range results {
		if res.err != nil {
			s.Failed[res.name] = res.err.Error()
			continue
		}
		s.Reports = append(s.Reports, res.r)
	}
	s.Duration = time.Since(start)
	return s
}

// read reads one node's report.
func (c *Collector) read(ctx context.Context, n *nomadapi.NodeListStub) (nodeusage.Report, error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	base := "http://" + net.JoinHostPort(n.Address, strconv.Itoa(c.cfg.Port))
	r, err := nodeusage.Fetch(ctx, c.cfg.HTTP, base)
	if err != nil {
		return r, err
	}
	if age := time.Since(r.At); age > staleAfter {
		return r, fmt.Errorf("the plugin's report at %s is %s old (its monitor is stuck?)", base, age.Round(time.Second))
	}
	return r, nil
}

// gpuNodes lists the ready nodes that publish gpushare devices.
func (c *Collector) gpuNodes(ctx context.Context) ([]*nomadapi.NodeListStub, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	q := (&nomadapi.QueryOptions{AllowStale: true, Params: map[string]string{"resources": "true"}}).WithContext(ctx)
	stubs, _, err := c.cfg.Nomad.Nodes().List(q)
	if err != nil {
		return nil, fmt.Errorf("list nodes at %s: %w", c.cfg.Nomad.Address(), err)
	}
	var out []*nomadapi.NodeListStub
	for _, n := range stubs {
		if n.Status == nomadapi.NodeStatusReady && hasGPUs(n) {
			out = append(out, n)
		}
	}
	return out, nil
}

func hasGPUs(n *nomadapi.NodeListStub) bool {
	if n.NodeResources == nil {
		return false
	}
	for _, d := range n.NodeResources.Devices {
		if d != nil && d.Vendor == vocab.Vendor && (d.Type == vocab.TypeWhole || d.Type == vocab.TypeShare) {
			return true
		}
	}
	return false
}
