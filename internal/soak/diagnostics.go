package soak

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// A run that fails in CI leaves nothing behind but its output, so a
// violation's Result carries what the services decided and what the
// plugins did in the minutes before it (Result.Logs): the quota-service
// instances' changed plans and actions (at -log-level debug, every plan
// that changed), and the device plugins' partition events.

// serviceLogMarks are the service log lines the diagnostics keep; a
// "plan changed" line's indented continuation lines come with it.
var serviceLogMarks = []string{"plan changed", "acquired leadership", "lost leadership", "suspended job", "resumed job",
	"scaled elastic group", "re-evaluated", "action held back", "action failed", "suspension record closed",
	"cycle took no action", "[WARN]", "[ERROR]"}

// pluginLogMarks are the agent log lines the diagnostics keep.
var pluginLogMarks = []string{"partition:", "share tenant bound", "refused"}

// diagnostics are the lines of the run's logs in dir, from since on, that
// explain a violation: each quota-service instance's log, then the
// agents' (the plugins log through them).
func diagnostics(dir string, since time.Time) string {
	var b strings.Builder
	for _, name := range []string{"soak-a.log", "soak-b.log"} {
		fmt.Fprintf(&b, "--- %s\n", name)
		b.WriteString(keptLines(filepath.Join(dir, name), since, serviceLogMarks, true))
	}
	logs, _ := filepath.Glob(filepath.Join(dir, "agents", "*.log"))
	for _, path := range logs {
		fmt.Fprintf(&b, "--- %s\n", filepath.Base(path))
		b.WriteString(keptLines(path, since, pluginLogMarks, false))
	}
	return b.String()
}

// keptLines are the lines of the file at path stamped at since or later
// that contain one of marks; with continuations, the indented lines that
// follow a kept line come with it.
func keptLines(path string, since time.Time, marks []string, continuations bool) string {
	f, err := os.Open(path)
	if err != nil {
		return err.Error() + "\n"
	}
	defer f.Close()
	var b strings.Builder
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	keeping := false
	for sc.Scan() {
		line := sc.Text()
		if continuations && keeping && strings.HasPrefix(line, "  ") {
			b.WriteString(line + "\n")
			continue
		}
		keeping = false
		at, ok := stampOf(line)
		if !ok || at.Before(since) {
			continue
		}
		for _, m := range marks {
			if strings.Contains(line, m) {
				keeping = true
				b.WriteString(line + "\n")
				break
			}
		}
	}
	return b.String()
}

// stampOf reads the RFC 3339 time an hclog line starts with (after any
// indentation, as Nomad writes its plugins' lines).
func stampOf(line string) (time.Time, bool) {
	line = strings.TrimLeft(line, " \t")
	stamp, _, ok := strings.Cut(line, " ")
	if !ok {
		return time.Time{}, false
	}
	t, err := time.Parse(time.RFC3339Nano, stamp)
	return t, err == nil
}
