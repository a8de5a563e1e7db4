package main

import (
	"flag"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
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

// configSource is the directory of the package of device.Config, whose
// struct fields' comments describe the options.
var configSource = filepath.Join("../../..", strings.TrimPrefix(reflect.TypeOf(device.Config{}).PkgPath(), "github.com/gpushare/nomad-gpushare/"))

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

// fieldDocs reads the comments of the codec-tagged fields of
// device.Config and the structs it embeds, from configSource, by codec
// name, with the Go field names in them replaced by the option names. A
// field without a comment shares the comment above it (as NomadToken
// shares NomadAddress's).
func fieldDocs(t *testing.T) map[string]string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(configSource, "*.go"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no Go files in %s: %v", configSource, err)
	}
	structs := map[string]*ast.StructType{}
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), name, nil, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			if g, ok := d.(*ast.GenDecl); ok {
				for _, spec := range g.Specs {
					if ts, ok := spec.(*ast.TypeSpec); ok {
						if st, ok := ts.Type.(*ast.StructType); ok {
							structs[ts.Name.Name] = st
						}
					}
				}
			}
		}
	}
	docs, goNames := map[string]string{}, map[string]string{}
	var collect func(typeName string)
	collect = func(typeName string) {
		st, ok := structs[typeName]
		if !ok {
			t.Fatalf("no struct %s in %s", typeName, configSource)
		}
		last := ""
		for _, field := range st.Fields.List {
			if len(field.Names) == 0 {
				if id, ok := field.Type.(*ast.Ident); ok {
					collect(id.Name)
				}
				continue
			}
			if field.Tag == nil {
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
	}
	collect(reflect.TypeOf(device.Config{}).Name())
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
