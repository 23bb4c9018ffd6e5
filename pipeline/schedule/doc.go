// Package schedule holds the pipeline-parallel schedules trainscope's
// trainer runs and its profiler measures: GPipe and Megatron-LM's 1F1B, with
// and without interleaved virtual pipeline stages (VPP).
//
// A model of p·v virtual stages is split over p pipeline stages (ranks) of v
// model chunks each, chunk c of stage s holding virtual stage c·p + s, and
// each step's batch is split into m microbatches. A Schedule says, for each
// stage, the exact order of forward and backward Actions it runs in one
// step; the trainer executes that order and the profiler labels what it
// records with the same stage, chunk, microbatch and phase.
//
// Simulate replays a schedule under a cost model with free communication,
// which checks that its cross-stage dependencies can all be met and gives
// the pipeline bubble to compare with IdealBubbleFraction and with measured
// timelines.
package schedule
