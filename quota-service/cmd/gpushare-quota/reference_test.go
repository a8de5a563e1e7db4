package main

import (
	"flag"
	"testing"

	"github.com/gpushare/nomad-gpushare/internal/refdoc"
)

var update = flag.Bool("update", false, "rewrite the generated flag reference in docs/operator.md")

// TestOperatorGuideListsEveryFlag: the flag reference in docs/operator.md
// is the flag set's, with the defaults a host without GPUSHARE_*
// variables gets. `go test ./quota-service/cmd/gpushare-quota -run
// TestOperatorGuide -update` rewrites it.
func TestOperatorGuideListsEveryFlag(t *testing.T) {
	d, _ := newFlags(&options{}, "")
	for _, name := range d.env {
		t.Setenv(name, "")
	}
	d, _ = newFlags(&options{}, "<hostname>-<pid>")
	var rows [][]string
	d.fs.VisitAll(func(f *flag.Flag) {
		env, def := "", "(none)"
		if v := d.env[f.Name]; v != "" {
			env = "`" + v + "`"
		}
		if f.DefValue != "" {
			def = "`" + f.DefValue + "`"
		}
		rows = append(rows, []string{"`-" + f.Name + "`", env, def, f.Usage})
	})
	body := refdoc.Table([]string{"flag", "environment", "default", "what it sets"}, rows)
	err := refdoc.Sync("../../../docs/operator.md", "quota-service-flags", body, *update,
		"go test ./quota-service/cmd/gpushare-quota -run TestOperatorGuide -update")
	if err != nil {
		t.Fatal(err)
	}
}
