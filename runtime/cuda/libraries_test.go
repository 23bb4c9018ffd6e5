package cuda

import (
	"os"
	"path/filepath"
	"testing"
)

// The NVIDIA kernel module's version line, as the proprietary and the open
// modules write it.
func TestNvidiaDriverVersion(t *testing.T) {
	for _, tc := range []struct{ text, want string }{
		{"NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 01:15:15 UTC 2023\nGCC version:  gcc version 11.4.0\n", "535.104.05"},
		{"NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.95.05  Release Build  (dvs-builder@U22-I3-AF03-09-1)  Tue Sep 23 09:21:35 UTC 2025\nGCC version:  gcc version 12.3.0\n", "580.95.05"},
		{"GCC version:  gcc version 12.3.0\n", ""},
		{"NVRM version: something else\n", ""},
		{"", ""},
	} {
		p := filepath.Join(t.TempDir(), "version")
		if err := os.WriteFile(p, []byte(tc.text), 0o644); err != nil {
			t.Fatal(err)
		}
		if got := nvidiaDriverVersion(p); got != tc.want {
			t.Errorf("%q: %q, want %q", tc.text, got, tc.want)
		}
	}
	if got := nvidiaDriverVersion(filepath.Join(t.TempDir(), "absent")); got != "" {
		t.Errorf("no file: %q", got)
	}
}

// Before Init the backend names no library, and loads none to do so.
func TestLibrariesBeforeInit(t *testing.T) {
	if libs := New().Libraries(); libs != nil {
		t.Errorf("Libraries before Init = %+v", libs)
	}
}
