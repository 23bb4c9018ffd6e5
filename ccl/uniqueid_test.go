package ccl

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestUniqueIDRoundTrip(t *testing.T) {
	dir := t.TempDir()
	want := newBytesID(128)
	for i := range want.b {
		want.b[i] = byte(i*7 + 3)
	}
	// The reader starts first and waits for the file.
	got := newBytesID(128)
	errc := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		errc <- ReadUniqueID(ctx, dir, "pg-id", got)
	}()
	time.Sleep(30 * time.Millisecond)
	if err := WriteUniqueID(dir, "pg-id", want); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if string(got.b) != string(want.b) {
		t.Fatalf("read %x, wrote %x", got.b, want.b)
	}
	// The write left no temporary file behind.
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Name() != "pg-id" {
		t.Errorf("directory holds %v, want only pg-id", entries)
	}
	// Overwriting replaces the id whole.
	want.b[0] ^= 0xff
	if err := WriteUniqueID(dir, "pg-id", want); err != nil {
		t.Fatal(err)
	}
	if err := ReadUniqueID(context.Background(), dir, "pg-id", got); err != nil || got.b[0] != want.b[0] {
		t.Fatalf("after overwrite: %v, byte 0 = %#x want %#x", err, got.b[0], want.b[0])
	}
	if err := CleanupUniqueID(dir, "pg-id"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "pg-id")); !os.IsNotExist(err) {
		t.Errorf("after cleanup: %v", err)
	}
	if err := CleanupUniqueID(dir, "pg-id"); err != nil {
		t.Errorf("cleanup of a missing file: %v", err)
	}
}

func TestUniqueIDNeverWritten(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := ReadUniqueID(ctx, dir, "missing", newBytesID(16))
	if d := time.Since(start); d < 40*time.Millisecond || d > 3*time.Second {
		t.Errorf("gave up after %v", d)
	}
	if !errors.Is(err, StatusTimeout) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("error %v, want a timeout", err)
	}
	for _, s := range []string{filepath.Join(dir, "missing"), "did not appear", "after waiting"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("%q does not say %q", err, s)
		}
	}
}

// TestUniqueIDDefaultDeadline: a context without a deadline still ends.
func TestUniqueIDDefaultDeadline(t *testing.T) {
	saved := uniqueIDWait
	uniqueIDWait = 40 * time.Millisecond
	defer func() { uniqueIDWait = saved }()
	err := ReadUniqueID(context.Background(), t.TempDir(), "missing", newBytesID(16))
	if !errors.Is(err, StatusTimeout) {
		t.Fatalf("error %v, want a timeout", err)
	}
	if DefaultUniqueIDWait != 5*time.Minute {
		t.Errorf("DefaultUniqueIDWait = %v", DefaultUniqueIDWait)
	}
}

func TestUniqueIDWrongSize(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "short"), []byte{1, 2, 3}, 0o600); err != nil {
		t.Fatal(err)
	}
	err := ReadUniqueID(context.Background(), dir, "short", newBytesID(16))
	if !errors.Is(err, StatusInvalidArgument) {
		t.Fatalf("error %v, want InvalidArgument", err)
	}
	for _, s := range []string{"has 3 bytes", "expected 16", "short"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("%q does not say %q", err, s)
		}
	}
	// An id whose Data disagrees with its Size is refused on write.
	if err := WriteUniqueID(dir, "bad", &liar{}); !errors.Is(err, StatusInvalidArgument) {
		t.Errorf("inconsistent id: %v", err)
	}
}

type liar struct{ bytesID }

func (*liar) Size() int { return 8 }

func TestUniqueIDBadNames(t *testing.T) {
	dir := t.TempDir()
	id := newBytesID(4)
	for _, name := range []string{"", ".", "..", "a/b", "../escape", `a\b`, "/abs", "nul\x00"} {
		if err := WriteUniqueID(dir, name, id); !errors.Is(err, StatusInvalidArgument) {
			t.Errorf("WriteUniqueID(%q): %v", name, err)
		}
		if err := ReadUniqueID(context.Background(), dir, name, id); !errors.Is(err, StatusInvalidArgument) {
			t.Errorf("ReadUniqueID(%q): %v", name, err)
		}
		if err := CleanupUniqueID(dir, name); !errors.Is(err, StatusInvalidArgument) {
			t.Errorf("CleanupUniqueID(%q): %v", name, err)
		}
	}
	if err := WriteUniqueID("", "x", id); !errors.Is(err, StatusInvalidArgument) {
		t.Errorf("empty dir: %v", err)
	}
	if err := WriteUniqueID(dir, "x", nil); !errors.Is(err, StatusInvalidArgument) {
		t.Errorf("nil id: %v", err)
	}
	if err := WriteUniqueID(filepath.Join(dir, "no-such-dir"), "x", id); !errors.Is(err, StatusError) {
		t.Errorf("missing dir: %v", err)
	}
	// Names with dots inside are fine.
	if err := WriteUniqueID(dir, "pg..1.id", id); err != nil {
		t.Errorf("pg..1.id: %v", err)
	}
}
