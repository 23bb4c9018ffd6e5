// Package naming reads what a training job's own names say, where no
// field says it: a range that brackets one training step ("step 12",
// torch.profiler's "ProfilerStep#12"), a range of one microbatch's
// forward or backward work ("forward chunk 1 microbatch 3", "bwd_mb3",
// torch.distributed.pipelining's "PP:2F3"), and a process group or
// communicator that joins a pipeline's stages
// ("PIPELINE_MODEL_PARALLEL_GROUP", a device mesh's "pp").
//
// A wrapped job's NCCL plugin collector and the Kineto trace import read
// names by these rules, so that a job is labelled alike however it was
// recorded. The NCCL plugin's C code (plugins/nccl/plugin.c, phase_label)
// applies Work's rule for NVTX ranges inside the training process; the
// plugin's end-to-end test checks that the two agree.
package naming
