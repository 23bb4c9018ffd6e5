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

// A maps file's lines, as proc(5) writes them: the mapping that holds the
// address names the file; anonymous mappings and addresses outside every
// mapping name none.
func TestMappedFile(t *testing.T) {
	maps := `55d0c6a00000-55d0c6a28000 r--p 00000000 08:01 1837 /usr/bin/profile run
7f1a2c000000-7f1a2c021000 rw-p 00000000 00:00 0
7f1a2d400000-7f1a2d5b8000 r-xp 00028000 08:01 2214 /usr/lib/x86_64-linux-gnu/libc.so.6
7ffd4b9e6000-7ffd4ba07000 rw-p 00000000 00:00 0                          [stack]
`
	p := filepath.Join(t.TempDir(), "maps")
	if err := os.WriteFile(p, []byte(maps), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		addr uintptr
		want string
	}{
		{0x7f1a2d400000, "/usr/lib/x86_64-linux-gnu/libc.so.6"},
		{0x7f1a2d5b7fff, "/usr/lib/x86_64-linux-gnu/libc.so.6"},
		{0x7f1a2d5b8000, ""},
		{0x55d0c6a00010, "/usr/bin/profile run"},
		{0x7f1a2c000100, ""},
		{0x7ffd4b9e6010, ""},
		{0x1000, ""},
	} {
		if got := mappedFile(p, tc.addr); got != tc.want {
			t.Errorf("%#x: %q, want %q", tc.addr, got, tc.want)
		}
	}
	if got := mappedFile(filepath.Join(t.TempDir(), "absent"), 0x1000); got != "" {
		t.Errorf("no maps file: %q", got)
	}
}
