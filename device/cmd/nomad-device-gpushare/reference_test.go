package main

import (
	"flag"
	"go/ast"
	"go/parser"
	"go/token"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/gpushare/nomad-gpushare/device"
	"github.com/gpushare/nomad-gpushare/internal/refdoc"
	hclog "github.com/hashicorp/go-hclog"
)

var update = flag.Bool("update", false, "rewrite the generated option reference in docs/operator.md")

// configSource holds the plugin's Config and Dynamic structs, whose field
// comments describe the options.
const configSource = "../../config.go"

// TestOperatorGuideListsEveryOption: the option reference in
// docs/operator.md is the plugin's config schema (names, types,
// defaults) with each option described by its field's comment in
// device/config.go; every schema attribute has a field, and every field a
// schema attribute. `go test ./device/cmd/nomad-device-gpushare -run
// TestOperatorGuide -update` rewrites it.
func TestOperatorGuideListsEveryOption(t *testing.T) {
	spec, err := device.New(hclog.NewNullLogger()).ConfigSchema()
	if err != nil {
		t.Fatal(err)
	}
	docs := fieldDocs(t)
	attrs := spec.GetObject().GetAttributes()
	names := make([]string, 0, len(attrs))
	for name := range attrs {
		names = append(names, name)
		if _, ok := docs[name]; !ok {
			t.Errorf("option %s has no field with codec:%q in %s", name, name, configSource)
		}
	}
	for name := range docs {
		if _, ok := attrs[name]; !ok {
			t.Errorf("field with codec:%q in %s is not in the config schema", name, configSource)
		}
	}
	sort.Strings(names)
	var rows [][]string
	for _, name := range names {
		s := attrs[name]
		attr, def := s.GetAttr(), "(none)"
		if d := s.GetDefault(); d != nil {
			attr = d.GetPrimary().GetAttr()
			def = "`" + d.GetDefault().GetLiteral().GetValue() + "`"
		}
		// "`name`: what it does" reads "what it does" in name's row.
		doc := strings.TrimPrefix(docs[name], "`"+name+"`: ")
		rows = append(rows, []string{"`" + name + "`", attr.GetType(), def, doc})
	}
	body := refdoc.Table([]string{"option", "type", "default", "what it sets"}, rows)
	err = refdoc.Sync("../../../docs/operator.md", "plugin-options", body, *update,
		"go test ./device/cmd/nomad-device-gpushare -run TestOperatorGuide -update")
	if err != nil {
		t.Fatal(err)
	}
}

// fieldDocs reads the comments of the codec-tagged fields of the structs
// in configSource, by codec name, with the Go field names in them
// replaced by the option names. A field without a comment shares the
// comment above it (as NomadToken shares NomadAddress's).
func fieldDocs(t *testing.T) map[string]string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), configSource, nil, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	docs, goNames := map[string]string{}, map[string]string{}
	ast.Inspect(f, func(n ast.Node) bool {
		st, ok := n.(*ast.StructType)
		if !ok {
			return true
		}
		last := ""
		for _, field := range st.Fields.List {
			if field.Tag == nil || len(field.Names) == 0 {
				continue
			}
			codec := reflect.StructTag(strings.Trim(field.Tag.Value, "`")).Get("codec")
			if codec == "" {
				continue
			}
			if field.Doc != nil {
				last = field.Doc.Text()
			}
			docs[codec] = last
			goNames[field.Names[0].Name] = codec
		}
		return true
	})
	word := regexp.MustCompile(`\b[A-Z][A-Za-z]+\b`)
	for codec, doc := range docs {
		docs[codec] = word.ReplaceAllStringFunc(strings.Join(strings.Fields(doc), " "), func(w string) string {
			if c, ok := goNames[w]; ok {
				return "`" + c + "`"
			}
			return w
		})
	}
	return docs
}
