package trace

import (
	"encoding/csv"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/gpushare/nomad-gpushare/scheduler/cluster"
)

// milliOfShares converts shares back to gpu_milli.
func milliOfShares(s cluster.Shares) int64 { return int64(s) * milliPerShare }

// WriteTasks writes tasks as a pod list that ReadTasks reads back
// unchanged: name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec.
func WriteTasks(w io.Writer, tasks []Task) error {
	cw := csv.NewWriter(w)
	if err := cw.Write([]string{"name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli", "gpu_spec"}); err != nil {
		return fmt.Errorf("write pod list: %w", err)
	}
	for _, t := range tasks {
		row := []string{
			t.Name,
			strconv.FormatInt(t.CPUMilli, 10),
			strconv.FormatInt(t.MemoryMiB, 10),
			strconv.Itoa(t.GPUCount),
			strconv.FormatInt(milliOfShares(t.Shares), 10),
			strings.Join(t.Models, "|"),
		}
		if err := cw.Write(row); err != nil {
			return fmt.Errorf("write pod list: task %s: %w", t.Name, err)
		}
	}
	cw.Flush()
	if err := cw.Error(); err != nil {
		return fmt.Errorf("write pod list: %w", err)
	}
	return nil
}
