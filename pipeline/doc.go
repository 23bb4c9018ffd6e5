// Package pipeline is trainscope's built-in trainer: a real, small
// training job that runs on any registered backend through runtime and
// ccl alone, and is both the first demonstration a user sees and the
// workload the benchmarks profile.
//
// The model is a stack of Config.Layers square weight matrices (no bias),
// each followed by tanh, trained with SGD on the mean squared error
// against learnable synthetic targets (tanh of a fixed random projection
// of the input). It is split into Stages × Chunks virtual stages — chunk c
// of stage s holds virtual stage c·Stages + s, Megatron's interleaved
// assignment — and replicated Replicas times. Rank replica·Stages + stage
// runs on device index rank mod Trainer.Placement().Devices of Config.Backend
// (ranks share devices where Config.Devices or the backend offers fewer
// than ranks) in its own goroutine, locked to its OS thread, and executes its stage's actions from the
// GPipe or interleaved 1F1B schedule (package schedule): activations and
// gradients travel between stages with Send and Recv on a pipeline
// process group per replica, and gradients are averaged over a
// data-parallel group per stage before the update.
//
// The data works as a data loader's would. Each rank holding the first or
// the last virtual stage draws its replica's share of a fixed synthetic
// dataset once, at setup (D samples, at most 64 MiB of inputs or one
// global batch; see Config), and each step only copies the step's rows to
// its device, in a "load_batch" device range. The rank holding the last
// virtual stage keeps the projection P on its device and computes the
// step's targets there, tanh(x·P) with a float32 GEMM and tanh, in a
// "targets" device range: no sample is drawn and no target computed on
// the host during training.
//
// Weights depend only on (seed, layer) and samples only on (seed, sample
// index), so every layout trains the same model on the same data:
// ReferenceLosses trains it unpipelined in float64 on the host (targets
// included), and Train's losses agree with it to float32 rounding.
// Config.Precision lets the GEMMs compute in TF32 or bfloat16 on tensor
// cores instead (storage stays float32); losses then agree only to that
// precision, and a backend without it trains in float32
// (Config.EffectivePrecision).
//
// With Config.Profiler set, each rank records into its own
// profiler.Recorder: a host range per step, a device range per forward and
// backward action labelled with stage, chunk, microbatch and phase, device
// ranges for every GEMM, tanh, loss, send and receive inside them, the
// optimizer with its all-reduce and SGD, and — through the process
// groups — every collective and point-to-point transfer. With a nil
// profiler nothing is recorded.
//
// Train runs a whole job; NewTrainer, Trainer.Step and Trainer.Close run
// it a step at a time. A step whose context ends stops at its ranks' next
// action and gives the device work they queued CommTimeout to finish;
// Trainer.StopNow (a second interrupt) gives that work up at once.
package pipeline
