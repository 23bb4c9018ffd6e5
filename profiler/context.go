package profiler

import "context"

type recorderKey struct{}

// NewContext returns ctx carrying r, so that code below (a ProcessGroup
// call, say) records into the calling rank's recorder.
func NewContext(ctx context.Context, r *Recorder) context.Context {
	return context.WithValue(ctx, recorderKey{}, r)
}

// FromContext returns the recorder ctx carries, or nil; a nil Recorder
// records nothing, so callers need not check.
func FromContext(ctx context.Context) *Recorder {
	if ctx == nil {
		return nil
	}
	r, _ := ctx.Value(recorderKey{}).(*Recorder)
	return r
}
