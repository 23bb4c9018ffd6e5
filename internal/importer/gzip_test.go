package importer

import (
	"bytes"
	"compress/gzip"
	"errors"
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
	var z bytes.Buffer
	zw := gzip.NewWriter(&z)
	if _, err := zw.Write(plain); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	whole, err := Load("rank0.json.gz", bytes.NewReader(z.Bytes()))
	if err != nil {
		t.Fatalf("the whole file: %v", err)
	}
	if want := loadFile(t, "testdata/kineto/rank0.json"); len(whole.Records) != len(want.Records) {
		t.Fatalf("gzipped: %d records, plain: %d", len(whole.Records), len(want.Records))
	}
	corrupt := bytes.Clone(z.Bytes())
	corrupt[len(corrupt)-6] ^= 0xff // the checksum
	for name, b := range map[string][]byte{
		"cut short":    z.Bytes()[:len(z.Bytes())/2],
		"header only":  z.Bytes()[:12],
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
