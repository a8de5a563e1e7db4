package dynamic

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/gpushare/nomad-gpushare/vocab/nodeusage"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// usageAPI serves, on usage_listen, the usage report (nodeusage.Path, JSON:
// the quota service reads it) and the plugin's Prometheus metrics
// (/metrics). The metrics are built from the last report at each scrape,
// so tenants that are gone leave no series behind. mu guards the fields
// below it.
type usageAPI struct {
	reg   *prometheus.Registry
	cycle prometheus.Histogram

	mu sync.Mutex
	// want is the configured address, addr the one listened on ("" while
	// not listening).
	want, addr string
	srv        *http.Server
	// stopRetry ends the retries of an address that was busy.
	stopRetry context.CancelFunc
}

// usageRetry is how often a busy usage_listen address is tried again (a
// plugin restarted by the Nomad client may find its predecessor's socket
// still there).
const usageRetry = 5 * time.Second

// init makes the metrics of t.
func (u *usageAPI) init(t *Tenancy) {
	u.reg = prometheus.NewRegistry()
	u.cycle = prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "gpushare", Name: "monitor_cycle_seconds",
		Help: "Duration of one monitor cycle: read GPU processes, charge them to tenants, apply the reclaim rule.", Buckets: prometheus.ExponentialBuckets(0.0001, 2, 14)})
	u.reg.MustRegister(u.cycle, &tenancyCollector{t: t})
}

// observeCycle records a monitor cycle's duration.
func (u *usageAPI) observeCycle(d time.Duration) { u.cycle.Observe(d.Seconds()) }

// listenAddr is the address the endpoint listens on ("" when not
// listening).
func (u *usageAPI) listenAddr() string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.addr
}

// serveUsage (re)starts the endpoint on addr ("" stops it). An address
// that cannot be listened on is logged and tried again every usageRetry:
// the GPUs stay offered without it.
func (t *Tenancy) serveUsage(ctx context.Context, addr string) {
	u := &t.api
	u.mu.Lock()
	defer u.mu.Unlock()
	if addr == u.want {
		return
	}
	u.stopLocked()
	u.want = addr
	if addr == "" || t.listenLocked(addr) == nil {
		return
	}
	ctx, cancel := context.WithCancel(ctx)
	u.stopRetry = cancel
	go t.retryUsage(ctx, addr)
}

// retryUsage tries a busy address again until it works or ctx ends.
func (t *Tenancy) retryUsage(ctx context.Context, addr string) {
	every(ctx, usageRetry, func() bool {
		t.api.mu.Lock()
		defer t.api.mu.Unlock()
		return ctx.Err() == nil && t.listenLocked(addr) != nil
	})
}

// listenLocked starts serving on addr. t.api.mu must be held.
func (t *Tenancy) listenLocked(addr string) error {
	u := &t.api
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.logger.Error("cannot serve GPU usage on usage_listen; retrying", "address", addr, "retry_every", usageRetry, "error", err)
		return err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+nodeusage.Path, t.serveReport)
	mux.Handle("GET /metrics", promhttp.HandlerFor(u.reg, promhttp.HandlerOpts{}))
	u.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	u.addr = ln.Addr().String()
	go func(srv *http.Server) {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			t.logger.Error("usage endpoint stopped", "address", ln.Addr(), "error", err)
		}
	}(u.srv)
	t.logger.Info("serving GPU usage", "address", u.addr, "paths", []string{nodeusage.Path, "/metrics"})
	return nil
}

// stopUsage stops the endpoint.
func (t *Tenancy) stopUsage() {
	t.api.mu.Lock()
	defer t.api.mu.Unlock()
	t.api.stopLocked()
	t.api.want = ""
}

func (u *usageAPI) stopLocked() {
	if u.stopRetry != nil {
		u.stopRetry()
		u.stopRetry = nil
	}
	if u.srv == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = u.srv.Shutdown(ctx)
	u.srv, u.addr = nil, ""
}

func (t *Tenancy) serveReport(w http.ResponseWriter, _ *http.Request) {
	r := t.report.Load()
	w.Header().Set("Content-Type", "application/json")
	if r == nil {
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintln(w, `{"error": "no monitor cycle yet"}`)
		return
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(r)
}

// tenancyCollector turns the last report into metrics at each scrape.
type tenancyCollector struct{ t *Tenancy }

var (
	tenantLabels = []string{"namespace", "job", "group", "task", "alloc_id", "gpu", "home_gpu"}
	descUsed     = prometheus.NewDesc("gpushare_tenant_memory_used_mib", "GPU memory a tenant (task holding gpushare devices) uses.", tenantLabels, nil)
	descRequest  = prometheus.NewDesc("gpushare_tenant_memory_request_mib", "GPU memory guaranteed to a tenant (its request).", tenantLabels, nil)
	descLimit    = prometheus.NewDesc("gpushare_tenant_memory_limit_mib", "GPU memory a tenant may use while nobody needs it (its limit).", tenantLabels, nil)
	descSM       = prometheus.NewDesc("gpushare_tenant_sm_utilization_percent", "SM utilization of a tenant's processes.", tenantLabels, nil)
	descGuest    = prometheus.NewDesc("gpushare_tenant_guest", "1 when the tenant runs as a guest away from its home GPU.", tenantLabels, nil)
	descGPUUsed  = prometheus.NewDesc("gpushare_gpu_process_memory_used_mib", "GPU memory used by all processes of a GPU.", []string{"gpu"}, nil)
	descShort    = prometheus.NewDesc("gpushare_gpu_reclaim_short_mib", "Memory a GPU lacks for every tenant to reach its request, with no borrower left to kill.", []string{"gpu"}, nil)
	descOutN     = prometheus.NewDesc("gpushare_outside_processes", "GPU processes that belong to no tenant of their GPU.", []string{"gpu"}, nil)
	descOutMiB   = prometheus.NewDesc("gpushare_outside_memory_used_mib", "GPU memory used by processes that belong to no tenant of their GPU.", []string{"gpu"}, nil)
	descKills    = prometheus.NewDesc("gpushare_tenant_kills_total", "GPU tenants killed, by reason: limit and reclaim (the reclaim rule), move (a guest that did not leave its host).", []string{"reason", "namespace", "job"}, nil)
	descMoves    = prometheus.NewDesc("gpushare_guest_moves_total", "Guests sent back by the node-level scheduler.", nil, nil)
	descAge      = prometheus.NewDesc("gpushare_monitor_last_cycle_timestamp_seconds", "When the last monitor cycle ran.", nil, nil)
)

func (c *tenancyCollector) Describe(ch chan<- *prometheus.Desc) { prometheus.DescribeByCollect(c, ch) }

func (c *tenancyCollector) Collect(ch chan<- prometheus.Metric) {
	t := c.t
	t.mu.Lock()
	kills := make(map[killLabels]int, len(t.killCount))
	for l, n := range t.killCount {
		kills[l] = n
	}
	moves := t.moveCount
	t.mu.Unlock()
	for l, n := range kills {
		ch <- prometheus.MustNewConstMetric(descKills, prometheus.CounterValue, float64(n), l.reason, l.namespace, l.job)
	}
	ch <- prometheus.MustNewConstMetric(descMoves, prometheus.CounterValue, float64(moves))
	r := t.report.Load()
	if r == nil {
		return
	}
	ch <- prometheus.MustNewConstMetric(descAge, prometheus.GaugeValue, float64(r.At.UnixNano())/1e9)
	collectTenants(ch, r)
	collectGPUs(ch, r)
}

func collectTenants(ch chan<- prometheus.Metric, r *nodeusage.Report) {
	for _, tn := range r.Tenants {
		lv := []string{tn.Namespace, tn.Job, tn.Group, tn.Task, tn.AllocID, tn.GPU, tn.Home}
		guest := 0.0
		if tn.Guest {
			guest = 1
		}
		for _, m := range []struct {
			d *prometheus.Desc
			v float64
		}{{descUsed, float64(tn.UsedMiB)}, {descRequest, float64(tn.RequestMiB)}, {descLimit, float64(tn.LimitMiB)}, {descSM, float64(tn.SMPct)}, {descGuest, guest}} {
			ch <- prometheus.MustNewConstMetric(m.d, prometheus.GaugeValue, m.v, lv...)
		}
	}
}

func collectGPUs(ch chan<- prometheus.Metric, r *nodeusage.Report) {
	outN, outMiB := map[string]int{}, map[string]uint64{}
	for _, o := range r.Outside {
		outN[o.GPU]++
		outMiB[o.GPU] += o.UsedMiB
	}
	for _, g := range r.GPUs {
		ch <- prometheus.MustNewConstMetric(descGPUUsed, prometheus.GaugeValue, float64(g.UsedMiB), g.UUID)
		ch <- prometheus.MustNewConstMetric(descShort, prometheus.GaugeValue, float64(g.ShortMiB), g.UUID)
		ch <- prometheus.MustNewConstMetric(descOutN, prometheus.GaugeValue, float64(outN[g.UUID]), g.UUID)
		ch <- prometheus.MustNewConstMetric(descOutMiB, prometheus.GaugeValue, float64(outMiB[g.UUID]), g.UUID)
	}
}
