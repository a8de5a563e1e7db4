// Package refdoc keeps the generated sections of a Markdown document (the
// flag and option references of docs/operator.md) in step with the code
// they are rendered from. A section lies between two markers:
//
//	<!-- BEGIN GENERATED name -->
//	...
//	<!-- END GENERATED name -->
//
// The tests that render a section call Sync: it fails when the file
// differs from the code, and rewrites the section when they run with
// -update.
package refdoc

import (
	"bytes"
	"fmt"
	"os"
	"strings"
)

func markers(name string) (begin, end string) {
	return "<!-- BEGIN GENERATED " + name + " -->\n", "<!-- END GENERATED " + name + " -->"
}

// Replace returns doc with section name's body replaced by body.
func Replace(doc []byte, name, body string) ([]byte, error) {
	begin, end := markers(name)
	i := bytes.Index(doc, []byte(begin))
	if i < 0 {
		return nil, fmt.Errorf("no line %q: add the section's markers", strings.TrimSpace(begin))
	}
	start := i + len(begin)
	j := bytes.Index(doc[start:], []byte(end))
	if j < 0 {
		return nil, fmt.Errorf("no line %q after its BEGIN line", end)
	}
	if body != "" && !strings.HasSuffix(body, "\n") {
		body += "\n"
	}
	out := append([]byte{}, doc[:start]...)
	out = append(out, body...)
	return append(out, doc[start+j:]...), nil
}

// Sync checks that section name of the file at path holds body; with
// update it rewrites the section instead. fix is the command that
// updates it, for the error.
func Sync(path, name, body string, update bool, fix string) error {
	doc, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("reading the reference: %w", err)
	}
	want, err := Replace(doc, name, body)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if bytes.Equal(doc, want) {
		return nil
	}
	if update {
		if err := os.WriteFile(path, want, 0o644); err != nil {
			return fmt.Errorf("updating the reference: %w", err)
		}
		return nil
	}
	return fmt.Errorf("%s: the section %q differs from the code; run `%s` and commit the result", path, name, fix)
}

// Table renders a Markdown table. Cells are written on one line, with
// pipes escaped.
func Table(header []string, rows [][]string) string {
	var b strings.Builder
	line := func(cells []string) {
		b.WriteString("|")
		for _, c := range cells {
			c = strings.Join(strings.Fields(c), " ")
			b.WriteString(" " + strings.ReplaceAll(c, "|", `\|`) + " |")
		}
		b.WriteString("\n")
	}
	line(header)
	sep := make([]string, len(header))
	for i := range sep {
		sep[i] = "---"
	}
	line(sep)
	for _, r := range rows {
		line(r)
	}
	return b.String()
}
