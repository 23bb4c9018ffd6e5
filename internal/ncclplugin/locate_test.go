package ncclplugin

import (
	"context"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestLocateNamedByEnvironment(t *testing.T) {
	p := filepath.Join(t.TempDir(), "lib.so")
	if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv(EnvPluginPath, p)
	got, err := Locate(context.Background(), t.TempDir())
	if err != nil || got.Path != p || got.How != EnvPluginPath {
		t.Fatalf("Locate = %+v, %v; want %s from the environment", got, err, p)
	}
	t.Setenv(EnvPluginPath, p+".missing")
	if _, err := Locate(context.Background(), t.TempDir()); err == nil || !strings.Contains(err.Error(), EnvPluginPath) {
		t.Fatalf("a missing named plugin: %v", err)
	}
}

// Without a plugin beside the test binary, Locate builds one from the
// embedded sources into the cache, then finds it there; the library
// exports the data symbols NCCL looks for.
func TestLocateBuildsIntoTheCache(t *testing.T) {
	needCompiler(t)
	t.Setenv(EnvPluginPath, "")
	cache := t.TempDir()
	got, err := Locate(context.Background(), cache)
	if err != nil {
		t.Fatal(err)
	}
	if got.How != "built" || !strings.HasPrefix(got.Path, cache) {
		t.Fatalf("Locate = %+v, want a build under %s", got, cache)
	}
	f, err := elf.Open(got.Path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, err := f.DynamicSymbols()
	if err != nil {
		t.Fatal(err)
	}
	exported := map[string]bool{}
	for _, s := range syms {
		if s.Section != elf.SHN_UNDEF {
			exported[s.Name] = true
		}
	}
	for _, want := range []string{"ncclProfiler_v5", "ncclProfiler_v4"} {
		if !exported[want] {
			t.Errorf("%s does not export %s", got.Path, want)
		}
	}
	again, err := Locate(context.Background(), cache)
	if err != nil || again.Path != got.Path || again.How != "cached" {
		t.Fatalf("second Locate = %+v, %v; want the cached %s", again, err, got.Path)
	}
}

func TestLocateWithoutCompilerSaysWhatToDo(t *testing.T) {
	t.Setenv(EnvPluginPath, "")
	t.Setenv("CC", "no-such-compiler-here")
	_, err := Locate(context.Background(), t.TempDir())
	if err == nil {
		t.Fatal("no error without a compiler")
	}
	for _, w := range []string{"no NCCL profiler plugin", "beside profile-run", "no-such-compiler-here", "make -C plugins/nccl"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("%q does not say %q", err, w)
		}
	}
}

// A cached library that is no shared library (an empty file: a copy cut
// short) is not taken: Locate builds the plugin again in its place.
func TestLocateRebuildsADamagedCache(t *testing.T) {
	needCompiler(t)
	t.Setenv(EnvPluginPath, "")
	cache := t.TempDir()
	sum, err := sourcesHash()
	if err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(cache, "nccl-plugin-"+sum, "libtrainscope-nccl.so")
	if err := os.MkdirAll(filepath.Dir(bad), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bad, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := Locate(context.Background(), cache)
	if err != nil {
		t.Fatal(err)
	}
	if got.How == "beside profile-run" {
		t.Skipf("skipped: a plugin lies beside the test binary (%s)", got.Path)
	}
	if got.How != "built" || got.Path != bad {
		t.Fatalf("Locate = %+v, want %s built again", got, bad)
	}
	f, err := elf.Open(got.Path)
	if err != nil {
		t.Fatalf("%s: %v", got.Path, err)
	}
	f.Close()
}

// needCompiler skips t where no C compiler ($CC, else cc) can build the
// plugin.
func needCompiler(t *testing.T) {
	t.Helper()
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "cc"
	}
	if _, err := exec.LookPath(cc); err != nil {
		t.Skipf("skipped: no C compiler (%s) to build the plugin with", cc)
	}
}

// Find looks where Locate does and builds nothing: before a build it says
// where one would go and with what; after Locate's build it finds it. A
// damaged cached library is left in place, and reported.
func TestFindBuildsNothing(t *testing.T) {
	needCompiler(t)
	t.Setenv(EnvPluginPath, "")
	cache := t.TempDir()
	got, err := Find(cache)
	if got.How == "beside profile-run" {
		t.Skipf("skipped: a plugin lies beside the test binary (%s)", got.Path)
	}
	if err == nil || got.How != "to be built" || !strings.HasPrefix(got.Path, cache) {
		t.Fatalf("Find before a build = %+v, %v; want where it would be built, and an error", got, err)
	}
	for _, w := range []string{"no NCCL profiler plugin yet", "none cached", "builds one there"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("%q does not say %q", err, w)
		}
	}
	if _, err := os.Stat(got.Path); !os.IsNotExist(err) {
		t.Fatalf("Find made %s (%v)", got.Path, err)
	}
	if err := os.MkdirAll(filepath.Dir(got.Path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(got.Path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Find(cache); err == nil || !strings.Contains(err.Error(), "no ELF header") {
		t.Errorf("Find with a damaged library: %v, want it named as no shared library", err)
	}
	if fi, err := os.Stat(got.Path); err != nil || fi.Size() != 0 {
		t.Fatalf("Find touched the damaged library: %v", err)
	}
	built, err := Locate(context.Background(), cache)
	if err != nil || built.Path != got.Path {
		t.Fatalf("Locate = %+v, %v", built, err)
	}
	found, err := Find(cache)
	if err != nil || found.Path != got.Path || found.How != "cached" {
		t.Fatalf("Find after the build = %+v, %v; want the cached %s", found, err, got.Path)
	}
}
