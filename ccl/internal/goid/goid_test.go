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
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { ids[i] = Get() })
	}
	wg.Wait()
	seen := map[uint64]bool{me: true}
	for _, id := range ids {
		if id == 0 || seen[id] {
			t.Fatalf("ids %v (test goroutine %d) are not distinct and non-zero", ids, me)
		}
		seen[id] = true
	}
}
