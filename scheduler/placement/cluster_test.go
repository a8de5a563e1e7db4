package placement

import (
	"testing"

	"github.com/gpushare/nomad-gpushare/scheduler/model"
)

// TestMayUse: a task may use a GPU of a model it names (or any model when
// it names none) in a mode that admits its kind.
func TestMayUse(t *testing.T) {
	shareAny := Task{GPUCount: 1, Shares: 25}
	wholeA100 := Task{GPUCount: 2, Shares: model.SharesPerGPU, Models: []string{"A100"}}
	tests := []struct {
		name  string
		task  Task
		model string
		mode  model.Mode
		want  bool
	}{
		{"share, any mode", shareAny, "H100", model.ModeAny, true},
		{"share, shared mode", shareAny, "H100", model.ModeShared, true},
		{"share, whole mode", shareAny, "H100", model.ModeWhole, false},
		{"share, MIG", shareAny, "H100", model.ModeMIG, false},
		{"whole, its model", wholeA100, "A100", model.ModeAny, true},
		{"whole, whole mode", wholeA100, "A100", model.ModeWhole, true},
		{"whole, shared mode", wholeA100, "A100", model.ModeShared, false},
		{"whole, other model", wholeA100, "H100", model.ModeWhole, false},
		{"whole, MIG", wholeA100, "A100", model.ModeMIG, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.task.MayUse(tt.model, tt.mode); got != tt.want {
				t.Errorf("MayUse(%s, %s) = %v, want %v", tt.model, tt.mode, got, tt.want)
			}
		})
	}
}
