package scenario

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/gpushare/nomad-gpushare/scheduler/plan"
)

// TestScenarios runs every scenario under testdata: each file is one table
// row with its cluster, running work, pending work and expectations.
func TestScenarios(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "*.scn"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no scenarios under testdata")
	}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			f, err := os.Open(file)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			sc, err := Parse(file, f)
			if err != nil {
				t.Fatal(err)
			}
			if len(sc.Expects) == 0 {
				t.Fatal("scenario expects nothing")
			}
			out, err := sc.Run(planOptions())
			if err != nil {
				t.Fatal(err)
			}
			for _, err := range sc.Check(out) {
				t.Error(err)
			}
		})
	}
}

func planOptions() plan.Options { return plan.Options{} }
