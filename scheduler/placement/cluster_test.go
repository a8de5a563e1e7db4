package placement

import (
	"testing"

	"github.com/gpushare/nomad-gpushare/scheduler/cluster"
)

// TestMayUse: a task may use a GPU of a model it names (or any model when
// it names none) in a mode that admits its kind.
func TestMayUse(t *testing.T) {
	shareAny := Task{GPUCount: 1, Shares: 25}
	wholeA100 := Task{GPUCount: 2, Shares: cluster.SharesPerGPU, Models: []string{"A100"}}
	tests := []struct {
		name  string
		task  Task
		model string
		mode  cluster.Mode
		want  bool
	}{
		{"share, any mode", shareAny, "H100", cluster.ModeAny, true},
		{"share, shared mode", shareAny, "H100", cluster.ModeShared, true},
		{"share, whole mode", shareAny, "H100", cluster.ModeWhole, false},
		{"share, MIG", shareAny, "H100", cluster.ModeMIG, false},
		{"whole, its model", wholeA100, "A100", cluster.ModeAny, true},
		{"whole, whole mode", wholeA100, "A100", cluster.ModeWhole, true},
		{"whole, shared mode", wholeA100, "A100", cluster.ModeShared, false},
		{"whole, other model", wholeA100, "H100", cluster.ModeWhole, false},
		{"whole, MIG", wholeA100, "A100", cluster.ModeMIG, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.task.MayUse(tt.model, tt.mode); got != tt.want {
				t.Errorf("MayUse(%s, %s) = %v, want %v", tt.model, tt.mode, got, tt.want)
			}
		})
	}
}
