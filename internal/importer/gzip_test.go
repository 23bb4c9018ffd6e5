package importer

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
)

// A gzipped profile read whole loads as the plain file does; one whose
// compressed body is cut short, or corrupt, is an error naming the file
// and saying it is the compression's, not a parse error at byte 0.
func TestLoadGzipBodyCutShort(t *testing.T) {
	plain, err := os.ReadFile("testdata/kineto/rank0.json")
	if err != nil {
		t.Fatal(err)
	}
	z := gzipped(t, plain)
	whole, err := Load("rank0.json.gz", bytes.NewReader(z))
	if err != nil {
		t.Fatalf("the whole file: %v", err)
	}
	if want := loadFile(t, "testdata/kineto/rank0.json"); len(whole.Records) != len(want.Records) {
		t.Fatalf("gzipped: %d records, plain: %d", len(whole.Records), len(want.Records))
	}
	corrupt := bytes.Clone(z)
	corrupt[len(corrupt)-6] ^= 0xff // the checksum
	for name, b := range map[string][]byte{
		"cut short":    z[:len(z)/2],
		"header only":  z[:12],
		"bad checksum": corrupt,
	} {
		_, err := Load("rank0.json.gz", bytes.NewReader(b))
		var pe *ParseError
		if !errors.As(err, &pe) || pe.Path != "rank0.json.gz" {
			t.Errorf("%s: %v (%T), want a ParseError naming the file", name, err, err)
			continue
		}
		if !strings.Contains(err.Error(), "gzip: ") {
			t.Errorf("%s: %q does not say the compression is at fault", name, err)
		}
	}
}

// gzipped compresses b.
func gzipped(t *testing.T, b []byte) []byte {
	t.Helper()
	var z bytes.Buffer
	zw := gzip.NewWriter(&z)
	if _, err := zw.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return z.Bytes()
}

// decompressedLen is how many bytes gzip gets out of z before it fails:
// where the content of a gzip stream cut short stops.
func decompressedLen(t *testing.T, z []byte) int64 {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(z))
	if err != nil {
		t.Fatal(err)
	}
	n, err := io.Copy(io.Discard, zr)
	if !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, gzip.ErrChecksum) {
		t.Fatalf("decompressing %d bytes: %d bytes, then %v; want the stream to fail", len(z), n, err)
	}
	return n
}

// A gzipped file's byte offsets count its decompressed content, and the
// message says so: a 600-byte file can fail at byte 2000. A gzip stream
// cut short is said to be the compressed file truncated, where its
// content stops, whatever the parser made of the content's last event
// or line; a bad checksum, the compressed file corrupt.
func TestLoadGzipSaysWhichBytes(t *testing.T) {
	kineto, err := os.ReadFile("testdata/kineto/rank0.json")
	if err != nil {
		t.Fatal(err)
	}
	calls, err := os.ReadFile("testdata/seed/calls.rank0")
	if err != nil {
		t.Fatal(err)
	}
	// The JSON cut at byte 2000, then compressed whole: the JSON is at
	// fault, at byte 2000, as in the plain file (TestImportErrors).
	jsonCut := gzipped(t, kineto[:2000])
	// The compressed stream cut in half: gzip's unexpected EOF.
	kinetoZ, callsZ := gzipped(t, kineto), gzipped(t, calls)
	streamCut, callsCut := kinetoZ[:len(kinetoZ)/2], callsZ[:len(callsZ)/2]
	corrupt := bytes.Clone(kinetoZ)
	corrupt[len(corrupt)-6] ^= 0xff // the checksum
	for _, tc := range []struct {
		name   string
		file   []byte
		offset int64
		err    string
	}{
		{"JSON cut short", jsonCut, 2000, "unexpected end of input (truncated?)"},
		{"gzip stream cut short", streamCut, decompressedLen(t, streamCut), "the compressed file is truncated (gzip: unexpected EOF)"},
		{"call log's gzip stream cut short", callsCut, decompressedLen(t, callsCut), "the compressed file is truncated (gzip: unexpected EOF)"},
		{"bad checksum", corrupt, int64(len(kineto)), "the compressed file is corrupt (gzip: invalid checksum)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.offset <= int64(len(tc.file)) {
				t.Fatalf("the case fails at byte %d of a %d-byte file: it shows nothing", tc.offset, len(tc.file))
			}
			_, err := Load("x.gz", bytes.NewReader(tc.file))
			want := fmt.Sprintf("x.gz: byte %d of its decompressed content: %s", tc.offset, tc.err)
			var pe *ParseError
			if !errors.As(err, &pe) || err.Error() != want || pe.Offset != tc.offset || !pe.Decompressed {
				t.Errorf("%v (%T)\nwant %s", err, err, want)
			}
		})
	}
}
