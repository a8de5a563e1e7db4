package device_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpushare/nomad-gpushare/internal/localcluster"
	"github.com/gpushare/nomad-gpushare/internal/testcluster"
	"github.com/gpushare/nomad-gpushare/vocab"
)

// defaultsPluginConfig is the test node with the shipped timing defaults
// (fingerprint_period, nomad_poll_period and switch_settle_period left
// out).
const defaultsPluginConfig = `
plugin "nomad-device-gpushare" {
  config {
    backend              = "simulated"
    simulated_preset     = "h100"
    simulated_count      = 4
    min_idle_share_gpus  = 1
  }
}
`

// BenchmarkSwitchOnRealNomad measures how long a GPU takes to move between
// the families on a real Nomad agent with a simulated 4 x H100 node
// (min_idle_share_gpus 1), with the shipped timing defaults and with the
// test node's (pluginConfig: poll 500ms, fingerprint 1s, settle 2s). Each
// iteration starts from the idle layout (three whole GPUs and one share
// landing place): three whole jobs run, a fourth waits until the landing
// place is switched to whole (to-whole); then all stop and one GPU goes
// back to share mode (to-share). Each switch is timed step by step (see
// switchSteps); the medians are reported, and every switch is logged.
//
// defaults-published-demand is defaults with the quota service running
// in process and publishing the node's demand (docs/design.md, Partition
// protocol, "Published demand"): the plugin takes the demand from it
// instead of listing blocked evaluations.
func BenchmarkSwitchOnRealNomad(b *testing.B) {
	for _, cfg := range []struct {
		name, config string
		service      bool
	}{{"defaults", defaultsPluginConfig, false}, {"test-node", pluginConfig, false}, {"defaults-published-demand", defaultsPluginConfig, true}} {
		b.Run(cfg.name, func(b *testing.B) {
			c, gate := startGatedClusterWith(b, localcluster.Options{}, cfg.config)
			gate.open(b, c)
			waitLayout(b, c, 3, 1)
			if cfg.service {
				startDemandService(b, c)
				testcluster.Eventually(b, liveWindow, func() error {
					if pluginLogs(c, "taking waiting GPU demand from the quota service") == 0 {
						return errors.New("the plugin does not take the published demand yet")
					}
					return nil
				})
			}
			lists := gate.demandListings()
			defer func() { b.Logf("blocked-evaluation listings by the plugin: %d", gate.demandListings()-lists) }()
			view := watchServerView(b, c)
			var toWhole, toShare []switchSteps
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				toWhole = append(toWhole, fourthWholeWait(b, c, view, i))
				start := time.Now()
				waitLayout(b, c, 3, 1)
				toShare = append(toShare, timeSteps(b, c, view, start, time.Now(), "whole -> share", vocab.SharingShare))
			}
			b.StopTimer()
			reportSteps(b, "to-whole", toWhole)
			reportSteps(b, "to-share", toShare)
		})
	}
}

// fourthWholeWait runs three whole jobs, then times a fourth until it
// runs on the switched landing place, and stops all four.
func fourthWholeWait(b *testing.B, c *localcluster.Cluster, view *serverView, round int) switchSteps {
	var names []string
	for k := 1; k <= 3; k++ {
		n := fmt.Sprintf("bench-%d-w%d", round, k)
		gpuJob(b, c, n, "gpu", 1)
		runningEnv(b, c, n)
		names = append(names, n)
	}
	last := fmt.Sprintf("bench-%d-w4", round)
	start := time.Now()
	gpuJob(b, c, last, "gpu", 1)
	runningAfter(b, c, last, start)
	steps := timeSteps(b, c, view, start, time.Now(), "share -> whole", vocab.SharingWhole)
	for _, n := range append(names, last) {
		stopJob(b, c, n)
	}
	return steps
}

// switchSteps is one switch, timed from its cause (a job submitted, jobs
// stopped) to its end (the job runs, the layout is back):
//   - decide: until the plugin withdraws the GPU;
//   - withdrawal: until the plugin sees the servers' view show it
//     withdrawn (the Nomad client's node update, and the plugin's read);
//   - settle: until the plugin publishes it in the other family;
//   - publication: until the servers' view shows it there (another node
//     update);
//   - place: until the job runs, or the layout is seen back.
//
// The plugin's steps are the times of its partition events; the servers'
// view is sampled (serverView).
type switchSteps struct {
	total, decide, withdrawal, settle, publication, place time.Duration
}

var stepNames = []string{"total", "decide", "withdrawal", "settle", "publication", "place"}

func (s switchSteps) durations() []time.Duration {
	return []time.Duration{s.total, s.decide, s.withdrawal, s.settle, s.publication, s.place}
}

// timeSteps times the switch of one GPU to family between start and end
// from the plugin's partition events in the agent's log (the withdrawal
// naming how, the publication) and the servers' view.
func timeSteps(b *testing.B, c *localcluster.Cluster, view *serverView, start, end time.Time, how, family string) switchSteps {
	b.Helper()
	s := switchSteps{total: end.Sub(start)}
	events := partitionEvents(b, c)
	var uuid string
	var withdrawn, settling, published time.Time
	for _, e := range events {
		if e.at.Before(start.Add(-time.Millisecond)) || e.at.After(end) {
			continue
		}
		switch {
		case uuid == "" && strings.Contains(e.msg, how) && strings.Contains(e.msg, "withdrawn"):
			uuid, withdrawn = e.uuid, e.at
		case uuid != "" && e.uuid == uuid && strings.Contains(e.msg, "settling"):
			settling = e.at
		case uuid != "" && e.uuid == uuid && strings.Contains(e.msg, "switched to "+family):
			published = e.at
		}
		if !published.IsZero() {
			break
		}
	}
	if uuid == "" || settling.IsZero() || published.IsZero() {
		b.Logf("switch %s not found in the plugin's log between %s and %s", how, start.Format(time.TimeOnly), end.Format(time.TimeOnly))
		return s
	}
	seenIn := view.first(uuid, family, published)
	s.decide = withdrawn.Sub(start)
	s.withdrawal = settling.Sub(withdrawn)
	s.settle = published.Sub(settling)
	s.publication = seenIn.Sub(published)
	s.place = end.Sub(seenIn)
	b.Logf("%s %s: %s (servers saw it withdrawn %s after the withdrawal)", how, vocab.ShortUUID(uuid), s,
		view.first(uuid, "none", withdrawn).Sub(withdrawn).Round(10*time.Millisecond))
	return s
}

func (s switchSteps) String() string {
	var parts []string
	for i, d := range s.durations() {
		parts = append(parts, fmt.Sprintf("%s %s", stepNames[i], d.Round(10*time.Millisecond)))
	}
	return strings.Join(parts, ", ")
}

// reportSteps reports the median of each step, and the worst total.
func reportSteps(b *testing.B, name string, all []switchSteps) {
	for i, step := range stepNames {
		var ds []time.Duration
		for _, s := range all {
			ds = append(ds, s.durations()[i])
		}
		slices.Sort(ds)
		b.ReportMetric(ds[len(ds)/2].Seconds(), name+"-"+step+"-s")
		if i == 0 {
			b.ReportMetric(ds[len(ds)-1].Seconds(), name+"-worst-s")
		}
	}
}

// partitionEvent is one partition event the plugin logged.
type partitionEvent struct {
	at        time.Time
	uuid, msg string
}

var (
	eventUUID = regexp.MustCompile(`uuid=(\S+)`)
	eventMsg  = regexp.MustCompile(`event="([^"]*)"`)
	eventTime = regexp.MustCompile(` timestamp=(\S+)`)
)

// partitionEvents reads the plugin's partition events from the Nomad
// agent's log, with the time the plugin logged them.
func partitionEvents(b *testing.B, c *localcluster.Cluster) []partitionEvent {
	b.Helper()
	f, err := os.Open(filepath.Join(c.Dir, "nomad.log"))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	var out []partitionEvent
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		l := sc.Text()
		if !strings.Contains(l, ": partition:") {
			continue
		}
		u, m, ts := eventUUID.FindStringSubmatch(l), eventMsg.FindStringSubmatch(l), eventTime.FindStringSubmatch(l)
		if u == nil || m == nil || ts == nil {
			continue
		}
		at, err := time.Parse(time.RFC3339Nano, ts[1])
		if err != nil {
			continue
		}
		out = append(out, partitionEvent{at: at, uuid: u[1], msg: m[1]})
	}
	return out
}

// serverView samples the servers' view of the node every 50ms and keeps
// when each GPU's family changed.
type serverView struct {
	mu      sync.Mutex
	changes map[string][]familyChange
}

type familyChange struct {
	at     time.Time
	family string
}

func watchServerView(b *testing.B, c *localcluster.Cluster) *serverView {
	v := &serverView{changes: map[string][]familyChange{}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	b.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			at := time.Now()
			if fams, err := serverFamilies(c); err == nil {
				v.note(at, fams)
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return v
}

// serverFamilies is where the servers see each GPU allocatable: "whole",
// "share" or "none".
func serverFamilies(c *localcluster.Cluster) (map[string]string, error) {
	node, _, err := c.Nomad.Nodes().Info(c.NodeID, nil)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, g := range node.NodeResources.Devices {
		for _, d := range g.Instances {
			id, err := vocab.Parse(d.ID)
			if err != nil {
				continue
			}
			if _, ok := out[id.UUID]; !ok {
				out[id.UUID] = "none"
			}
			if !d.Healthy {
				continue
			}
			if g.Type == "gpu" {
				out[id.UUID] = vocab.SharingWhole
			} else {
				out[id.UUID] = vocab.SharingShare
			}
		}
	}
	return out, nil
}

func (v *serverView) note(at time.Time, fams map[string]string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	for u, f := range fams {
		ch := v.changes[u]
		if len(ch) == 0 || ch[len(ch)-1].family != f {
			v.changes[u] = append(ch, familyChange{at: at, family: f})
		}
	}
}

// first is when the servers' view first showed the GPU in family at or
// after since: since itself when it did already then, since too when it
// never did (the step then counts as 0).
func (v *serverView) first(uuid, family string, since time.Time) time.Time {
	v.mu.Lock()
	defer v.mu.Unlock()
	current := ""
	for _, c := range v.changes[uuid] {
		if !c.at.After(since) {
			current = c.family
			continue
		}
		if current == family {
			return since
		}
		if c.family == family {
			return c.at
		}
	}
	return since
}
