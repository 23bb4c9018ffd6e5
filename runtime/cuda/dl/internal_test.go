package dl

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// Glob matches come highest version first, the numbers compared as
// numbers: libfoo.so.13 before libfoo.so.9, 12.10 before 12.4.
func TestExpandHighestVersionFirst(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"libfoo.so", "libfoo.so.9", "libfoo.so.13", "libfoo.so.12", "libfoo.so.12.4", "libfoo.so.12.10", "libfoo.so.1.2.3"} {
		if err := os.WriteFile(filepath.Join(dir, name), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got := expand([]string{"libbar.so.2", filepath.Join(dir, "libfoo.so*")})
	want := []string{"libbar.so.2"}
	for _, name := range []string{"libfoo.so.13", "libfoo.so.12.10", "libfoo.so.12.4", "libfoo.so.12", "libfoo.so.9", "libfoo.so.1.2.3", "libfoo.so"} {
		want = append(want, filepath.Join(dir, name))
	}
	if !slices.Equal(got, want) {
		t.Errorf("expand:\n got %q\nwant %q", got, want)
	}
}

func TestCompareVersions(t *testing.T) {
	cases := []struct {
		a, b string
		want int
	}{
		{"libfoo.so.9", "libfoo.so.13", -1},
		{"libfoo.so.13", "libfoo.so.9", 1},
		{"libfoo.so.12.4", "libfoo.so.12.10", -1},
		{"libfoo.so", "libfoo.so.1", -1},
		{"libfoo.so.12", "libfoo.so.12.0", -1},
		{"libfoo.so.12", "libfoo.so.12", 0},
		{"libfoo.so.012", "libfoo.so.12", 1}, // equal values: the longer text last
		{"libfoo.so.99999999999999999999999", "libfoo.so.100000000000000000000000", -1},
		{"liba.so.2", "libb.so.1", -1},
	}
	for _, c := range cases {
		if got := compareVersions(c.a, c.b); got != c.want {
			t.Errorf("compareVersions(%q, %q) = %d, want %d", c.a, c.b, got, c.want)
		}
	}
}
