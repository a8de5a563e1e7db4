package soak

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestKeptLines: a failed run's diagnostics keep the marked lines from
// the given time on, a plan's continuation lines with them, and the
// plugin lines Nomad indents.
func TestKeptLines(t *testing.T) {
	dir := t.TempDir()
	service := strings.Join([]string{
		"2026-11-28T07:00:00.000Z [DEBUG] gpushare-quota: plan changed",
		"  suspend team-a/j001 (project team-a): too early",
		"2026-11-28T07:01:00.000Z [DEBUG] gpushare-quota: plan changed",
		"  place team-c/j032/g1 on n1 GPUs [0]",
		"  unplaced team-a/j021: no idle capacity fits",
		"2026-11-28T07:01:01.000Z [DEBUG] gpushare-quota: cycle: read=1ms",
		"  not a continuation of a kept line",
		"2026-11-28T07:01:02.000Z [INFO]  gpushare-quota.actuator: suspended job: job=team-a/j015",
	}, "\n")
	agent := strings.Join([]string{
		"    2026-11-28T07:00:30.000Z [INFO]  client.device_mgr: partition: event=\"too early\"",
		"    2026-11-28T07:01:05.000Z [INFO]  client.device_mgr: partition: event=\"switched to share mode\"",
		"    2026-11-28T07:01:06.000Z [DEBUG] client.alloc_runner: unrelated",
	}, "\n")
	svcPath, agentPath := filepath.Join(dir, "svc.log"), filepath.Join(dir, "agent.log")
	for path, text := range map[string]string{svcPath: service, agentPath: agent} {
		if err := os.WriteFile(path, []byte(text+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	since := time.Date(2026, 11, 28, 7, 0, 45, 0, time.UTC)
	cases := []struct {
		name          string
		path          string
		marks         []string
		continuations bool
		want          []string
	}{
		{"service", svcPath, serviceLogMarks, true, []string{
			"2026-11-28T07:01:00.000Z [DEBUG] gpushare-quota: plan changed",
			"  place team-c/j032/g1 on n1 GPUs [0]",
			"  unplaced team-a/j021: no idle capacity fits",
			"2026-11-28T07:01:02.000Z [INFO]  gpushare-quota.actuator: suspended job: job=team-a/j015"}},
		{"plugin", agentPath, pluginLogMarks, false, []string{
			"    2026-11-28T07:01:05.000Z [INFO]  client.device_mgr: partition: event=\"switched to share mode\""}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := keptLines(tc.path, since, tc.marks, tc.continuations)
			if want := strings.Join(tc.want, "\n") + "\n"; got != want {
				t.Errorf("kept:\n%s\nwant:\n%s", got, want)
			}
		})
	}
}
