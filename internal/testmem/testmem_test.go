package testmem

import "testing"

var keep [][]byte

// A buffer held is in the live heap; let go, it is not.
func TestLiveHeapFollowsWhatIsHeld(t *testing.T) {
	const size = 64 << 20
	before := LiveHeap()
	keep = append(keep, make([]byte, size))
	held := LiveHeap()
	keep = nil
	after := LiveHeap()
	if held < before+size*9/10 {
		t.Errorf("holding %d bytes: live heap %d, from %d", size, held, before)
	}
	if after > held-size*9/10 {
		t.Errorf("after letting %d bytes go: live heap %d, from %d", size, after, held)
	}
}
