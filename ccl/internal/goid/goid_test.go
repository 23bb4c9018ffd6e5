package goid

import (
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
