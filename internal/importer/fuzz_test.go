package importer

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"
)

func jsonNumber(s string) json.Number { return json.Number(s) }

// checkParse is what every fuzz target asserts: a parse either fails with
// a *ParseError naming the file, or returns records Ingest would accept.
func checkParse(t *testing.T, p *Profile, err error) {
	t.Helper()
	if err != nil {
		var pe *ParseError
		if !errors.As(err, &pe) || pe.Path != "fuzz" || !strings.HasPrefix(err.Error(), "fuzz") {
			t.Fatalf("error %v (%T) does not name the file", err, err)
		}
		return
	}
	for i := range p.Records {
		r := &p.Records[i]
		if r.Name == "" || r.ID == 0 || r.HostEnd < r.HostStart || r.HasDevice && r.DeviceEnd < r.DeviceStart || r.Rank < 0 {
			t.Fatalf("record %d would not be ingested: %+v", i, *r)
		}
	}
}

func addSeeds(f *testing.F, paths ...string) {
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
		f.Add(b[:len(b)/2])
	}
}

func FuzzSeedLog(f *testing.F) {
	addSeeds(f, "testdata/seed/calls.rank0", "testdata/seed/calls.rank1")
	// Times that each fit but add up past 2^63 ns.
	f.Add([]byte("=== Kernel Call Log for Rank 0 ===\nTag: A\nIdx Timestamp Name Device Host(us) Device(us) Peak Mem(MB)\n" +
		"0 2262-04-11 23:47:16 a Device(CUDA, 0)0 4611686018427387 0\n1 2262-04-11 23:47:16 b cpu 4611686018427387 0 0\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := ParseSeed("fuzz", bytes.NewReader(b))
		checkParse(t, p, err)
	})
}

func FuzzSeedReport(f *testing.F) {
	addSeeds(f, "testdata/seed/report.rank0", "testdata/seed/report.rank1")
	f.Add([]byte("=== Profiler Report for Rank 0 ===\nTag: a\nPeak Device Memory Usage: -5 MB\nName Count Host Total(us) Host % Device Total(us) Device % Avg Host(us) Avg Device(us)\na 1 2 100.00 1 100.00 2 1\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := ParseSeed("fuzz", bytes.NewReader(b))
		checkParse(t, p, err)
		if err == nil {
			CheckTables(p.Tables, p.Records)
		}
	})
}

func FuzzKineto(f *testing.F) {
	addSeeds(f, "testdata/kineto/rank0.json", "testdata/kineto/rank1.json")
	f.Add([]byte(`[{"ph":"X","cat":"kernel","name":"ncclKernel_SendRecv","args":{"correlation":"3","Collective name":"send","Dst Rank":1}}]`))
	f.Add([]byte(interleavedTrace))
	f.Add([]byte(memoryTrace))
	f.Add([]byte(`[{"ph":"B","cat":"cpu_op","name":"a","pid":1,"tid":1,"ts":1.00049999},{"ph":"B","cat":"cuda_runtime","name":"l","pid":1,"tid":1,"ts":2},` +
		`{"ph":"E","pid":1,"tid":1,"ts":3,"args":{"correlation":4}},{"ph":"X","cat":"kernel","name":"k","pid":0,"tid":7,"ts":4,"dur":1e0,"args":{"correlation":4}},{"ph":"E","pid":1,"tid":1,"ts":"9.5e0"},{"ph":"E","pid":1,"tid":2,"ts":1}]`))
	f.Add([]byte(strings.Replace(interleavedTrace, `{"rank": 5}`, `{"rank": 5, "pg_config": [{"pg_name":"pp","ranks":[5,6]}]}`, 1)))
	f.Add([]byte(strings.Replace(interleavedTrace, `{"rank": 5}`, `{"rank": 5, "pg_config": [{"pg_name":"pp","pg_size":"16","ranks":"[0, 1, ..., 5]"}]}`, 1)))
	f.Add([]byte(strings.Replace(strings.Replace(interleavedTrace, `"distributedInfo": {"rank": 5}, `, ``, 1), `"Process Group Name":"7",`, `"Process Group Name":"7","Rank":1,`, 1)))
	// trainscope's own trace (ParseTrainscope, told by its producer).
	addSeeds(f, "../../exporters/chrometrace/testdata/fixture.golden.json")
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := Load("fuzz", bytes.NewReader(b))
		if err != nil && errors.Is(err, ErrUnknownFormat) {
			return
		}
		checkParse(t, p, err)
		if err == nil {
			Combine([]*Profile{p})
		}
	})
}
