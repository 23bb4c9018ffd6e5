package profiler

// storeChunk is how many records one chunk of the store holds: large
// enough to amortise allocation, small enough that growing never copies
// what is already kept.
const storeChunk = 4096

// store keeps records in fixed-size chunks, so appending never copies the
// records already kept (a growing slice of large records would, and the
// collector must keep up with every rank).
type store struct {
	chunks [][]Record
	n      int
}

// add returns a zeroed slot for the next record.
func (s *store) add() *Record {
	last := len(s.chunks) - 1
	if last < 0 || len(s.chunks[last]) == storeChunk {
		s.chunks = append(s.chunks, make([]Record, 0, storeChunk))
		last++
	}
	c := s.chunks[last]
	c = append(c, Record{})
	s.chunks[last] = c
	s.n++
	return &c[len(c)-1]
}

func (s *store) len() int { return s.n }

// all copies the records out, in the order they were added.
func (s *store) all() []Record {
	out := make([]Record, 0, s.n)
	for _, c := range s.chunks {
		out = append(out, c...)
	}
	return out
}

// reset forgets every record; the first chunk is kept for reuse.
func (s *store) reset() {
	if len(s.chunks) > 0 {
		first := s.chunks[0]
		clear(first)
		s.chunks = [][]Record{first[:0]}
	}
	s.n = 0
}
