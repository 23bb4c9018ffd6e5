package ncclplugin

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/trainscope/trainscope/plugins"
)

// EnvPluginPath names a plugin library to use instead of looking for one.
const EnvPluginPath = "TRAINSCOPE_NCCL_PLUGIN_PATH"

// Located is where the plugin library was found, and how.
type Located struct {
	Path string
	How  string // "TRAINSCOPE_NCCL_PLUGIN_PATH", "beside profile-run", "cached", "built"
}

// Locate finds the NCCL profiler plugin library: the file named by
// EnvPluginPath; else libtrainscope-nccl.so beside the running executable;
// else one built before into cacheDir (a directory per version of the
// sources, so a changed plugin is rebuilt); else it builds one there with
// the C compiler ($CC, else cc), bounded by ctx. When none of these works
// the error says what was tried and what to do. cacheDir "" means
// os.UserCacheDir()/trainscope.
func Locate(ctx context.Context, cacheDir string) (Located, error) {
	s, err := search(cacheDir)
	if err != nil || s.found.Path != "" {
		return s.found, err
	}
	if s.damaged {
		_ = os.RemoveAll(s.dir)
	}
	cc, err := s.compiler()
	if err != nil {
		return Located{}, err
	}
	if err := build(ctx, cc, s.dir); err != nil {
		return Located{}, fmt.Errorf("no NCCL profiler plugin: %s, and building one failed: %w", strings.Join(s.tried, ", "), err)
	}
	return Located{Path: s.path, How: "built"}, nil
}

// Find is Locate without building: the plugin library where one is;
// where none is, an error saying where profile-run -- CMD would build one
// (How "to be built", with the compiler in the error's text), or what to
// install.
func Find(cacheDir string) (Located, error) {
	s, err := search(cacheDir)
	if err != nil || s.found.Path != "" {
		return s.found, err
	}
	cc, err := s.compiler()
	if err != nil {
		return Located{}, err
	}
	return Located{Path: s.path, How: "to be built"}, fmt.Errorf("no NCCL profiler plugin yet: %s; profile-run -- CMD builds one there with %s on first use", strings.Join(s.tried, ", "), cc)
}

// searched is what search found: a plugin, or the places it looked and
// where one would be built.
type searched struct {
	found     Located
	tried     []string
	dir, path string // the cache directory of this version, and its library
	damaged   bool   // a library is there, not usable: to be built again in its place
}

// search looks for the plugin where Locate does, building nothing.
func search(cacheDir string) (searched, error) {
	if p := os.Getenv(EnvPluginPath); p != "" {
		if _, err := os.Stat(p); err != nil {
			return searched{}, fmt.Errorf("%s=%s: %w", EnvPluginPath, p, err)
		}
		return searched{found: Located{Path: p, How: EnvPluginPath}}, nil
	}
	var s searched
	if exe, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(exe), plugins.NCCLLibrary)
		switch err := sharedLibrary(p); {
		case err == nil:
			return searched{found: Located{Path: p, How: "beside profile-run"}}, nil
		case os.IsNotExist(err):
			s.tried = append(s.tried, "none beside profile-run ("+p+")")
		default:
			s.tried = append(s.tried, "none usable beside profile-run ("+err.Error()+")")
		}
	}
	if cacheDir == "" {
		d, err := os.UserCacheDir()
		if err != nil {
			d = os.TempDir()
		}
		cacheDir = filepath.Join(d, "trainscope")
	}
	sum, err := sourcesHash()
	if err != nil {
		return searched{}, err
	}
	s.dir = filepath.Join(cacheDir, "nccl-plugin-"+sum)
	s.path = filepath.Join(s.dir, plugins.NCCLLibrary)
	switch err := sharedLibrary(s.path); {
	case err == nil:
		return searched{found: Located{Path: s.path, How: "cached"}}, nil
	case os.IsNotExist(err):
		s.tried = append(s.tried, "none cached ("+s.path+")")
	default: // damaged (a disk that filled, say): built again in its place
		s.tried = append(s.tried, "none usable cached ("+err.Error()+")")
		s.damaged = true
	}
	return s, nil
}

// compiler is the C compiler that would build the plugin, or the error
// saying there is none and what to do.
func (s searched) compiler() (string, error) {
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "cc"
	}
	if _, err := exec.LookPath(cc); err != nil {
		return "", fmt.Errorf("no NCCL profiler plugin: %s, and no C compiler (%s) to build one: install one (gcc), or build it with `make -C plugins/nccl` and put %s beside profile-run, or name it in %s",
			strings.Join(s.tried, ", "), cc, plugins.NCCLLibrary, EnvPluginPath)
	}
	return cc, nil
}

// sharedLibrary checks that p is an ELF file, as a library the dynamic
// loader can open must be: an empty or truncated file found by name (a
// copy cut short) would leave every process of the job without the
// plugin, and the run saying only that none loaded it. A library named
// by EnvPluginPath is taken as it is.
func sharedLibrary(p string) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	var magic [4]byte
	if _, err := io.ReadFull(f, magic[:]); err != nil || string(magic[:]) != "\x7fELF" {
		return fmt.Errorf("%s is not a shared library (no ELF header)", p)
	}
	return nil
}

// sourcesHash names a version of the embedded sources.
func sourcesHash() (string, error) {
	h := sha256.New()
	err := fs.WalkDir(plugins.NCCLSources, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := plugins.NCCLSources.ReadFile(path)
		if err != nil {
			return err
		}
		fmt.Fprintf(h, "%s\x00%d\x00", path, len(b))
		h.Write(b)
		return nil
	})
	h.Write([]byte(strings.Join(plugins.NCCLBuildArgs, "\x00")))
	return hex.EncodeToString(h.Sum(nil))[:16], err
}

// build compiles the embedded sources into dir, through a scratch
// directory renamed into place, so a concurrent or interrupted build never
// leaves a half-written library where Locate looks.
func build(ctx context.Context, cc, dir string) error {
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dir), ".build-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	err = fs.WalkDir(plugins.NCCLSources, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := plugins.NCCLSources.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(tmp, filepath.Base(path)), b, 0o644)
	})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, cc, plugins.NCCLBuildArgs...)
	cmd.Dir = tmp
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s %s: %w\n%s", cc, strings.Join(plugins.NCCLBuildArgs, " "), err, out)
	}
	if err := os.Rename(tmp, dir); err != nil {
		if sharedLibrary(filepath.Join(dir, plugins.NCCLLibrary)) == nil {
			return nil // another build got there first
		}
		return err
	}
	return nil
}
