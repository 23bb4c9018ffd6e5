package profiler

import "strconv"

// Phase is the part of a training step a range belongs to.
type Phase uint8

// Phases.
const (
	PhaseNone Phase = iota
	Forward
	Backward
	Optimizer
	Comm
)

var phaseNames = [...]string{PhaseNone: "", Forward: "forward", Backward: "backward", Optimizer: "optimizer", Comm: "comm"}

func (p Phase) String() string {
	if int(p) < len(phaseNames) {
		return phaseNames[p]
	}
	return "phase" + strconv.Itoa(int(p))
}

// Kind says what a range measures.
type Kind uint8

// Kinds of range.
const (
	// KindHost is timed on the host only.
	KindHost Kind = iota
	// KindDevice is also timed on a device stream through events.
	KindDevice
	// KindCollective is a device-timed collective (AllReduce, …).
	KindCollective
	// KindP2P is a device-timed Send or Recv.
	KindP2P
	// KindKernel is a kernel the device's own activity tracing reported
	// (CUPTI in a wrapped process, a Kineto trace's kernel events):
	// device-timed, with no phase, and no host range of its own
	// (HostStart = HostEnd) unless one is known (an imported kernel keeps
	// the range of the call that launched it). Busy time counts it as
	// compute.
	KindKernel
)

var kindNames = [...]string{KindHost: "host", KindDevice: "device", KindCollective: "collective", KindP2P: "p2p", KindKernel: "kernel"}

func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "kind" + strconv.Itoa(int(k))
}

// None marks a label that is not set (no stage, chunk or microbatch).
const None = -1

// Labels is the pipeline context of a range. A Recorder keeps a current
// set that each Start captures, so ranges nested under a microbatch carry
// its labels without repeating them.
type Labels struct {
	Step       int32
	Microbatch int32
	Stage      int16
	Chunk      int16
	Phase      Phase
}

// NoLabels is the context with nothing set.
var NoLabels = Labels{Step: None, Microbatch: None, Stage: None, Chunk: None}
