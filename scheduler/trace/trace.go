// Package trace reads the Alibaba "openb" GPU trace format (the node and
// pod lists of the cluster-trace-gpu-v2023 data set behind the ATC'23
// "Beware of Fragmentation" paper) into placement nodes and tasks.
//
// Node list columns: sn, cpu_milli, memory_mib, gpu, model. Pod list
// columns: name, cpu_milli, memory_mib, num_gpu, gpu_milli and, optionally,
// gpu_spec (allowed models, "|"-separated, empty for any). Columns are found
// by header name; other columns are ignored.
//
// The reader refuses only malformed input, and every error names the file,
// the line and the field. A well-formed task that no node could ever hold
// (more CPU than any node, a GPU model no node has) is read like any other:
// the simulator counts it as an arrival that fails, as the paper's
// simulator does.
//
// GPU asks become cluster.Shares (0.01 GPU), the project's unit: gpu_milli is
// in thousandths of a GPU, so it is divided by ten, rounding up (a task
// never gets less than it asked for). Every gpu_milli in the published
// openb lists is a multiple of ten, so for them nothing is rounded.
package trace

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/gpushare/nomad-gpushare/scheduler/cluster"
	"github.com/gpushare/nomad-gpushare/scheduler/placement"
)

// Error is a problem in a trace file, at a line (1 is the header) and field
// ("" when it concerns the whole line or file).
type Error struct {
	File  string
	Line  int
	Field string
	Err   error
}

func (e *Error) Error() string {
	switch {
	case e.Line == 0:
		return fmt.Sprintf("%s: %v", e.File, e.Err)
	case e.Field == "":
		return fmt.Sprintf("%s:%d: %v", e.File, e.Line, e.Err)
	}
	return fmt.Sprintf("%s:%d: field %s: %v", e.File, e.Line, e.Field, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// Errors the parsers wrap.
var (
	ErrMissingColumn = errors.New("missing column")
	ErrBadValue      = errors.New("bad value")
)

// Task is one pod of a pod list: its name and what it asks for.
type Task struct {
	Name string
	placement.Task
}

// milliPerGPU is gpu_milli's whole GPU; milliPerShare converts gpu_milli
// to cluster.Shares.
const (
	milliPerGPU   = 1000
	milliPerShare = milliPerGPU / cluster.SharesPerGPU
)

// sharesOfMilli converts a gpu_milli value to shares, rounding up.
func sharesOfMilli(milli int64) cluster.Shares {
	return cluster.Shares((milli + milliPerShare - 1) / milliPerShare)
}

// table is a CSV file with a header, read row by row.
type table struct {
	file string
	r    *csv.Reader
	cols map[string]int
	row  []string
	line int
}

func newTable(file string, r io.Reader, required []string) (*table, error) {
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = -1
	cr.ReuseRecord = true
	header, err := cr.Read()
	if err == io.EOF {
		return nil, &Error{File: file, Line: 1, Err: fmt.Errorf("%w: empty file, no header", ErrMissingColumn)}
	}
	if err != nil {
		return nil, &Error{File: file, Line: 1, Err: err}
	}
	t := &table{file: file, r: cr, cols: map[string]int{}, line: 1}
	for i, h := range header {
		h = strings.TrimSpace(strings.TrimPrefix(h, "\ufeff"))
		if _, dup := t.cols[h]; !dup {
			t.cols[h] = i
		}
	}
	for _, c := range required {
		if _, ok := t.cols[c]; !ok {
			return nil, &Error{File: file, Line: 1, Field: c, Err: ErrMissingColumn}
		}
	}
	return t, nil
}

// next reads the next row; false at the end of the file.
func (t *table) next() (bool, error) {
	row, err := t.r.Read()
	if err == io.EOF {
		return false, nil
	}
	if err != nil {
		var pe *csv.ParseError
		line := t.line + 1
		if errors.As(err, &pe) {
			line = pe.Line
		}
		return false, &Error{File: t.file, Line: line, Err: err}
	}
	line, _ := t.r.FieldPos(0)
	t.line = line
	t.row = row
	return true, nil
}

func (t *table) errf(field string, err error) error {
	return &Error{File: t.file, Line: t.line, Field: field, Err: err}
}

// str is the value of column c, "" when the row is short.
func (t *table) str(c string) (string, bool) {
	i, ok := t.cols[c]
	if !ok || i >= len(t.row) {
		return "", false
	}
	return strings.TrimSpace(t.row[i]), true
}

// int reads column c as a non-negative integer no larger than max.
func (t *table) int(c string, max int64) (int64, error) {
	s, ok := t.str(c)
	if !ok {
		return 0, t.errf(c, fmt.Errorf("%w: row has no value", ErrBadValue))
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, t.errf(c, fmt.Errorf("%w: %q is not an integer", ErrBadValue, s))
	}
	if v < 0 {
		return 0, t.errf(c, fmt.Errorf("%w: %d is negative", ErrBadValue, v))
	}
	if v > max {
		return 0, t.errf(c, fmt.Errorf("%w: %d is above %d", ErrBadValue, v, max))
	}
	return v, nil
}

// Limits on values, to keep arithmetic far from overflow.
const (
	maxCPUMilli  = 1 << 40
	maxMemoryMiB = 1 << 40
	maxGPUs      = 1024
)

// OpenNodes reads a node list file.
func OpenNodes(path string) ([]placement.Node, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open node list: %w", err)
	}
	defer f.Close()
	return ReadNodes(path, f)
}

// OpenTasks reads a pod list file.
func OpenTasks(path string) ([]Task, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open pod list: %w", err)
	}
	defer f.Close()
	return ReadTasks(path, f)
}

// ReadNodes parses a node list; file names the input in errors. Each node
// gets gpu idle GPUs of the given model.
func ReadNodes(file string, r io.Reader) ([]placement.Node, error) {
	t, err := newTable(file, r, []string{"sn", "cpu_milli", "memory_mib", "gpu", "model"})
	if err != nil {
		return nil, err
	}
	var nodes []placement.Node
	for {
		ok, err := t.next()
		if err != nil {
			return nil, err
		}
		if !ok {
			break
		}
		name, _ := t.str("sn")
		if name == "" {
			return nil, t.errf("sn", fmt.Errorf("%w: empty node name", ErrBadValue))
		}
		cpu, err := t.int("cpu_milli", maxCPUMilli)
		if err != nil {
			return nil, err
		}
		mem, err := t.int("memory_mib", maxMemoryMiB)
		if err != nil {
			return nil, err
		}
		ngpu, err := t.int("gpu", maxGPUs)
		if err != nil {
			return nil, err
		}
		gpuModel, _ := t.str("model")
		if ngpu > 0 && gpuModel == "" {
			return nil, t.errf("model", fmt.Errorf("%w: node has GPUs but no model", ErrBadValue))
		}
		n := placement.Node{Name: name, CPUMilli: cpu, FreeCPUMilli: cpu, MemoryMiB: mem, FreeMemoryMiB: mem}
		n.GPUs = make([]placement.GPU, ngpu)
		for i := range n.GPUs {
			n.GPUs[i] = placement.GPU{Model: gpuModel, Free: cluster.SharesPerGPU}
		}
		nodes = append(nodes, n)
	}
	if len(nodes) == 0 {
		return nil, &Error{File: file, Err: fmt.Errorf("%w: no nodes", ErrBadValue)}
	}
	return nodes, nil
}

// ReadTasks parses a pod list; file names the input in errors.
func ReadTasks(file string, r io.Reader) ([]Task, error) {
	t, err := newTable(file, r, []string{"name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli"})
	if err != nil {
		return nil, err
	}
	var tasks []Task
	for {
		ok, err := t.next()
		if err != nil {
			return nil, err
		}
		if !ok {
			break
		}
		task, err := readTask(t)
		if err != nil {
			return nil, err
		}
		tasks = append(tasks, task)
	}
	return tasks, nil
}

func readTask(t *table) (Task, error) {
	var task Task
	task.Name, _ = t.str("name")
	var err error
	if task.CPUMilli, err = t.int("cpu_milli", maxCPUMilli); err != nil {
		return task, err
	}
	if task.MemoryMiB, err = t.int("memory_mib", maxMemoryMiB); err != nil {
		return task, err
	}
	num, err := t.int("num_gpu", maxGPUs)
	if err != nil {
		return task, err
	}
	milli, err := t.int("gpu_milli", milliPerGPU)
	if err != nil {
		return task, err
	}
	switch {
	case num == 0 && milli != 0:
		return task, t.errf("gpu_milli", fmt.Errorf("%w: %d milli-GPU with num_gpu 0", ErrBadValue, milli))
	case num > 0 && milli == 0:
		return task, t.errf("gpu_milli", fmt.Errorf("%w: 0 milli-GPU with num_gpu %d", ErrBadValue, num))
	case num > 1 && milli < milliPerGPU:
		return task, t.errf("gpu_milli", fmt.Errorf("%w: %d GPUs must be whole (1000), got %d", ErrBadValue, num, milli))
	}
	task.GPUCount, task.Shares = int(num), sharesOfMilli(milli)
	if spec, _ := t.str("gpu_spec"); spec != "" {
		for m := range strings.SplitSeq(spec, "|") {
			if m = strings.TrimSpace(m); m != "" {
				task.Models = append(task.Models, m)
			}
		}
	}
	return task, nil
}
