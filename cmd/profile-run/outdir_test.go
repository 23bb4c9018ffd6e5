package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A run refused before it starts (its -report beside a file it would
// write over) leaves nothing behind: not its run directory, nor the -out
// directories made for it. A directory that was there before stays.
func TestRefusedRunLeavesNoOutDir(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "a.rank0"), []byte("someone else's"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "new", "nested", "out")
	args := append([]string{"-metrics-addr", "off", "-out", out, "-report", filepath.Join(dir, "a.txt")}, small...)
	code, _, stderr := runCmd(t, args...)
	if code != exitUsage || !strings.Contains(stderr, "a.rank0 exists") {
		t.Fatalf("exit %d, stderr %q; want a usage error naming a.rank0", code, stderr)
	}
	if _, err := os.Stat(filepath.Join(dir, "new")); !os.IsNotExist(err) {
		t.Errorf("-out's directories were left behind for a run that never started (%v)", err)
	}
	// A -out that existed stays, whatever the run.
	kept := filepath.Join(dir, "kept")
	if err := os.Mkdir(kept, 0o755); err != nil {
		t.Fatal(err)
	}
	args = append([]string{"-metrics-addr", "off", "-out", kept, "-report", filepath.Join(dir, "a.txt")}, small...)
	if code, _, _ := runCmd(t, args...); code != exitUsage {
		t.Fatalf("exit %d, want %d", code, exitUsage)
	}
	if fi, err := os.Stat(kept); err != nil || !fi.IsDir() {
		t.Errorf("an -out directory that was there before the run was removed (%v)", err)
	}
}
