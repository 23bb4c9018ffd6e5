// Package cycle finds the step of a training job that marks none, from
// its collectives alone.
//
// A data-parallel, sharded or pipelined training loop issues the same
// collectives in the same order every step: DDP one all-reduce per
// gradient bucket, FSDP an all-gather per unit forward and backward and a
// reduce-scatter per unit, a pipeline its sends and receives and its
// gradients' all-reduce. A wrapped command (profile-run -- CMD) that marks
// no NVTX steps still shows that cycle. A Sink keeps each rank's latest
// collectives (a bounded window), and Result finds, per rank:
//
//   - the longest recent stretch whose sequence of collectives — operation,
//     communicator, size, peer and root — repeats with a period of p
//     operations, three times at least (a warm-up step that differs, DDP's
//     first with its buckets not yet rebuilt, falls outside it);
//   - the shortest multiple c of p whose repetitions take a steady time
//     (the time from any operation to the one c later has an
//     interquartile range within MaxSpread of its median). Where the
//     sequence has two kinds of operation or more and repeats whole, c = p
//     is the cycle. A multiple of it, or of a sequence of one kind (the
//     all-reduces of tensor parallelism, all of one size, repeat every
//     operation), must also start after a gap of its own: in three cycles
//     of four, the pause before that place is MinBoundary times the
//     typical gap (the optimizer's step, the next batch). Sums of many
//     gaps grow steady whatever they span; only a step pauses at the same
//     place every time. Such a cycle may also vary up to twice MaxSpread
//     where that is no more than NoiseRatio times the spread of two cycles
//     together, as the steps of a noisy job do (the step, not two of
//     them: their sum is steadier only by averaging).
//
// That cycle's duration is the step time as the host issued the work: in
// a loop that waits for its GPU each step (a loss read back, a
// synchronising optimizer), the time of a step. Result says when no rank
// has enough collectives, when they do not repeat, or when no multiple
// takes a steady time, rather than guess.
//
// Where the operations were timed on the device, a rank's Device says how
// much of a cycle they ran there; where its kernels were traced too, Busy
// how much of a cycle its GPU was busy (profiler.BusyIntervals of its
// latest device work, between the device starts of the same operation a
// cycle apart).
//
// Once a rank's cycle is found, Run counts every cycle of the run one by
// one as its operations arrive (each from the first operation after the
// cycle's longest pause to the same one a cycle later), in bounded
// memory however long the run, and Job.Stalls names the longest; the
// window only finds the cycle. Until the window first fills, each count
// searches it whole again (once a quarter more operations came, and at
// the end), and where more cycles show another one steadier (two steps
// taken for one in a noisy start), counts the run anew with it. Finish,
// once no operation will come, counts the last ones.
//
// Sink.Number numbers the cycles across ranks, so that each can be a
// trace of its own (the OTLP exporter's Config.Cycles): from the first
// cycle found that holds a communicator's operations, every operation of
// that communicator (of that function, for NCCL, which numbers each
// apart; of that pair of ranks, for a send or receive) falls in the cycle
// its sequence number says, the same on every rank, since the ranks of a
// communicator number its operations alike.
//
// A rank keeps its latest Window operations (Budget over all ranks), so a
// step of up to Window/MinRepeats operations is found; the search takes
// about linear time in them for a training loop's operations, not the
// quadratic time of comparing every operation for every period.
package cycle
