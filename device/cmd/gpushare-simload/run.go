package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/gpushare/nomad-gpushare/device/gpu/simproc"
)

// pollEvery is how often the control file is read.
const pollEvery = 100 * time.Millisecond

// options are the parsed flags.
type options struct {
	stateDir, gpu, control, marker string
	use, restartUse                usage
	exclusive                      bool
}

// usage is what the process uses.
type usage struct {
	mib uint64
	sm  uint32
}

// run parses args and simulates until ctx ends.
func run(ctx context.Context, args []string, getenv func(string) string, out io.Writer) error {
	o, err := parseOptions(args, getenv)
	if err != nil {
		return err
	}
	start, err := simproc.StartTicks(0)
	if err != nil {
		return fmt.Errorf("reading own start time: %w", err)
	}
	if o.exclusive {
		if err := checkExclusive(o.stateDir, o.gpu); err != nil {
			return err
		}
	}
	base := o.use
	if o.marker != "" {
		if _, err := os.Stat(o.marker); err == nil {
			base = o.restartUse
		}
		_ = os.WriteFile(o.marker, nil, 0o644)
	}
	st := simproc.State{PID: os.Getpid(), StartTicks: start, GPU: o.gpu}
	defer simproc.Remove(o.stateDir, st.PID)
	var last *usage
	for {
		u := base
		if c, ok := readControl(o.control, getenv); ok {
			u = c
		}
		if last == nil || u != *last {
			st.UsedMiB, st.SMPct = u.mib, u.sm
			if err := simproc.Write(o.stateDir, st); err != nil {
				return err
			}
			fmt.Fprintf(out, "%s pid %d on %s: %d MiB, %d%% SM\n", time.Now().Format(time.RFC3339Nano), st.PID, o.gpu, u.mib, u.sm)
			last = &u
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(pollEvery):
		}
	}
}

func parseOptions(args []string, getenv func(string) string) (options, error) {
	var o options
	fs := flag.NewFlagSet("gpushare-simload", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&o.stateDir, "state-dir", "", "directory of the simulated backend (the plugin's simulated_process_dir)")
	fs.StringVar(&o.gpu, "gpu", "", "GPU UUID (default: the first of NVIDIA_VISIBLE_DEVICES)")
	mib := fs.String("mib", "0", `GPU memory to use: MiB, "request" or "limit"`)
	sm := fs.Uint("sm", 0, "SM utilization to use, percent")
	rmib := fs.String("restart-mib", "", "GPU memory after a restart in the same allocation (default -mib)")
	rsm := fs.Int("restart-sm", -1, "SM utilization after a restart (default -sm)")
	fs.StringVar(&o.control, "control", "", `file whose "mib=V sm=P" line, while it exists, overrides the use`)
	fs.BoolVar(&o.exclusive, "require-exclusive", false, "exit 3 at start when another simulated process is on the GPU")
	if err := fs.Parse(args); err != nil {
		return o, fmt.Errorf("%w (usage: gpushare-simload -state-dir DIR [-mib V] [-sm P] [-restart-mib V] [-restart-sm P] [-control FILE] [-require-exclusive])", err)
	}
	if o.stateDir == "" {
		return o, errors.New("-state-dir is required: give the plugin's simulated_process_dir")
	}
	if o.gpu == "" {
		o.gpu, _, _ = strings.Cut(getenv("NVIDIA_VISIBLE_DEVICES"), ",")
	}
	if o.gpu == "" {
		return o, errors.New("no GPU: NVIDIA_VISIBLE_DEVICES is empty (run as a task with a gpushare device) and -gpu is not given")
	}
	var err error
	if o.use, err = parseUsage(*mib, *sm, getenv); err != nil {
		return o, err
	}
	o.restartUse = o.use
	if *rmib != "" {
		if o.restartUse.mib, err = parseMiB(*rmib, getenv); err != nil {
			return o, fmt.Errorf("-restart-mib: %w", err)
		}
	}
	if *rsm >= 0 {
		o.restartUse.sm = uint32(min(*rsm, 100))
	}
	if dir := getenv("NOMAD_TASK_DIR"); dir != "" {
		o.marker = filepath.Join(dir, ".gpushare-simload-ran")
	}
	return o, nil
}

func parseUsage(mib string, sm uint, getenv func(string) string) (usage, error) {
	m, err := parseMiB(mib, getenv)
	if err != nil {
		return usage{}, fmt.Errorf("-mib: %w", err)
	}
	return usage{mib: m, sm: uint32(min(sm, 100))}, nil
}

// parseMiB reads a memory value: MiB, "request" or "limit".
func parseMiB(v string, getenv func(string) string) (uint64, error) {
	env := map[string]string{"request": "GPUSHARE_REQUEST_MIB", "limit": "GPUSHARE_LIMIT_MIB"}[v]
	if env != "" {
		v = getenv(env)
		if v == "" {
			return 0, fmt.Errorf("%s is not set: run as a task with a gpushare device", env)
		}
	}
	n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
	if err != nil {
		return 0, fmt.Errorf(`%q is not MiB, "request" or "limit"`, v)
	}
	return n, nil
}

// readControl reads the control file's "mib=V sm=P" line; ok is false
// while there is no file or it does not parse.
func readControl(path string, getenv func(string) string) (usage, bool) {
	if path == "" {
		return usage{}, false
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return usage{}, false
	}
	var u usage
	for _, f := range strings.Fields(string(b)) {
		k, v, _ := strings.Cut(f, "=")
		switch k {
		case "mib":
			m, err := parseMiB(v, getenv)
			if err != nil {
				return usage{}, false
			}
			u.mib = m
		case "sm":
			p, err := strconv.ParseUint(v, 10, 32)
			if err != nil {
				return usage{}, false
			}
			u.sm = uint32(min(p, 100))
		}
	}
	return u, true
}

// checkExclusive fails when another live simulated process is on gpu.
func checkExclusive(dir, gpu string) error {
	states, err := simproc.List(dir)
	if err != nil {
		return err
	}
	var others []string
	for _, s := range states {
		if s.GPU == gpu && s.PID != os.Getpid() {
			others = append(others, fmt.Sprintf("pid %d (%d MiB)", s.PID, s.UsedMiB))
		}
	}
	if len(others) > 0 {
		return exitError{3, fmt.Sprintf("GPU %s is not exclusive at start: %s", gpu, strings.Join(others, ", "))}
	}
	return nil
}
