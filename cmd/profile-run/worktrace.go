package main

import (
	"fmt"

	"github.com/trainscope/trainscope/runtime"
)

// startWorkTrace starts the trace of the backend's device work that
// -device-timing trace times ranges from.
func startWorkTrace(dt runtime.DeviceType) (*runtime.WorkTrace, error) {
	impl, err := runtime.Available(dt)
	if err != nil {
		return nil, fmt.Errorf("-device-timing trace: %w", err)
	}
	t, err := runtime.StartWorkTrace(impl)
	if err != nil {
		return nil, fmt.Errorf("-device-timing trace: %w (-device-timing events works without it)", err)
	}
	return t, nil
}

// workTraceName says what a backend's work trace is made of.
func workTraceName(dt runtime.DeviceType) string {
	switch dt {
	case runtime.CUDA:
		return "CUPTI's activity records of every kernel, copy and memset (-device-timing trace)"
	case runtime.CPU:
		return "the cpu backend's record of what each stream ran (-device-timing trace)"
	}
	return dt.String() + "'s trace of its device work (-device-timing trace)"
}
