package main

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// Tiny cluster traces: two nodes of two GPU models, and pods: a share, a
// whole GPU and a CPU-only pod, and with fourPods also a two-GPU pod.
const (
	twoTypes  = "sn,cpu_milli,memory_mib,gpu,model\na,64000,65536,2,T4\nb,64000,65536,4,G2\n"
	threePods = "name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,1000,1024,1,600\nq,1000,1024,1,1000\nr,500,512,0,0\n"
	fourPods  = "name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,1000,1024,1,600\nq,1000,1024,1,1000\nm,2000,1024,2,1000\nr,500,512,0,0\n"
)

// writeTrace writes a cluster trace's node and pod tables to a temporary
// directory and returns it with the two files' paths.
func writeTrace(t *testing.T, nodeTable, podTable string) (dir, nodes, pods string) {
	t.Helper()
	dir = t.TempDir()
	nodes, pods = filepath.Join(dir, "nodes.csv"), filepath.Join(dir, "pods.csv")
	for path, table := range map[string]string{nodes: nodeTable, pods: podTable} {
		if err := os.WriteFile(path, []byte(table), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir, nodes, pods
}

func TestParseSeeds(t *testing.T) {
	tests := []struct {
		in   string
		want []int64
		err  bool
	}{
		{"42-44", []int64{42, 43, 44}, false},
		{"7", []int64{7}, false},
		{"1,5", []int64{1, 5}, false},
		{"5-1", nil, true},
		{"x", nil, true},
	}
	for _, tc := range tests {
		got, err := parseSeeds(tc.in)
		if (err != nil) != tc.err || len(got) != len(tc.want) {
			t.Errorf("parseSeeds(%q) = %v, %v", tc.in, got, err)
			continue
		}
		for i := range got {
			if got[i] != tc.want[i] {
				t.Errorf("parseSeeds(%q) = %v, want %v", tc.in, got, tc.want)
			}
		}
	}
}

func TestRunPrintsOneLinePerPolicy(t *testing.T) {
	_, nodes, pods := writeTrace(t, "sn,cpu_milli,memory_mib,gpu,model\na,64000,65536,2,T4\nb,64000,65536,2,T4\n", threePods)
	var out, errOut bytes.Buffer
	err := run([]string{"-nodes", nodes, "-pods", pods, "-seeds", "1-3", "-name", "tiny", "-parallel", "2"}, &out, &errOut)
	if err != nil {
		t.Fatalf("run: %v (%s)", err, errOut.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != len(defaultPolicies) {
		t.Fatalf("got %d lines, want %d:\n%s", len(lines), len(defaultPolicies), out.String())
	}
	re := regexp.MustCompile(`^trace=tiny policy=\w+ unalloc_at_100=[0-9.]+ min=[0-9.]+ max=[0-9.]+ alloc_at_130=[0-9.]+ seeds=1-3( vs_fgd=[0-9.]+)?$`)
	for _, l := range lines {
		if !re.MatchString(l) {
			t.Errorf("bad line %q", l)
		}
		// fgd comes before gpushare in the default list.
		if strings.Contains(l, "policy=gpushare ") != strings.Contains(l, " vs_fgd=") {
			t.Errorf("line %q: vs_fgd on gpushare's line only", l)
		}
	}
	if err := run([]string{"-nodes", nodes, "-pods", pods, "-policy", "worstfit"}, &out, &errOut); err == nil ||
		!strings.Contains(err.Error(), "bestfit") {
		t.Errorf("unknown policy: error %v does not list valid names", err)
	}
}

func TestVariantSubcommand(t *testing.T) {
	dir, nodes, pods := writeTrace(t, twoTypes, fourPods)
	out := filepath.Join(dir, "v.csv")
	var stdout, stderr bytes.Buffer
	if err := run([]string{"variant", "-nodes", nodes, "-pods", pods, "-variant", "multigpu50+gpuspec100", "-seed", "3", "-o", out}, &stdout, &stderr); err != nil {
		t.Fatalf("variant: %v (%s)", err, stderr.String())
	}
	written, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(written)), "\n")
	if len(lines) != 5 || lines[0] != "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec" {
		t.Fatalf("variant wrote:\n%s", written)
	}
	for _, l := range lines[1:] {
		if !strings.Contains(l, ",0,0,") && !strings.HasSuffix(l, ",G2") && !strings.HasSuffix(l, ",T4") && !strings.HasSuffix(l, ",G2|T4") {
			t.Errorf("GPU task without a model constraint under gpuspec100: %q", l)
		}
	}
	stdout.Reset()
	if err := run([]string{"-nodes", nodes, "-pods", pods, "-variant", "multigpu50", "-seeds", "1", "-policy", "bestfit"}, &stdout, &stderr); err != nil {
		t.Fatalf("simulate a variant: %v", err)
	}
	if !strings.HasPrefix(stdout.String(), "trace=multigpu50 policy=bestfit ") {
		t.Errorf("simulating a variant printed %q", stdout.String())
	}
	if err := run([]string{"variant", "-nodes", nodes, "-pods", pods, "-variant", "bogus7"}, &stdout, &stderr); err == nil || !strings.Contains(err.Error(), "gpushareNN") {
		t.Errorf("bad variant: error %v does not list the kinds", err)
	}
}

func TestRankingAlternatives(t *testing.T) {
	_, nodes, pods := writeTrace(t, twoTypes, threePods)
	var out, errOut bytes.Buffer
	args := []string{"-nodes", nodes, "-pods", pods, "-seeds", "1-2", "-policy", "deployed,deployed-ranked",
		"-ranking", "nodemeta-only,gpu-jobs-only,thresholds=0;-10,lag=3"}
	if err := run(args, &out, &errOut); err != nil {
		t.Fatalf("run: %v (%s)", err, errOut.String())
	}
	if got := strings.Count(out.String(), "\n"); got != 2 {
		t.Errorf("got %d lines:\n%s", got, out.String())
	}
	if !strings.Contains(out.String(), "policy=deployed-ranked(nodemeta-only,gpu-jobs-only,thresholds=0;-10,lag=3) ") {
		t.Errorf("the alternative is not in deployed-ranked's name:\n%s", out.String())
	}
	for _, bad := range []string{"lag=-1", "thresholds=x", "bogus"} {
		if err := run([]string{"-nodes", nodes, "-pods", pods, "-ranking", bad}, &out, &errOut); err == nil || !strings.Contains(err.Error(), "-ranking") {
			t.Errorf("-ranking %s: error %v", bad, err)
		}
	}
}

func TestTableAndBound(t *testing.T) {
	_, nodes, pods := writeTrace(t, twoTypes, fourPods)
	var out, errOut bytes.Buffer
	args := []string{"table", "-nodes", nodes, "-pods", pods, "-families", "default,multigpu50", "-variant-seeds", "1-2", "-seeds", "1-2", "-policy", "gpushare,gpushare-reserve"}
	if err := run(args, &out, &errOut); err != nil {
		t.Fatalf("table: %v (%s)", err, errOut.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 4 || !strings.HasPrefix(lines[0], "| family | fgd | gpushare | ratio | worst run | gpushare-reserve |") {
		t.Fatalf("table printed:\n%s", out.String())
	}
	row := regexp.MustCompile(`^\| (default|multigpu50) \| [0-9.]+ (\| [0-9.]+ \| [0-9.]+ \| [0-9.]+ ){2}\| [0-9.]+ \|$`)
	for _, l := range lines[2:] {
		if !row.MatchString(l) {
			t.Errorf("bad row %q", l)
		}
	}
	out.Reset()
	if err := run([]string{"-nodes", nodes, "-pods", pods, "-seeds", "1-2", "-policy", "fgd", "-bound", "bestfit"}, &out, &errOut); err != nil {
		t.Fatalf("-bound: %v", err)
	}
	if !strings.Contains(out.String(), "\ntrace=default policy=offline(bestfit) unalloc_at_100=") {
		t.Errorf("-bound printed:\n%s", out.String())
	}
	out.Reset()
	if err := run([]string{"-nodes", nodes, "-pods", pods, "-seeds", "1-2", "-policy", "fgd", "-consolidate", "gpushare", "-movable", "0.5"}, &out, &errOut); err != nil {
		t.Fatalf("-consolidate: %v", err)
	}
	if !regexp.MustCompile(`\ntrace=default policy=consolidate\(gpushare,movable=0.50\) unalloc_at_100=.* vs_fgd=[0-9.]+ moves=[0-9.]+ consolidated=[0-9.]+\n`).MatchString(out.String()) {
		t.Errorf("-consolidate printed:\n%s", out.String())
	}
	for _, bad := range [][]string{{"table", "-nodes", nodes}, {"table", "-nodes", nodes, "-pods", pods, "-policy", "worstfit"},
		{"-nodes", nodes, "-pods", pods, "-consolidate", "worstfit"}, {"-nodes", nodes, "-pods", pods, "-consolidate", "fgd", "-movable", "1.5"}} {
		if err := run(bad, &out, &errOut); err == nil {
			t.Errorf("%v: no error", bad)
		}
	}
}
