package nomadwatch

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/gpushare/nomad-gpushare/quota-service/quota"
	"github.com/gpushare/nomad-gpushare/scheduler/cluster"
	"github.com/gpushare/nomad-gpushare/vocab/nomadread"
	nomadapi "github.com/hashicorp/nomad/api"
)

// projectResolver maps jobs to projects.
type projectResolver struct {
	byNamespace map[string]string
	// metaKeys maps a job meta key to the projects that declared it.
	metaKeys map[string]map[string]bool
}

// newResolver builds the mapping from the quota settings in force.
func newResolver(settings []quota.Settings) *projectResolver {
	r := &projectResolver{byNamespace: map[string]string{}, metaKeys: map[string]map[string]bool{}}
	for _, s := range settings {
		if _, taken := r.byNamespace[s.Namespace]; !taken || s.Project == s.Namespace {
			r.byNamespace[s.Namespace] = s.Project
		}
		if s.JobMetaKey != "" {
			if r.metaKeys[s.JobMetaKey] == nil {
				r.metaKeys[s.JobMetaKey] = map[string]bool{}
			}
			r.metaKeys[s.JobMetaKey][s.Project] = true
		}
	}
	return r
}

// Project returns the project of a job: a project named by a declared meta
// key, else the project mapping its namespace, else the namespace itself.
func (r *projectResolver) Project(namespace string, meta map[string]string) string {
	keys := make([]string, 0, len(r.metaKeys))
	for k := range r.metaKeys {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if v, ok := meta[k]; ok && r.metaKeys[k][v] {
			return v
		}
	}
	if p, ok := r.byNamespace[namespace]; ok {
		return p
	}
	return namespace
}

// GroupAsk is the GPU ask of one instance of a task group, with its CPU
// and memory, summed over its tasks; ok is false for CPU-only groups
// (whose ask still holds their CPU and memory). A share request's count is
// in instances of unit shares each (assembler.shareUnitOf; 1 for a plugin
// with shares_per_gpu 100).
func GroupAsk(tg *nomadapi.TaskGroup, unit int) (ask cluster.Ask, ok bool, err error) {
	for _, task := range tg.Tasks {
		if task == nil || task.Resources == nil {
			continue
		}
		if task.Resources.CPU != nil {
			ask.CPUMilli += int64(*task.Resources.CPU)
		}
		if task.Resources.MemoryMB != nil {
			ask.MemoryMiB += int64(*task.Resources.MemoryMB)
		}
		for _, d := range task.Resources.Devices {
			if d == nil {
				continue
			}
			req := nomadread.ParseRequest(d)
			switch {
			case req.Whole():
				ask.WholeGPUs += req.Count
			case req.Share():
				ask.Shares += cluster.Shares(req.Count * unit)
			default:
				continue
			}
			if req.Name != "" {
				ask.Models = append(ask.Models, req.Name)
			}
			ok = true
		}
	}
	if ok {
		if verr := ask.Validate(); verr != nil {
			return cluster.Ask{}, false, fmt.Errorf("group %q: %w", groupName(tg), verr)
		}
	}
	return ask, ok, nil
}

// groupName is tg's name, "" for a group Nomad has not canonicalized.
func groupName(tg *nomadapi.TaskGroup) string {
	if tg.Name == nil {
		return ""
	}
	return *tg.Name
}

func jobPreemptible(meta map[string]string) bool {
	return !strings.EqualFold(strings.TrimSpace(meta[MetaPreempt]), "false")
}

// MetaMovable is the job meta key by which a job opts in to being moved
// to another node to make room ("true"; docs/design.md, Consolidation).
const MetaMovable = "gpushare.movable"

func jobMovable(meta map[string]string) bool {
	return strings.EqualFold(strings.TrimSpace(meta[MetaMovable]), "true")
}

// MetaMinRuntime is the job meta key that shortens its project's
// min_runtime for the job (a duration such as "2m"); it never lengthens
// it.
const MetaMinRuntime = "gpushare.min_runtime"

// minRuntime is job key's minimum runtime: its project's, or the job's
// MetaMinRuntime where shorter. A value that is not a duration is a
// warning; the project's then holds.
func (a *assembler) minRuntime(project, key string, meta map[string]string) time.Duration {
	d := a.minRuntimes[project]
	v, ok := meta[MetaMinRuntime]
	if !ok {
		return d
	}
	own, err := time.ParseDuration(strings.TrimSpace(v))
	if err != nil || own < 0 {
		a.warn("job %s: meta %s = %q is not a duration such as \"5m\"; the project's minimum runtime %s holds", key, MetaMinRuntime, v, d)
		return d
	}
	return min(d, own)
}
