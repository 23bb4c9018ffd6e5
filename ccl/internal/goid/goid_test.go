package goid

import (
	"bytes"
	"runtime"
	"strconv"
	"sync"
	"testing"
)

func TestGet(t *testing.T) {
	me := Get()
	if me == 0 {
		t.Fatal("Get returned 0")
	}
	if again := Get(); again != me {
		t.Fatalf("Get changed on one goroutine: %d then %d", me, again)
	}
	const n = 16
	ids := make([]uint64, n)
	var wg, alive sync.WaitGroup
	release := make(chan struct{})
	alive.Add(n)
	for i := range n {
		// Identifiers are unique among live goroutines: keep every one
		// alive until all have read theirs.
		wg.Go(func() {
			ids[i] = Get()
			alive.Done()
			<-release
			if again := Get(); again != ids[i] {
				t.Errorf("Get changed on one goroutine: %d then %d", ids[i], again)
			}
		})
	}
	alive.Wait()
	close(release)
	wg.Wait()
	seen := map[uint64]bool{me: true}
	for _, id := range ids {
		if id == 0 || seen[id] {
			t.Fatalf("ids %v (test goroutine %d) are not distinct and non-zero", ids, me)
		}
		seen[id] = true
	}
}

// TestNotReused: an exited goroutine's identifier is never handed to a
// later goroutine. ccl keys open groups by it, so a reused identifier
// would put a new goroutine's operations into a group some goroutine
// left open when it exited.
func TestNotReused(t *testing.T) {
	seen := map[uint64]bool{Get(): true}
	for range 2000 {
		ch := make(chan uint64)
		go func() { ch <- Get() }()
		id := <-ch
		if seen[id] {
			t.Fatalf("identifier %d handed to two goroutines", id)
		}
		seen[id] = true
	}
}

// TestMatchesStackHeader checks the fast path against the number the
// runtime prints in a stack trace's header: a Go release that moves the
// field the fast path reads fails here, not in a group's bookkeeping.
func TestMatchesStackHeader(t *testing.T) {
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			var buf [64]byte
			b := buf[:runtime.Stack(buf[:], false)]
			b = bytes.TrimPrefix(b, []byte("goroutine "))
			if i := bytes.IndexByte(b, ' '); i > 0 {
				b = b[:i]
			}
			want, err := strconv.ParseUint(string(b), 10, 64)
			if err != nil {
				t.Errorf("stack header %q: %v", buf[:], err)
				return
			}
			if got := Get(); got != want {
				t.Errorf("Get() = %d, stack header says goroutine %d", got, want)
			}
		})
	}
	wg.Wait()
}

func BenchmarkGet(b *testing.B) {
	b.ReportAllocs()
	var sum uint64
	for b.Loop() {
		sum += Get()
	}
	_ = sum
}
