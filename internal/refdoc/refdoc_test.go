package refdoc

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestReplace(t *testing.T) {
	tests := []struct {
		name, doc, body, want, wantErr string
	}{
		{"replaces the body", "a\n<!-- BEGIN GENERATED x -->\nold\n<!-- END GENERATED x -->\nb\n", "new", "a\n<!-- BEGIN GENERATED x -->\nnew\n<!-- END GENERATED x -->\nb\n", ""},
		{"empty section", "<!-- BEGIN GENERATED x -->\n<!-- END GENERATED x -->\n", "new\n", "<!-- BEGIN GENERATED x -->\nnew\n<!-- END GENERATED x -->\n", ""},
		{"other sections untouched", "<!-- BEGIN GENERATED y -->\nkeep\n<!-- END GENERATED y -->\n<!-- BEGIN GENERATED x -->\n<!-- END GENERATED x -->\n", "new",
			"<!-- BEGIN GENERATED y -->\nkeep\n<!-- END GENERATED y -->\n<!-- BEGIN GENERATED x -->\nnew\n<!-- END GENERATED x -->\n", ""},
		{"no begin", "text\n", "new", "", "add the section's markers"},
		{"no end", "<!-- BEGIN GENERATED x -->\nold\n", "new", "", "END GENERATED x"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Replace([]byte(tt.doc), "x", tt.body)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Replace = %v, want an error saying %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || string(got) != tt.want {
				t.Fatalf("Replace = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

// TestSync: a drifted section fails, naming the fix; with update it is
// rewritten, and then passes.
func TestSync(t *testing.T) {
	path := filepath.Join(t.TempDir(), "doc.md")
	if err := os.WriteFile(path, []byte("<!-- BEGIN GENERATED x -->\nold\n<!-- END GENERATED x -->\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		name    string
		update  bool
		wantErr string
	}{
		{"drift fails", false, "run `go test -update`"},
		{"update rewrites", true, ""},
		{"then it matches", false, ""},
	}
	for _, s := range steps {
		err := Sync(path, "x", "new\n", s.update, "go test -update")
		if (err == nil) != (s.wantErr == "") || (err != nil && !strings.Contains(err.Error(), s.wantErr)) {
			t.Fatalf("%s: Sync = %v, want error %q", s.name, err, s.wantErr)
		}
	}
}

func TestTable(t *testing.T) {
	got := Table([]string{"a", "b"}, [][]string{{"x|y", "two\n  lines"}})
	want := "| a | b |\n| --- | --- |\n| x\\|y | two lines |\n"
	if got != want {
		t.Errorf("Table = %q, want %q", got, want)
	}
}
