package dist

import (
	"archive/tar"
	"archive/zip"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"testing"
)

// TestBuildArchives builds a small binary into both archive formats and
// checks their contents, the binary's -version and SHA256SUMS.
func TestBuildArchives(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	host := runtime.GOOS + "/" + runtime.GOARCH
	comps := []Component{
		{Name: "hello", Package: "internal/dist/testdata/hello", Files: map[string]string{"docs/CHANGELOG.md": "CHANGELOG.md"}},
		{Name: "terraform-provider-hello", Package: "internal/dist/testdata/hello", Zip: true},
	}
	archives, err := Build(Options{Root: root, Out: out, Version: "1.2.3", Commit: "abc1234", Platforms: []string{host}, Components: comps})
	if err != nil {
		t.Fatal(err)
	}
	if len(archives) != 2 {
		t.Fatalf("got %d archives, want 2", len(archives))
	}
	tests := []struct {
		archive   Archive
		wantName  string
		wantFiles []string
	}{
		{archives[0], ArchiveName("hello", "1.2.3", host, false), []string{"hello", "docs/", "docs/CHANGELOG.md"}},
		{archives[1], ArchiveName("terraform-provider-hello", "1.2.3", host, true), []string{"terraform-provider-hello_v1.2.3"}},
	}
	for _, tt := range tests {
		t.Run(tt.wantName, func(t *testing.T) {
			if filepath.Base(tt.archive.Path) != tt.wantName {
				t.Errorf("archive %s, want %s", tt.archive.Path, tt.wantName)
			}
			files := unpack(t, tt.archive.Path, t.TempDir())
			if strings.Join(files, ",") != strings.Join(tt.wantFiles, ",") {
				t.Errorf("archive holds %v, want %v", files, tt.wantFiles)
			}
		})
	}
	// The binary answers -version with the version and commit set.
	dir := t.TempDir()
	unpack(t, archives[0].Path, dir)
	got, err := exec.Command(filepath.Join(dir, "hello"), "-version").Output()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(got), "hello 1.2.3 (abc1234) ") {
		t.Errorf("-version printed %q", got)
	}
	// SHA256SUMS in sha256sum's format, one line per archive, by name.
	sums, err := os.ReadFile(filepath.Join(out, "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	sorted := append([]Archive(nil), archives...)
	sort.Slice(sorted, func(i, j int) bool { return filepath.Base(sorted[i].Path) < filepath.Base(sorted[j].Path) })
	var want []string
	for _, a := range sorted {
		data, err := os.ReadFile(a.Path)
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(data)
		want = append(want, hex.EncodeToString(sum[:])+"  "+filepath.Base(a.Path)+"\n")
	}
	if string(sums) != strings.Join(want, "") {
		t.Errorf("SHA256SUMS:\n%s\nwant:\n%s", sums, strings.Join(want, ""))
	}
}

// unpack extracts a .tar.gz or .zip into dir and returns the names it
// holds, in order.
func unpack(t *testing.T, archive, dir string) []string {
	t.Helper()
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var names []string
	write := func(name string, mode os.FileMode, r io.Reader) {
		names = append(names, name)
		if strings.HasSuffix(name, "/") {
			return
		}
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		w, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY, mode)
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		if _, err := io.Copy(w, r); err != nil {
			t.Fatal(err)
		}
	}
	if strings.HasSuffix(archive, ".zip") {
		st, _ := f.Stat()
		zr, err := zip.NewReader(f, st.Size())
		if err != nil {
			t.Fatal(err)
		}
		for _, zf := range zr.File {
			r, err := zf.Open()
			if err != nil {
				t.Fatal(err)
			}
			write(zf.Name, zf.Mode(), r)
			r.Close()
		}
		return names
	}
	gz, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return names
		}
		if err != nil {
			t.Fatal(err)
		}
		write(h.Name, h.FileInfo().Mode(), tr)
	}
}

func TestCompilerSaysWhatToInstall(t *testing.T) {
	tests := []struct {
		name, platform string
		cc             map[string]string
		want           string
	}{
		{"unknown platform", "linux/riscv64", nil, "set CC_LINUX_RISCV64"},
		{"missing cross gcc", "linux/arm64", map[string]string{"linux/arm64": "no-such-gcc-for-gpushare"}, "apt-get install gcc-aarch64-linux-gnu"},
		{"missing compiler of an unknown platform", "linux/riscv64", map[string]string{"linux/riscv64": "no-such-gcc-for-gpushare"}, "set CC_LINUX_RISCV64"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Options{CC: tt.cc}.compiler(tt.platform)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("compiler(%s) = %v, want an error saying %q", tt.platform, err, tt.want)
			}
		})
	}
}

func TestBuildRefusesBadInput(t *testing.T) {
	tests := []struct {
		name string
		o    Options
		want string
	}{
		{"no version", Options{Platforms: []string{"linux/amd64"}}, "VERSION"},
		{"platform without arch", Options{Version: "1.0.0", Platforms: []string{"linux"}}, "os/arch"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.o.Out = t.TempDir()
			if _, err := Build(tt.o); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Build = %v, want an error saying %q", err, tt.want)
			}
		})
	}
}
