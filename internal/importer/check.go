package importer

import (
	"fmt"
	"slices"
	"time"

	"github.com/trainscope/trainscope/profiler"
)

// CheckTables compares a seed report's tables with the records imported
// from the same run's call log: for every table of a rank the records
// cover, each row's count and host and device totals (whole microseconds,
// as both files write them) must equal the sums over the records of that
// rank, tag and name, and no tag or name may be missing from the rank's
// tables. It
// returns one line per disagreement, and the tables of ranks no record
// covers (a report without its call log: totals with no calls to place on
// a timeline).
func CheckTables(tables []Table, recs []profiler.Record) (problems []string, uncovered []Table) {
	type key struct {
		rank      int
		tag, name string
	}
	type sums struct{ count, host, device int64 }
	got := map[key]*sums{}
	ranks := map[int]bool{}
	for i := range recs {
		r := &recs[i]
		ranks[r.Rank] = true
		k := key{r.Rank, r.Tag, r.Name}
		s := got[k]
		if s == nil {
			s = &sums{}
			got[k] = s
		}
		s.count++
		s.host += int64(r.HostDuration() / time.Microsecond)
		s.device += int64(r.DeviceDuration() / time.Microsecond)
	}
	seen := map[key]bool{}
	for _, t := range tables {
		if !ranks[t.Rank] {
			uncovered = append(uncovered, t)
			continue
		}
		for _, row := range t.Rows {
			k := key{t.Rank, t.Tag, row.Name}
			seen[k] = true
			s := got[k]
			if s == nil {
				problems = append(problems, fmt.Sprintf("rank %d, tag %q: %s: %s in the report, none in the call log", t.Rank, t.Tag, row.Name, plural(int(row.Count), "call")))
				continue
			}
			if s.count != row.Count || s.host != row.HostTotalUS || s.device != row.DeviceTotalUS {
				problems = append(problems, fmt.Sprintf("rank %d, tag %q: %s: the report says %s, %d µs host, %d µs device; the call log sums to %s, %d µs, %d µs",
					t.Rank, t.Tag, row.Name, plural(int(row.Count), "call"), row.HostTotalUS, row.DeviceTotalUS, plural(int(s.count), "call"), s.host, s.device))
			}
		}
	}
	// The framework writes a rank's report from the records its call log
	// holds, grouped alike: a tag with no table in a rank's report is as
	// missing from it as a name missing from a table.
	reported := map[int]bool{}
	for _, t := range tables {
		reported[t.Rank] = true
	}
	for k, s := range got {
		if reported[k.rank] && !seen[k] {
			problems = append(problems, fmt.Sprintf("rank %d, tag %q: %s: %s in the call log, none in the report", k.rank, k.tag, k.name, plural(int(s.count), "call")))
		}
	}
	slices.Sort(problems)
	return problems, uncovered
}
