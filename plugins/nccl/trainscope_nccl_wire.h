/*
 * The record stream the plugin writes to the profile-run collector, format
 * version 4 (version 1 had no RANGE records, version 2 no ACTIVITY and NAME
 * records, version 3 no memory activity). docs/nccl-plugin.md describes it; the Go decoder
 * (internal/ncclplugin) reads it. Every integer is little-endian; every
 * frame is TSNP_RECORD_SIZE bytes.
 *
 * A connection starts with one hello frame, then carries records until it
 * closes. Strings are NUL-padded and truncated to their field, and may
 * lack a terminating NUL when they fill it.
 */
#ifndef TRAINSCOPE_NCCL_WIRE_H
#define TRAINSCOPE_NCCL_WIRE_H

#include <stddef.h>
#include <stdint.h>

#define TSNP_MAGIC "TSNP"
#define TSNP_VERSION 4
#define TSNP_RECORD_SIZE 128

/* Hello: the first frame of a connection. */
struct tsnp_hello {
  char magic[4];        /* 0   "TSNP" */
  uint16_t version;     /* 4   TSNP_VERSION */
  uint16_t record_size; /* 6   TSNP_RECORD_SIZE */
  uint32_t pid;         /* 8   */
  uint32_t uid;         /* 12  */
  uint64_t mono_ns;     /* 16  CLOCK_MONOTONIC when the connection was made */
  uint64_t realtime_ns; /* 24  CLOCK_REALTIME at the same moment */
  char hostname[64];    /* 32  */
  int32_t world_rank1;  /* 96  the launcher's rank of the process + 1 (RANK, OMPI_COMM_WORLD_RANK,
                                  SLURM_PROCID, PMI_RANK, read at connect); 0: not set */
  int32_t local_size1;  /* 100 the launcher's number of processes on this host + 1 (LOCAL_WORLD_SIZE,
                                  OMPI_COMM_WORLD_LOCAL_SIZE, MPI_LOCALNRANKS, SLURM_NTASKS_PER_NODE,
                                  read at connect); 0: not set */
  uint8_t reserved[24]; /* 104 zero */
};

/* Record kinds. */
enum {
  TSNP_COMM_INIT = 1,      /* a communicator was initialised in this process */
  TSNP_COLLECTIVE = 2,     /* a collective was enqueued */
  TSNP_P2P = 3,            /* a send or receive was enqueued */
  TSNP_KERNEL_CHANNEL = 4, /* one channel of a collective's or p2p's kernel ran on the GPU */
  TSNP_DROPS = 5,          /* the process's loss counters, cumulative */
  TSNP_COMM_FINALIZE = 6,  /* a communicator was finalised */
  TSNP_PROXY_OP = 7,       /* a proxy operation of a p2p (network transports): its start, then its stop */
  TSNP_RANGE = 8,          /* an NVTX range of the application's (struct tsnp_range) */
  TSNP_ACTIVITY = 9,       /* a kernel, copy or memset the GPU ran, traced by CUPTI (struct tsnp_activity) */
  TSNP_NAME = 10,          /* a piece of a kernel's name that ACTIVITY records name by number (struct tsnp_name) */
};

/* Operation codes (NCCL's function names). */
enum {
  TSNP_FUNC_UNKNOWN = 0,
  TSNP_FUNC_ALLREDUCE = 1,
  TSNP_FUNC_BROADCAST = 2,
  TSNP_FUNC_REDUCE = 3,
  TSNP_FUNC_ALLGATHER = 4,
  TSNP_FUNC_REDUCESCATTER = 5,
  TSNP_FUNC_SEND = 6,
  TSNP_FUNC_RECV = 7,
  TSNP_FUNC_ALLTOALL = 8,
  TSNP_FUNC_GATHER = 9,
  TSNP_FUNC_SCATTER = 10,
  TSNP_FUNC_SENDRECV = 11,
};

/* Element types; the size in bytes is in parentheses. */
enum {
  TSNP_DTYPE_UNKNOWN = 0,     /* (0) */
  TSNP_DTYPE_INT8 = 1,        /* (1) */
  TSNP_DTYPE_UINT8 = 2,       /* (1) */
  TSNP_DTYPE_INT32 = 3,       /* (4) */
  TSNP_DTYPE_UINT32 = 4,      /* (4) */
  TSNP_DTYPE_INT64 = 5,       /* (8) */
  TSNP_DTYPE_UINT64 = 6,      /* (8) */
  TSNP_DTYPE_FLOAT16 = 7,     /* (2) */
  TSNP_DTYPE_FLOAT32 = 8,     /* (4) */
  TSNP_DTYPE_FLOAT64 = 9,     /* (8) */
  TSNP_DTYPE_BFLOAT16 = 10,   /* (2) */
  TSNP_DTYPE_FLOAT8E4M3 = 11, /* (1) */
  TSNP_DTYPE_FLOAT8E5M2 = 12, /* (1) */
};

enum {
  TSNP_ALGO_UNKNOWN = 0,
  TSNP_ALGO_TREE = 1,
  TSNP_ALGO_RING = 2,
  TSNP_ALGO_COLLNET_DIRECT = 3,
  TSNP_ALGO_COLLNET_CHAIN = 4,
  TSNP_ALGO_NVLS = 5,
  TSNP_ALGO_NVLS_TREE = 6,
  TSNP_ALGO_PAT = 7,
};

enum { TSNP_PROTO_UNKNOWN = 0, TSNP_PROTO_LL = 1, TSNP_PROTO_LL128 = 2, TSNP_PROTO_SIMPLE = 3 };

/*
 * One record. The first 24 bytes are common; the rest depends on kind.
 *
 * task: the plugin's number for a collective or p2p, unique in the
 * process and never 0; its kernel-channel records carry the same number.
 *
 * COLLECTIVE, P2P: t0/t1 = CLOCK_MONOTONIC ns when NCCL started and
 *   finished enqueueing it; seq = NCCL's sequence number (collective: per
 *   communicator and function, equal on every rank) or the plugin's (p2p:
 *   per communicator, direction and peer, so the n-th Send from a to b
 *   and the n-th Recv at b from a share it); peer = root (collective, -1
 *   where the function has none) or peer (p2p); a0 = count (elements),
 *   a1 = bytes = count x element size; P2P a2 = the process's number for
 *   the ncclGroupStart/ncclGroupEnd block that enqueued it, the same for
 *   every p2p of the block (a call outside any block is one of its own),
 *   0 where NCCL does not say (profiler interface v4).
 * KERNEL_CHANNEL: the parent's identity (task, seq, func, dtype, peer,
 *   rank, nranks, comm name; parent_kind); t0/t1 = GPU %globaltimer ns
 *   when the channel started and stopped (t1 = 0 if NCCL never reported
 *   the stop); a0/a1 = CLOCK_MONOTONIC ns when the proxy thread reported
 *   the start and the stop (a1 = 0 without a stop).
 * PROXY_OP: the parent p2p's identity as for KERNEL_CHANNEL; channel;
 *   t0 = CLOCK_MONOTONIC ns when the proxy thread started it (when the
 *   host posted the operation, not when data moved); t1 = 0 in the record
 *   sent at the start, and CLOCK_MONOTONIC ns when the proxy finished
 *   moving the data in the record sent at the stop; a0 = 1 for a send, 0
 *   for a receive.
 * COMM_INIT: t0 = CLOCK_MONOTONIC ns, rank, nranks, nnodes, comm name;
 *   peer = the CUDA device ordinal current on the initialising thread
 *   (-1 when it could not be read); a0 = NCCL's version code
 *   (ncclGetVersion: 22809 for 2.28.9), 0 where the process's NCCL did
 *   not say (and from plugins built before the field: it was 0); a1, a2 =
 *   that device's UUID (cuDeviceGetUuid), its 16 bytes in order, zero
 *   where it could not be read (and from plugins built before the field).
 * COMM_FINALIZE: t0 = CLOCK_MONOTONIC ns, rank, nranks, comm name.
 * DROPS: t0 = CLOCK_MONOTONIC ns; counts since the plugin was loaded:
 *   a0 = records lost to a full ring, a1 = events refused (no free event
 *   slot, a kernel channel or proxy operation whose parent was no longer
 *   known, or a call on an event's handle after its slot was reused by a
 *   later event or after its stop), a2 =
 *   records discarded while no collector was connected, seq = device
 *   activity records CUPTI dropped (no buffer free, or a buffer that
 *   filled) or could not time (a start of 0, an end before it); t1 = once the process is exiting, the activity buffers
 *   CUPTI had not handed back (their records never come, and are in no
 *   count), 0 before; task = proxy operations of other processes (PXN)
 *   that this process's proxy threads ran, not recorded (their own
 *   process never sees them; 0 from a plugin before this count).
 */
struct tsnp_record {
  uint16_t kind;        /* 0   TSNP_* kind */
  uint16_t flags;       /* 2   reserved, 0 */
  uint32_t tid;         /* 4   kernel thread id of the thread NCCL called the plugin on */
  uint64_t comm_hash;   /* 8   NCCL's communicator id (commId / commHash) */
  uint64_t task;        /* 16  */
  uint64_t seq;         /* 24  */
  uint64_t t0;          /* 32  */
  uint64_t t1;          /* 40  */
  uint64_t a0;          /* 48  */
  uint64_t a1;          /* 56  */
  int32_t rank;         /* 64  this process's rank in the communicator */
  int32_t nranks;       /* 68  */
  int32_t peer;         /* 72  */
  int32_t nnodes;       /* 76  */
  uint8_t func;         /* 80  TSNP_FUNC_* */
  uint8_t dtype;        /* 81  TSNP_DTYPE_* */
  uint8_t algo;         /* 82  TSNP_ALGO_* */
  uint8_t proto;        /* 83  TSNP_PROTO_* */
  uint8_t nchannels;    /* 84  */
  uint8_t channel;      /* 85  kernel channel id */
  uint8_t parent_kind;  /* 86  TSNP_COLLECTIVE or TSNP_P2P for a kernel channel */
  uint8_t nwarps;       /* 87  */
  uint64_t a2;          /* 88  */
  char comm_name[32];   /* 96  NCCL's commName, truncated */
};

/*
 * RANGE: a thread range the application pushed and popped through NVTX
 * in the default domain (nvtxRangePushA, nvtxRangePushW, nvtxRangePushEx,
 * nvtxDomainRangePushEx with the default domain), timed on
 * CLOCK_MONOTONIC. A name that is not ASCII text (a wide string, a
 * registered string, none) is sent as "(unnamed)".
 *
 * One record is sent when a range is popped. A top-level range (depth 0)
 * also sends one when it is pushed, with TSNP_RANGE_START set and t1 = 0,
 * so that the collector knows a step has begun before it ends. ordinal
 * numbers the thread's pushes from 1 and is the same in a range's START
 * record and its end record. Ranges nested deeper than the plugin tracks
 * are not sent; lost counts them (per thread, cumulative).
 */
enum {
  TSNP_RANGE_START = 1,     /* sent at the push; t1 is 0 */
  TSNP_RANGE_TRUNCATED = 2, /* the name is longer than the name field holds */
};

struct tsnp_range {
  uint16_t kind;     /* 0   TSNP_RANGE */
  uint16_t flags;    /* 2   TSNP_RANGE_* */
  uint32_t tid;      /* 4   kernel thread id of the thread that pushed it */
  uint64_t domain;   /* 8   0: NVTX's default domain (the only one sent) */
  uint64_t ordinal;  /* 16  the thread's push number, from 1 */
  uint64_t lost;     /* 24  ranges of this thread not sent, too deeply nested */
  uint64_t t0;       /* 32  CLOCK_MONOTONIC ns at the push */
  uint64_t t1;       /* 40  CLOCK_MONOTONIC ns at the pop; 0 with TSNP_RANGE_START */
  int32_t depth;     /* 48  nesting depth on its thread, 0 = top level */
  uint32_t name_len; /* 52  the name's full length in bytes */
  char name[72];     /* 56  the name, NUL-padded, truncated to 72 bytes */
};

/*
 * ACTIVITY: one kernel, memory copy or memset the GPU ran, from CUPTI's
 * activity records (the plugin is also a CUDA injection library,
 * CUDA_INJECTION64_PATH). NCCL's own kernels are not sent: its
 * collectives and p2p operations come as their own records.
 *
 * The first ACTIVITY record of a process has what = TSNP_ACT_TRACING and
 * t0 = when tracing began: from then on the collector knows that the
 * process's kernels come, a buffer at a time, later than its host
 * records. Times are CLOCK_MONOTONIC ns: CUPTI's timestamps where it took
 * them on that clock (TSNP_ACT_MONOTONIC), else CUPTI's CLOCK_REALTIME
 * moved onto it by the plugin with the offset between the two clocks
 * read when the buffer was delivered.
 */
enum {
  TSNP_ACT_TRACING = 0, /* tracing began at t0; note names the CUPTI library */
  TSNP_ACT_KERNEL = 1,
  TSNP_ACT_MEMCPY = 2,
  TSNP_ACT_MEMSET = 3,
  TSNP_ACT_UNAVAILABLE = 4, /* tracing could not begin; note says why */
  TSNP_ACT_MEMORY = 5,      /* device memory allocated (copy_kind 1) or released (2): bytes, at t0 = t1 */
};
/* flags: CUPTI timed on CLOCK_MONOTONIC itself; LABELLED: a kernel, copy
 * or memset launched inside an NVTX range named as forward or backward
 * work, whose labels it carries (struct tsnp_label in place of note). A
 * reader that does not know LABELLED reads the record as unlabelled. */
enum { TSNP_ACT_MONOTONIC = 1, TSNP_ACT_LABELLED = 2 };

enum { TSNP_PHASE_FORWARD = 1, TSNP_PHASE_BACKWARD = 2 };

struct tsnp_label {
  int32_t microbatch; /* 80  the range name's microbatch; -1: none */
  int16_t chunk;      /* 84  its (virtual pipeline) chunk; -1: none */
  uint8_t phase;      /* 86  TSNP_PHASE_* */
  uint8_t reserved;   /* 87  zero */
};

struct tsnp_activity {
  uint16_t kind;        /* 0   TSNP_ACTIVITY */
  uint16_t flags;       /* 2   TSNP_ACT_MONOTONIC */
  uint32_t tid;         /* 4   kernel thread id of the thread that delivered it (CUPTI's) */
  uint64_t t0;          /* 8   CLOCK_MONOTONIC ns: start on the GPU */
  uint64_t t1;          /* 16  CLOCK_MONOTONIC ns: end on the GPU */
  uint64_t bytes;       /* 24  bytes copied or set; 0 for a kernel */
  uint32_t device;      /* 32  CUDA device ordinal */
  uint32_t context;     /* 36  CUPTI's context id */
  uint32_t stream;      /* 40  CUPTI's stream id */
  uint32_t correlation; /* 44  CUPTI's correlation id */
  uint32_t name_id;     /* 48  a kernel's NAME number; 0: no name */
  uint8_t what;         /* 52  TSNP_ACT_* */
  uint8_t copy_kind;    /* 53  CUPTI's memcpy kind (1 HtoD, 2 DtoH, 8 DtoD, 10 PtoP, …); 0 otherwise */
  uint8_t reserved0[2]; /* 54  zero */
  int32_t grid[3];      /* 56  a kernel's grid */
  int32_t block[3];     /* 68  a kernel's block */
  union {
    char note[48];          /* 80  TRACING, UNAVAILABLE: text, NUL-padded; else zero */
    struct tsnp_label label; /* 80  LABELLED: the labels, then zero */
  };
};

/*
 * NAME: a piece of the name of a kernel, as CUPTI gave it (mangled, as a
 * rule). A process sends a name once, before the first ACTIVITY record
 * that uses its number, in pieces at offsets 0, 104, 208, … up to len
 * bytes; a name longer than TSNP_NAME_MAX is cut there and flagged.
 */
enum { TSNP_NAME_TRUNCATED = 1 };
#define TSNP_NAME_MAX 4096

struct tsnp_name {
  uint16_t kind;      /* 0   TSNP_NAME */
  uint16_t flags;     /* 2   TSNP_NAME_TRUNCATED */
  uint32_t tid;       /* 4   */
  uint32_t id;        /* 8   the name's number, from 1 */
  uint32_t len;       /* 12  the name's length in bytes (as sent: at most TSNP_NAME_MAX) */
  uint32_t offset;    /* 16  where this piece starts */
  uint32_t reserved;  /* 20  zero */
  char text[104];     /* 24  the piece, NUL-padded */
};

_Static_assert(sizeof(struct tsnp_activity) == TSNP_RECORD_SIZE, "activity size");
_Static_assert(offsetof(struct tsnp_activity, grid) == 56, "activity layout");
_Static_assert(offsetof(struct tsnp_activity, label.phase) == 86, "activity layout");
_Static_assert(sizeof(struct tsnp_name) == TSNP_RECORD_SIZE, "name size");
_Static_assert(offsetof(struct tsnp_name, text) == 24, "name layout");
_Static_assert(sizeof(struct tsnp_range) == TSNP_RECORD_SIZE, "range size");
_Static_assert(offsetof(struct tsnp_range, name) == 56, "range layout");
_Static_assert(sizeof(struct tsnp_hello) == TSNP_RECORD_SIZE, "hello size");
_Static_assert(sizeof(struct tsnp_record) == TSNP_RECORD_SIZE, "record size");
_Static_assert(offsetof(struct tsnp_record, rank) == 64, "record layout");
_Static_assert(offsetof(struct tsnp_record, a2) == 88, "record layout");
_Static_assert(offsetof(struct tsnp_record, comm_name) == 96, "record layout");

#endif
