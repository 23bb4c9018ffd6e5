package cpu

import (
	"github.com/trainscope/trainscope/runtime"
)

// Stream priorities. Priority is accepted for API compatibility and
// recorded, but does not change scheduling on the host: every stream has
// its own goroutine and Go's scheduler treats them alike.
const (
	leastPriority    = 0
	greatestPriority = -1
)

// StreamCreate starts a stream on device: a goroutine that runs the
// stream's work in order.
func (m *Impl) StreamCreate(device, priority int) (any, error) {
	d, err := m.device("StreamCreate", device)
	if err != nil {
		return nil, err
	}
	if priority < greatestPriority || priority > leastPriority {
		return nil, runtime.Errorf("StreamCreate", runtime.StatusInvalidArgument, "priority %d outside [%d, %d]", priority, greatestPriority, leastPriority)
	}
	s := newStream(m, device, priority)
	d.mu.Lock()
	if d.streams == nil {
		d.streams = make(map[*stream]struct{})
	}
	d.streams[s] = struct{}{}
	d.mu.Unlock()
	go s.run()
	return s, nil
}

func (m *Impl) removeStream(s *stream) {
	d := &m.devices[s.dev]
	d.mu.Lock()
	delete(d.streams, s)
	d.mu.Unlock()
}

// StreamDestroy stops the stream from accepting work and returns at once;
// the stream's goroutine finishes the work already enqueued, then exits
// (DeviceSynchronize still waits for that work). Any later use of the
// handle is an error.
func (m *Impl) StreamDestroy(h any) error {
	s, err := m.stream("StreamDestroy", h)
	if err != nil {
		return err
	}
	if !s.close() {
		return errDestroyed("StreamDestroy")
	}
	return nil
}

// StreamPriorityRange returns least 0 and greatest −1, as CUDA reports
// them. Priority does not change scheduling on the host.
func (m *Impl) StreamPriorityRange(device int) (least, greatest int, err error) {
	if _, err := m.device("StreamPriorityRange", device); err != nil {
		return 0, 0, err
	}
	return leastPriority, greatestPriority, nil
}

// StreamSynchronize waits until the stream has finished everything
// enqueued before the call. Calling it from work running on the same
// stream deadlocks, as it would on a GPU.
func (m *Impl) StreamSynchronize(h any) error {
	s, err := m.liveStream("StreamSynchronize", h)
	if err != nil {
		return err
	}
	s.synchronize()
	return nil
}

// StreamQuery returns nil when the stream is idle and an error wrapping
// StatusNotReady while enqueued work has not finished.
func (m *Impl) StreamQuery(h any) error {
	s, err := m.liveStream("StreamQuery", h)
	if err != nil {
		return err
	}
	if s.busy() {
		return errStreamNotReady
	}
	return nil
}

// StreamWaitEvent makes work enqueued on the stream after this call wait
// until the event's most recent record has completed. The host does not
// wait. An event never recorded imposes no wait.
func (m *Impl) StreamWaitEvent(sh, eh any) error {
	s, err := m.stream("StreamWaitEvent", sh)
	if err != nil {
		return err
	}
	e, err := m.liveEvent("StreamWaitEvent", eh)
	if err != nil {
		return err
	}
	src, ticket := e.lastRecord()
	if src == nil {
		if s.isClosed() {
			return errDestroyed("StreamWaitEvent")
		}
		return nil
	}
	return s.push("StreamWaitEvent", &item{kind: opWait, src: src, gen: ticket})
}

// Enqueue runs fn on s's goroutine after the work already enqueued there,
// like cudaLaunchHostFunc. fn may block (a collective waiting for its
// peers, say); later work on s waits for it. fn must not synchronise s
// itself (that deadlocks, as on a GPU), and a panic in fn ends the program
// like a panic in any goroutine. s must be a cpu stream, of any Impl.
func Enqueue(s *runtime.Stream, fn func()) error {
	if s == nil {
		return runtime.Errorf("Enqueue", runtime.StatusInvalidArgument, "nil stream")
	}
	s.MarkEnqueued()
	return EnqueueHandle(s.Handle(), fn)
}

// EnqueueHandle is Enqueue for a backend stream handle (Stream.Handle), as
// a CCL backend sees it.
func EnqueueHandle(stream any, fn func()) error {
	s, err := anyStream("Enqueue", stream)
	if err != nil {
		return err
	}
	if fn == nil {
		return runtime.Errorf("Enqueue", runtime.StatusInvalidArgument, "nil function")
	}
	return s.push("Enqueue", &item{kind: opFunc, fn: fn})
}

// anyStream checks that h is a cpu stream handle of any Impl.
func anyStream(op string, h any) (*stream, error) {
	s, ok := h.(*stream)
	if !ok || s == nil {
		return nil, runtime.Errorf(op, runtime.StatusInvalidArgument, "%T is not a cpu stream handle", h)
	}
	return s, nil
}

// stream checks that h is a stream handle of m; it may be destroyed (push
// refuses work on a destroyed stream under its lock).
func (m *Impl) stream(op string, h any) (*stream, error) {
	s, err := anyStream(op, h)
	if err != nil {
		return nil, err
	}
	if s.owner != m {
		return nil, runtime.Errorf(op, runtime.StatusInvalidArgument, "stream handle belongs to another cpu backend instance")
	}
	return s, nil
}

// liveStream is stream for calls that do not enqueue: it also refuses a
// destroyed stream.
func (m *Impl) liveStream(op string, h any) (*stream, error) {
	s, err := m.stream(op, h)
	if err != nil {
		return nil, err
	}
	if s.isClosed() {
		return nil, errDestroyed(op)
	}
	return s, nil
}

// optionalStream resolves the stream argument of a memory operation: nil
// means "run synchronously on the calling goroutine".
func (m *Impl) optionalStream(op string, h any) (*stream, error) {
	if h == nil {
		return nil, nil
	}
	return m.stream(op, h)
}

// submit enqueues it on s, or runs it now when s is nil.
func submit(op string, s *stream, it *item) error {
	if s == nil {
		it.exec()
		return nil
	}
	return s.push(op, it)
}

// errStreamNotReady is shared so that polling a busy stream does not
// allocate.
var errStreamNotReady error = &runtime.Error{Op: "StreamQuery", Status: runtime.StatusNotReady, Detail: "work pending on the stream"}

func errDestroyed(op string) error {
	return runtime.Errorf(op, runtime.StatusInvalidArgument, "stream used after StreamDestroy")
}
