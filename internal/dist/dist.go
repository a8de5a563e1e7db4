// Package dist builds gpushare's release archives (`make dist`): for each
// platform, one archive per component, each holding the binary (its
// version set at link time, package internal/version) and what an
// operator installs it with, and a SHA256SUMS file over them all.
//
//	nomad-device-gpushare_<version>_<os>_<arch>.tar.gz   the plugin, jobspecs/plugin.hcl
//	gpushare-quota_<version>_<os>_<arch>.tar.gz          the quota service, its job, the ACL policies
//	terraform-provider-gpushare_<version>_<os>_<arch>.zip the provider, in the name and format of
//	                                                      Terraform's packed mirror layout
//
// The device plugin links go-nvml with cgo, so it needs a C compiler for
// each platform: gcc for the host's, a cross gcc for the others
// (Debian's gcc-aarch64-linux-gnu for linux/arm64). The quota service and
// the provider are built without cgo: static binaries, which is what
// Nomad's exec driver and any host want.
package dist

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"time"
)

// Module is the import path of this module.
const Module = "github.com/gpushare/nomad-gpushare"

// Component is one binary and the files that travel with it.
type Component struct {
	// Name is the binary's and the archive's name.
	Name string
	// Package is the main package, relative to the module root.
	Package string
	// Cgo: the package needs cgo (go-nvml).
	Cgo bool
	// Zip: a zip archive (Terraform's provider format) rather than tar.gz.
	Zip bool
	// Files are copied into the archive from the source tree: archive path
	// to source path, relative to the module root.
	Files map[string]string
}

// Components are what `make dist` ships.
var Components = []Component{
	{Name: "nomad-device-gpushare", Package: "device/cmd/nomad-device-gpushare", Cgo: true,
		Files: map[string]string{"plugin.hcl": "jobspecs/plugin.hcl", "CHANGELOG.md": "CHANGELOG.md"}},
	{Name: "gpushare-quota", Package: "quota-service/cmd/gpushare-quota",
		Files: map[string]string{
			"quota-service.nomad.hcl":                     "jobspecs/quota-service.nomad.hcl",
			"acl/nomad-gpushare-plugin.policy.hcl":        "jobspecs/acl/nomad-gpushare-plugin.policy.hcl",
			"acl/nomad-gpushare-quota.policy.hcl":         "jobspecs/acl/nomad-gpushare-quota.policy.hcl",
			"acl/nomad-gpushare-quota-project.policy.hcl": "jobspecs/acl/nomad-gpushare-quota-project.policy.hcl",
			"acl/consul-gpushare-quota.policy.hcl":        "jobspecs/acl/consul-gpushare-quota.policy.hcl",
			"acl/people-quota-admin.consul.policy.hcl":    "jobspecs/acl/people-quota-admin.consul.policy.hcl",
			"CHANGELOG.md": "CHANGELOG.md",
		}},
	{Name: "terraform-provider-gpushare", Package: "terraform/cmd/terraform-provider-gpushare", Zip: true,
		Files: map[string]string{"CHANGELOG.md": "CHANGELOG.md"}},
}

// Options say what to build.
type Options struct {
	// Root is the module's root directory.
	Root string
	// Out is the directory the archives and SHA256SUMS are written to.
	Out string
	// Version and Commit are set in package internal/version.
	Version, Commit string
	// Platforms are os/arch pairs, e.g. linux/amd64.
	Platforms []string
	// Components to build; nil: all of Components.
	Components []Component
	// CC gives the C compiler per platform for cgo packages (os/arch to
	// command); a platform not named uses CrossCC's, else gcc for the
	// host's own platform.
	CC map[string]string
	// Log receives one line per step; nil: discarded.
	Log io.Writer
}

// CrossCC are the usual cross compilers (Debian's names).
var CrossCC = map[string]string{
	"linux/arm64": "aarch64-linux-gnu-gcc",
	"linux/amd64": "x86_64-linux-gnu-gcc",
}

// crossPackage names the Debian package of each cross compiler, for the
// error that says what to install.
var crossPackage = map[string]string{
	"linux/arm64": "gcc-aarch64-linux-gnu",
	"linux/amd64": "gcc-x86-64-linux-gnu",
}

// Archive is one built archive.
type Archive struct {
	// Component and Platform it holds.
	Component, Platform string
	// Path of the archive; SHA256 its checksum, in hex.
	Path, SHA256 string
}

// Build builds every component for every platform into o.Out, writes
// SHA256SUMS there, and returns the archives.
func Build(o Options) ([]Archive, error) {
	if o.Version == "" {
		return nil, fmt.Errorf("no version: set VERSION")
	}
	comps := o.Components
	if comps == nil {
		comps = Components
	}
	logw := o.Log
	if logw == nil {
		logw = io.Discard
	}
	if err := os.MkdirAll(o.Out, 0o755); err != nil {
		return nil, fmt.Errorf("creating %s: %w", o.Out, err)
	}
	work, err := os.MkdirTemp("", "gpushare-dist-")
	if err != nil {
		return nil, fmt.Errorf("creating a build directory: %w", err)
	}
	defer os.RemoveAll(work)
	var out []Archive
	for _, platform := range o.Platforms {
		goos, goarch, ok := strings.Cut(platform, "/")
		if !ok {
			return nil, fmt.Errorf("platform %q: give os/arch, e.g. linux/amd64", platform)
		}
		for _, c := range comps {
			bin := filepath.Join(work, platform, c.Name)
			fmt.Fprintf(logw, "dist: building %s for %s\n", c.Name, platform)
			if err := o.build(c, goos, goarch, bin); err != nil {
				return nil, err
			}
			a, err := o.pack(c, platform, bin)
			if err != nil {
				return nil, err
			}
			fmt.Fprintf(logw, "dist: %s\n", a.Path)
			out = append(out, a)
		}
	}
	if err := writeSums(filepath.Join(o.Out, "SHA256SUMS"), out); err != nil {
		return nil, err
	}
	return out, nil
}

// build runs go build for one component and platform.
func (o Options) build(c Component, goos, goarch, bin string) error {
	platform := goos + "/" + goarch
	ldflags := fmt.Sprintf("-s -w -X %s/internal/version.Version=%s", Module, o.Version)
	if o.Commit != "" {
		ldflags += fmt.Sprintf(" -X %s/internal/version.Commit=%s", Module, o.Commit)
	}
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", ldflags, "-o", bin, "./"+c.Package)
	cmd.Dir = o.Root
	env := append(os.Environ(), "GOOS="+goos, "GOARCH="+goarch, "CGO_ENABLED=0")
	if c.Cgo {
		cc, err := o.compiler(platform)
		if err != nil {
			return fmt.Errorf("%s for %s: %w", c.Name, platform, err)
		}
		env = append(env, "CGO_ENABLED=1", "CC="+cc)
	}
	cmd.Env = env
	if output, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s for %s: %w\n%s", c.Package, platform, err, output)
	}
	return nil
}

// compiler is the C compiler for platform, checked to be installed.
func (o Options) compiler(platform string) (string, error) {
	cc := o.CC[platform]
	if cc == "" && platform == runtime.GOOS+"/"+runtime.GOARCH {
		cc = "gcc"
	}
	if cc == "" {
		cc = CrossCC[platform]
	}
	if cc == "" {
		return "", fmt.Errorf("cgo (go-nvml) needs a C compiler for %s: set CC_%s", platform, ccVar(platform))
	}
	if _, err := exec.LookPath(cc); err != nil {
		fix := "set CC_" + ccVar(platform) + " to a C compiler for " + platform
		if pkg := crossPackage[platform]; pkg != "" {
			fix = "install it (Debian: apt-get install " + pkg + ") or " + fix
		}
		return "", fmt.Errorf("cgo (go-nvml) needs the C compiler %s: %s: %w", cc, fix, err)
	}
	return cc, nil
}

// ccVar is the suffix of the environment variable naming platform's C
// compiler: linux/arm64 -> LINUX_ARM64.
func ccVar(platform string) string {
	return strings.ToUpper(strings.ReplaceAll(platform, "/", "_"))
}

// ArchiveName is the file name of component name's archive.
func ArchiveName(name, version, platform string, zipped bool) string {
	ext := ".tar.gz"
	if zipped {
		ext = ".zip"
	}
	return fmt.Sprintf("%s_%s_%s%s", name, version, strings.ReplaceAll(platform, "/", "_"), ext)
}

// pack writes the archive of one component: the binary, then its files,
// sorted, with fixed times so that the same inputs give the same bytes.
func (o Options) pack(c Component, platform, bin string) (Archive, error) {
	type entry struct {
		name string
		mode int64
		data []byte
	}
	data, err := os.ReadFile(bin)
	if err != nil {
		return Archive{}, fmt.Errorf("reading the built %s: %w", c.Name, err)
	}
	entries := []entry{{c.Name, 0o755, data}}
	if c.Zip {
		// Terraform runs the provider by the name
		// terraform-provider-<type>_v<version>.
		entries[0].name = fmt.Sprintf("%s_v%s", c.Name, o.Version)
	}
	names := make([]string, 0, len(c.Files))
	for name := range c.Files {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		data, err := os.ReadFile(filepath.Join(o.Root, c.Files[name]))
		if err != nil {
			return Archive{}, fmt.Errorf("%s's archive: %w", c.Name, err)
		}
		entries = append(entries, entry{path.Clean(name), 0o644, data})
	}
	var buf bytes.Buffer
	mtime := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	if c.Zip {
		zw := zip.NewWriter(&buf)
		for _, e := range entries {
			h := &zip.FileHeader{Name: e.name, Method: zip.Deflate, Modified: mtime}
			h.SetMode(os.FileMode(e.mode))
			w, err := zw.CreateHeader(h)
			if err != nil {
				return Archive{}, fmt.Errorf("zipping %s: %w", e.name, err)
			}
			if _, err := w.Write(e.data); err != nil {
				return Archive{}, fmt.Errorf("zipping %s: %w", e.name, err)
			}
		}
		if err := zw.Close(); err != nil {
			return Archive{}, fmt.Errorf("zipping %s: %w", c.Name, err)
		}
	} else {
		gz := gzip.NewWriter(&buf)
		tw := tar.NewWriter(gz)
		dirs := map[string]bool{}
		for _, e := range entries {
			if dir := path.Dir(e.name); dir != "." && !dirs[dir] {
				dirs[dir] = true
				if err := tw.WriteHeader(&tar.Header{Name: dir + "/", Mode: 0o755, Typeflag: tar.TypeDir, ModTime: mtime, Format: tar.FormatPAX}); err != nil {
					return Archive{}, fmt.Errorf("archiving %s: %w", dir, err)
				}
			}
			h := &tar.Header{Name: e.name, Mode: e.mode, Size: int64(len(e.data)), Typeflag: tar.TypeReg, ModTime: mtime, Format: tar.FormatPAX}
			if err := tw.WriteHeader(h); err != nil {
				return Archive{}, fmt.Errorf("archiving %s: %w", e.name, err)
			}
			if _, err := tw.Write(e.data); err != nil {
				return Archive{}, fmt.Errorf("archiving %s: %w", e.name, err)
			}
		}
		if err := tw.Close(); err != nil {
			return Archive{}, fmt.Errorf("archiving %s: %w", c.Name, err)
		}
		if err := gz.Close(); err != nil {
			return Archive{}, fmt.Errorf("compressing %s: %w", c.Name, err)
		}
	}
	p := filepath.Join(o.Out, ArchiveName(c.Name, o.Version, platform, c.Zip))
	if err := os.WriteFile(p, buf.Bytes(), 0o644); err != nil {
		return Archive{}, fmt.Errorf("writing %s: %w", p, err)
	}
	sum := sha256.Sum256(buf.Bytes())
	return Archive{Component: c.Name, Platform: platform, Path: p, SHA256: hex.EncodeToString(sum[:])}, nil
}

// writeSums writes the archives' checksums in sha256sum's format, so that
// `sha256sum -c SHA256SUMS` checks them.
func writeSums(p string, archives []Archive) error {
	lines := make([]string, 0, len(archives))
	for _, a := range archives {
		lines = append(lines, a.SHA256+"  "+filepath.Base(a.Path)+"\n")
	}
	sort.Slice(lines, func(i, j int) bool { return lines[i][66:] < lines[j][66:] })
	if err := os.WriteFile(p, []byte(strings.Join(lines, "")), 0o644); err != nil {
		return fmt.Errorf("writing %s: %w", p, err)
	}
	return nil
}
