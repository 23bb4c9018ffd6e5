package cpu_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/trainscope/trainscope/runtime"
	"github.com/trainscope/trainscope/runtime/cpu"
)

// A stream waits for the record that was the event's most recent when
// StreamWaitEvent was called, even when the event is recorded again on
// another stream that gets there first.
func TestStreamWaitEventKeepsItsRecord(t *testing.T) {
	a, b, c := newStream(t, dev0), newStream(t, dev0), newStream(t, dev0)
	ev := newEvent(t, dev0, runtime.EventDisableTiming)
	release := block(t, a)
	var released atomic.Bool
	if err := ev.Record(a); err != nil { // behind A's blocked work
		t.Fatal(err)
	}
	if err := c.WaitEvent(ev); err != nil { // C waits for the record on A
		t.Fatal(err)
	}
	passed := make(chan bool, 1)
	if err := cpu.Enqueue(c, func() { passed <- released.Load() }); err != nil {
		t.Fatal(err)
	}
	if err := ev.Record(b); err != nil { // B is idle: this record completes at once
		t.Fatal(err)
	}
	if err := ev.Synchronize(context.Background()); err != nil {
		t.Fatal(err)
	}
	// C must still be held by A; give it every chance to pass.
	select {
	case <-passed:
		t.Fatal("C passed its wait while the record on A had not completed")
	case <-time.After(100 * time.Millisecond):
	}
	released.Store(true)
	release()
	if ok := <-passed; !ok {
		t.Fatal("C passed its wait before A was released")
	}
}
