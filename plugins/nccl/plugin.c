/*
 * trainscope's NCCL profiler plugin: timestamps NCCL's collectives, p2p
 * operations and their kernel channels, copies them into fixed-size
 * records and streams them to the profile-run collector over a Unix
 * socket (TRAINSCOPE_NCCL_SOCKET). docs/nccl-plugin.md describes what is
 * recorded and why it is built this way.
 *
 * Threads: NCCL calls init, startEvent, stopEvent and finalize on its
 * application threads, and kernel-channel and proxy-operation events on
 * its proxy threads.
 * Those calls only read the clock, copy fields and push a record onto the
 * calling thread's ring; they take no lock, allocate nothing and make no
 * system call once the thread's ring exists. One background thread of
 * ours drains the rings and writes to the socket, never waiting on the
 * collector for long, and discards (counting) when there is none.
 *
 * The same library is an NVTX injection library (NVTX_INJECTION64_PATH):
 * InitializeInjectionNvtx2 hooks the application's thread ranges of the
 * default domain, which go out as RANGE records through the same rings;
 * see "The NVTX interface" below.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "cupti_activity_abi.h"
#include "nccl_profiler_abi.h"
#include "nvtx_injection_abi.h"
#include "trainscope_nccl_wire.h"

#define TS_EXPORT __attribute__((visibility("default")))

enum {
  TS_MASK = ncclProfileColl | ncclProfileP2p | ncclProfileKernelCh | ncclProfileProxyOp,
  TS_DEFAULT_RING = 16384, /* records per thread ring */
  TS_MAX_RING = 1u << 20,  /* TRAINSCOPE_NCCL_RING_RECORDS at most: 128 MiB a thread */
  TS_SLOTS = 32768,        /* live event slots per pool; a power of two */
  TS_BATCH = 512,          /* records per socket write */
  TS_FLUSH_MS = 200,       /* how long finalize and exit wait for the last records to go */
  TS_TALLY_MS = 50,        /* and then for the count of those that could not */
  TS_SEND_WAIT_MS = 50,    /* how long one drain cycle waits on a full socket */
  TS_NVTX_LEVELS = 16,     /* NVTX nesting levels tracked per thread; deeper ranges are counted, not sent */
  TS_CUPTI_BUFFER = 64 << 10, /* bytes of one CUPTI activity buffer: a few hundred records, so kernels arrive soon */
  TS_CUPTI_BUFFERS = 512,    /* activity buffers CUPTI may hold at once (32 MiB); beyond them it drops, and counts */
  TS_CUPTI_FLUSH_MS = 50,    /* how often CUPTI hands over the buffers whose records are complete */
  TS_CUPTI_WAIT_MS = 200,    /* how long a delivery waits for room in its ring before it drops */
  TS_NAMES = 8192,           /* kernel names numbered per process; a power of two */
  TS_CORRELATIONS = 1 << 16, /* launches whose labels are remembered until their kernels come; a power of two */
};

static uint64_t now_ns(clockid_t id) {
  struct timespec ts;
  clock_gettime(id, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}
static uint64_t mono_ns(void) { return now_ns(CLOCK_MONOTONIC); }

/* ---- Per-thread rings: single producer (the thread), single consumer (the drainer). ---- */

enum { RING_OWNED = 1, RING_FREE = 2 };

/* An open NVTX range of the thread's. */
struct ts_frame {
  uint64_t t0;
  uint64_t ordinal;
  uint32_t name_len; /* the full length */
  uint64_t label;    /* the labels the range's name gives (phase_label), in force while it is open; 0: none */
  char name[sizeof(((struct tsnp_range*)0)->name)];
};

struct ts_ring {
  _Atomic uint64_t head; /* written by the producer */
  char pad0[56];
  _Atomic uint64_t tail; /* written by the drainer */
  char pad1[56];
  _Atomic uint64_t dropped; /* records lost because the ring was full */
  _Atomic int state;
  uint32_t tid;
  struct ts_ring* next; /* immutable once published */
  /* The owner's NVTX range stack: only the owning thread touches it (the
   * drainer never does), so it needs no atomics. A ring adopted from an
   * exited thread starts with an empty stack. */
  int32_t nvtx_depth;   /* open ranges, tracked or not */
  uint64_t nvtx_pushes; /* pushes so far: the last range's ordinal */
  uint64_t nvtx_lost;   /* ranges not sent, nested deeper than TS_NVTX_LEVELS */
  struct ts_frame nvtx[TS_NVTX_LEVELS];
  struct tsnp_record recs[];
};

/* ---- Event slots: what an event handle names between start and stop. ----
 * A handle is not a pointer but (generation, slot, tag) packed into a
 * pointer-sized integer, so a stale or foreign handle is recognised by its
 * generation instead of being dereferenced. A slot is reused after
 * TS_SLOTS later events of its pool whether or not its event has stopped,
 * and NCCL may still call on the old handle then (a kernel channel or a
 * proxy operation in flight that long, a CUDA graph replaying a collective
 * captured long ago): such a call is refused and counted, as is one on a
 * handle whose event has stopped.
 *
 * seq is the slot's generation and state, gen << 2 | SLOT_*: LIVE from
 * the event's start to its stop, STOPPED after it, BUSY while one thread
 * has the slot to itself. pool_put writes a slot under BUSY of its new
 * generation. A task slot is written by nothing else, so readers (its
 * stop, and its kernel channels and proxy operations looking up their
 * parent, after its stop too) use seq as a sequence lock. A kernel slot
 * is also written by its event's recordEventState and read by its
 * stopEvent, and each takes it (LIVE to BUSY, a compare-and-swap) rather
 * than check and then write: a late call whose slot was reused in between
 * wrote over the next event's record (a channel's start with another's
 * stop, or the new event lost without a count). No one waits on BUSY: a
 * late call finding it is refused, and pool_put takes the next slot. */

enum { TAG_COLL = 1, TAG_P2P = 2, TAG_KERNEL = 3, TAG_PROXY = 4, TAG_GROUP_API = 5, TAG_P2P_API = 6 };
enum { SLOT_WORDS = TSNP_RECORD_SIZE / 8 };
enum { SLOT_LIVE = 0, SLOT_BUSY = 1, SLOT_STOPPED = 2 };

struct ts_slot {
  _Atomic uint64_t seq; /* gen << 2 | SLOT_* */
  _Atomic uint64_t w[SLOT_WORDS];
};

struct ts_pool {
  _Atomic uint64_t next;
  struct ts_slot slots[TS_SLOTS];
};

static struct ts_pool task_pool;   /* collectives and p2p operations */
static struct ts_pool kernel_pool; /* kernel channels and proxy operations between their start and stop */

/* Writes r into a slot the caller holds (BUSY) and leaves it in state seq. */
static void slot_fill(struct ts_slot* s, uint64_t seq, const struct tsnp_record* r) {
  uint64_t w[SLOT_WORDS];
  memcpy(w, r, sizeof w);
  atomic_thread_fence(memory_order_release);
  for (int i = 0; i < SLOT_WORDS; i++) atomic_store_explicit(&s->w[i], w[i], memory_order_relaxed);
  atomic_store_explicit(&s->seq, seq, memory_order_release);
}

/* Reads a task slot of generation gen, live or (with stopped) stopped; 0
 * if it is another generation's or being written. A stop in between
 * changes the state, not the record. */
static int slot_read(struct ts_slot* s, uint64_t gen, int stopped, struct tsnp_record* r) {
  uint64_t w[SLOT_WORDS];
  uint64_t s1 = atomic_load_explicit(&s->seq, memory_order_acquire);
  if (s1 != (gen << 2 | SLOT_LIVE) && !(stopped && s1 == (gen << 2 | SLOT_STOPPED))) return 0;
  for (int i = 0; i < SLOT_WORDS; i++) w[i] = atomic_load_explicit(&s->w[i], memory_order_relaxed);
  atomic_thread_fence(memory_order_acquire);
  uint64_t s2 = atomic_load_explicit(&s->seq, memory_order_relaxed);
  if (s2 >> 2 != gen || (s2 & SLOT_BUSY)) return 0;
  memcpy(r, w, sizeof w);
  return 1;
}

/* Takes a kernel slot whose event of generation gen is live (BUSY) and
 * copies its record; 0 if the slot moved on, the event stopped, or
 * another call has it. The caller leaves it with slot_fill, or marks it
 * STOPPED. */
static int slot_take(struct ts_slot* s, uint64_t gen, struct tsnp_record* r) {
  uint64_t w[SLOT_WORDS];
  uint64_t live = gen << 2 | SLOT_LIVE;
  if (!atomic_compare_exchange_strong_explicit(&s->seq, &live, gen << 2 | SLOT_BUSY, memory_order_acquire,
                                               memory_order_relaxed))
    return 0;
  for (int i = 0; i < SLOT_WORDS; i++) w[i] = atomic_load_explicit(&s->w[i], memory_order_relaxed);
  memcpy(r, w, sizeof w);
  return 1;
}

/* Stores r in the next slot of p and returns its handle; with number,
 * r->task becomes the slot's sequence number (from 1). A slot that a late
 * call on its previous event holds is skipped, not waited for; NULL (the
 * caller counts it) if four in a row were. */
static void* pool_put(struct ts_pool* p, int tag, struct tsnp_record* r, int number) {
  for (int tries = 0; tries < 4; tries++) {
    uint64_t n = atomic_fetch_add_explicit(&p->next, 1, memory_order_relaxed);
    uint64_t idx = n & (TS_SLOTS - 1), gen = n / TS_SLOTS + 1;
    struct ts_slot* s = &p->slots[idx];
    uint64_t cur = atomic_load_explicit(&s->seq, memory_order_relaxed);
    if ((cur & SLOT_BUSY) || cur >> 2 >= gen ||
        !atomic_compare_exchange_strong_explicit(&s->seq, &cur, gen << 2 | SLOT_BUSY, memory_order_acquire,
                                                 memory_order_relaxed))
      continue;
    if (number) r->task = n + 1;
    slot_fill(s, gen << 2 | SLOT_LIVE, r);
    return (void*)(uintptr_t)(gen << 20 | idx << 4 | (uint64_t)tag);
  }
  return NULL;
}

/* The slot and generation a handle names: 0 if it is not one of ours
 * with a tag in tags (a bit set of TAG_*): NULL, an API group's, a
 * pointer of NCCL's or another process's. */
static int handle_slot(const void* h, unsigned tags, uint64_t* idx, uint64_t* gen, int* tag) {
  uint64_t v = (uint64_t)(uintptr_t)h;
  int t = (int)(v & 15);
  *idx = (v >> 4) & 0xffff;
  *gen = v >> 20;
  if (v == 0 || !(tags & (1u << t)) || *idx >= TS_SLOTS || *gen == 0) return 0;
  if (tag) *tag = t;
  return 1;
}

/* Reads the task slot a parent handle names, its event live or stopped; 0
 * if the handle is not one of ours with a tag in tags, or the slot moved
 * on. */
static int task_get(const void* h, unsigned tags, struct tsnp_record* r, int* tag) {
  uint64_t idx, gen;
  return handle_slot(h, tags, &idx, &gen, tag) && slot_read(&task_pool.slots[idx], gen, 1, r);
}

/* ---- Global state. ---- */

struct ts_comm {
  uint64_t hash;
  int rank, nranks, nnodes;
  char name[32];
  _Atomic uint64_t p2p_other; /* p2p sequence for a peer outside [0, nranks) */
  _Atomic uint64_t p2p_seq[]; /* [0, nranks): sends to peer; [nranks, 2·nranks): receives from peer */
};

static struct {
  pthread_mutex_t mu; /* init, finalize and the drainer's bookkeeping; never on the event path */
  pthread_cond_t wake, done;
  int set_up;
  int ncomms;
  /* running: a drainer is in its loop and drains. alive: a drainer
   * thread exists (running, or on its way out after a stop): never two,
   * since the rings' tails, the batch and the socket are the drainer's
   * alone. Drainers are detached: nothing joins them. */
  int running, alive, stop;
  int32_t world_rank1, local_size1; /* launcher_rank() + 1 and launcher_local_size() + 1, read at set-up */
  uint64_t flush_req, flush_done, flush_deadline;
  pthread_t thread;
  pthread_key_t key;
  int key_ok; /* key was made: without it a ring could not be handed back at thread exit */
  uint32_t ring_cap;
  uint64_t interval_ns;
  _Atomic(struct ts_ring*) rings;
  _Atomic uint64_t refused; /* events refused: no slot, a parent no longer known, or a call on a handle no longer live */
  _Atomic uint64_t stale;   /* of those, the calls on a handle whose slot moved on or whose event stopped */
  _Atomic uint64_t foreign; /* other processes' proxy operations (PXN) a proxy thread here ran: not recorded */
  pid_t pid;                /* this process, for proxy operations (PXN runs other processes' too) */
  int mask;                 /* the events asked of NCCL */
  int nvtx;                 /* InitializeInjectionNvtx2 succeeded: the drainer outlives the communicators */
  int cupti;                /* InitializeInjection started CUPTI tracing: so does it */
  _Atomic uint64_t epoch;   /* connections made: a kernel name is sent again on a new one */
  _Atomic uint64_t act_dropped; /* activity records CUPTI dropped */
  struct tsnp_record act_status; /* sent after every hello once CUPTI was tried (kind 0: not tried) */
  /* The drainer's own. */
  int fd;
  uint64_t next_connect;
  uint64_t unsent;
  uint64_t sent_bytes; /* for TRAINSCOPE_NCCL_DEBUG, with tally and detached */
  int tally;           /* how the stop's tally went: see tally_how */
  int detached;        /* the stop's flush gave up waiting for the drainer */
  uint64_t last_drops[5];
  int drops_dirty;
  char path[sizeof(((struct sockaddr_un*)0)->sun_path)];
  size_t out_len, out_off; /* bytes of out */
} g = {.mu = PTHREAD_MUTEX_INITIALIZER, .wake = PTHREAD_COND_INITIALIZER, .done = PTHREAD_COND_INITIALIZER, .fd = -1};

static struct tsnp_record out[TS_BATCH]; /* the drainer's batch */

static __thread struct ts_ring* tls_ring;
static __thread int tls_ring_failed;

static uint32_t gettid_u32(void) { return (uint32_t)syscall(SYS_gettid); }

/* The thread-exit destructor of a thread's ring, run on that thread. The
 * thread forgets its ring before another may adopt it: an NVTX or NCCL
 * call from a later destructor of the same thread (Python's thread-state
 * cleanup popping a range, say) then finds no ring and records nothing,
 * rather than write into a ring that is another thread's. */
static void ring_release(void* p) {
  tls_ring = NULL;
  tls_ring_failed = 1;
  atomic_store_explicit(&((struct ts_ring*)p)->state, RING_FREE, memory_order_release);
}

/* The calling thread's ring: the first call of a thread adopts the ring of
 * a thread that has exited, or allocates one; later calls are a TLS load.
 * NULL where the thread has none (its caller counts what it loses). */
static struct ts_ring* ring_get(void) {
  struct ts_ring* r = tls_ring;
  if (__builtin_expect(r != NULL, 1)) return r;
  if (tls_ring_failed) return NULL;
  if (!g.key_ok) { /* no thread-exit hook: every new thread's ring would leak */
    tls_ring_failed = 1;
    return NULL;
  }
  for (r = atomic_load_explicit(&g.rings, memory_order_acquire); r; r = r->next) {
    int expect = RING_FREE;
    if (atomic_compare_exchange_strong(&r->state, &expect, RING_OWNED)) break;
  }
  if (!r) {
    size_t size = sizeof *r + (size_t)g.ring_cap * sizeof r->recs[0];
    r = aligned_alloc(64, (size + 63) & ~(size_t)63);
    if (!r) {
      tls_ring_failed = 1;
      return NULL;
    }
    memset(r, 0, size); /* touch every page now, not on the event path */
    atomic_init(&r->state, RING_OWNED);
    struct ts_ring* head = atomic_load(&g.rings);
    do r->next = head;
    while (!atomic_compare_exchange_weak(&g.rings, &head, r));
  }
  r->nvtx_depth = 0;
  r->nvtx_pushes = r->nvtx_lost = 0;
  r->tid = gettid_u32();
  tls_ring = r;
  pthread_setspecific(g.key, r);
  return r;
}

static void push(struct tsnp_record* rec) {
  struct ts_ring* r = ring_get();
  if (!r) {
    atomic_fetch_add_explicit(&g.refused, 1, memory_order_relaxed);
    return;
  }
  rec->tid = r->tid;
  uint64_t h = atomic_load_explicit(&r->head, memory_order_relaxed);
  uint64_t t = atomic_load_explicit(&r->tail, memory_order_acquire);
  if (h - t >= g.ring_cap) {
    atomic_fetch_add_explicit(&r->dropped, 1, memory_order_relaxed);
    return;
  }
  r->recs[h & (g.ring_cap - 1)] = *rec;
  atomic_store_explicit(&r->head, h + 1, memory_order_release);
}

/* A call on an event handle of ours whose slot has moved on (reused by a
 * later event) or whose event has stopped: refused, and counted. */
static void refuse_stale(void) {
  atomic_fetch_add_explicit(&g.refused, 1, memory_order_relaxed);
  atomic_fetch_add_explicit(&g.stale, 1, memory_order_relaxed);
}

/* ---- NCCL's names to wire codes. ---- */

static int eq(const char* a, const char* b) { return strcmp(a, b) == 0; }

static uint8_t func_code(const char* s) {
  if (!s) return TSNP_FUNC_UNKNOWN;
  switch (s[0]) {
  case 'A':
    return eq(s, "AllReduce") ? TSNP_FUNC_ALLREDUCE
         : eq(s, "AllGather") ? TSNP_FUNC_ALLGATHER
         : eq(s, "AlltoAll")  ? TSNP_FUNC_ALLTOALL
                              : TSNP_FUNC_UNKNOWN;
  case 'B': return eq(s, "Broadcast") ? TSNP_FUNC_BROADCAST : TSNP_FUNC_UNKNOWN;
  case 'R':
    return eq(s, "Reduce")        ? TSNP_FUNC_REDUCE
         : eq(s, "ReduceScatter") ? TSNP_FUNC_REDUCESCATTER
         : eq(s, "Recv")          ? TSNP_FUNC_RECV
                                  : TSNP_FUNC_UNKNOWN;
  case 'S':
    return eq(s, "Send")     ? TSNP_FUNC_SEND
         : eq(s, "SendRecv") ? TSNP_FUNC_SENDRECV
         : eq(s, "Scatter")  ? TSNP_FUNC_SCATTER
                             : TSNP_FUNC_UNKNOWN;
  case 'G': return eq(s, "Gather") ? TSNP_FUNC_GATHER : TSNP_FUNC_UNKNOWN;
  }
  return TSNP_FUNC_UNKNOWN;
}

static const struct {
  const char* name;
  uint8_t code, size;
} dtypes[] = {
    {"Int8", TSNP_DTYPE_INT8, 1},         {"Uint8", TSNP_DTYPE_UINT8, 1},
    {"Int32", TSNP_DTYPE_INT32, 4},       {"Uint32", TSNP_DTYPE_UINT32, 4},
    {"Int64", TSNP_DTYPE_INT64, 8},       {"Uint64", TSNP_DTYPE_UINT64, 8},
    {"Float16", TSNP_DTYPE_FLOAT16, 2},   {"Float32", TSNP_DTYPE_FLOAT32, 4},
    {"Float64", TSNP_DTYPE_FLOAT64, 8},   {"Bfloat16", TSNP_DTYPE_BFLOAT16, 2},
    {"Float8e4m3", TSNP_DTYPE_FLOAT8E4M3, 1}, {"Float8e5m2", TSNP_DTYPE_FLOAT8E5M2, 1},
};

/* NCCL names element types "ncclFloat32" and so on. */
static uint8_t dtype_code(const char* s, uint64_t* size) {
  *size = 0;
  if (!s) return TSNP_DTYPE_UNKNOWN;
  if (strncmp(s, "nccl", 4) == 0) s += 4;
  for (size_t i = 0; i < sizeof dtypes / sizeof dtypes[0]; i++)
    if (eq(s, dtypes[i].name)) {
      *size = dtypes[i].size;
      return dtypes[i].code;
    }
  return TSNP_DTYPE_UNKNOWN;
}

static uint8_t algo_code(const char* s) {
  if (!s) return TSNP_ALGO_UNKNOWN;
  static const char* names[] = {"TREE", "RING", "COLLNET_DIRECT", "COLLNET_CHAIN", "NVLS", "NVLS_TREE", "PAT"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    if (eq(s, names[i])) return (uint8_t)(i + 1);
  return TSNP_ALGO_UNKNOWN;
}

static uint8_t proto_code(const char* s) {
  if (!s) return TSNP_PROTO_UNKNOWN;
  return eq(s, "LL") ? TSNP_PROTO_LL : eq(s, "LL128") ? TSNP_PROTO_LL128 : eq(s, "SIMPLE") ? TSNP_PROTO_SIMPLE : TSNP_PROTO_UNKNOWN;
}

/* ---- The drainer. ---- */

static uint64_t ring_drops(void) {
  uint64_t n = 0;
  for (struct ts_ring* r = atomic_load(&g.rings); r; r = r->next) n += atomic_load_explicit(&r->dropped, memory_order_relaxed);
  return n;
}

static void disconnect(void) {
  /* -1 first: a fork between the two must not leave the child an fd
   * number the application may reuse meanwhile. */
  int fd = g.fd;
  g.fd = -1;
  if (fd >= 0) close(fd);
  /* Records that never went out are lost, and one partly sent too: it
   * truncates the stream, which the collector reports as well. Not the
   * hello and the counts themselves, which are no record of the job's. */
  for (size_t off = g.out_off / TSNP_RECORD_SIZE * TSNP_RECORD_SIZE; off < g.out_len; off += TSNP_RECORD_SIZE) {
    uint16_t kind;
    memcpy(&kind, (char*)out + off, sizeof kind);
    if (kind != TSNP_DROPS && memcmp((char*)out + off, TSNP_MAGIC, 4) != 0) g.unsent++;
  }
  g.out_len = g.out_off = 0;
  g.next_connect = mono_ns() + 1000000000u;
}

/* The process's rank as its launcher numbered it (torchrun, mpirun, srun),
   or -1. Read once, at set-up (getenv on the drainer could race an
   application's setenv). */
static int32_t launcher_number(const char* const names[4]) {
  for (size_t i = 0; i < 4; i++) {
    const char* s = getenv(names[i]);
    if (!s || !*s) continue;
    char* end;
    long v = strtol(s, &end, 10);
    if (!*end && v >= 0 && v < (1L << 30)) return (int32_t)v;
  }
  return -1;
}

static int32_t launcher_rank(void) {
  static const char* const names[4] = {"RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID", "PMI_RANK"};
  return launcher_number(names);
}

/* The number of processes the launcher started on this host (those that
 * can reach the collector's local socket), or -1. */
static int32_t launcher_local_size(void) {
  static const char* const names[4] = {"LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS",
                                       "SLURM_NTASKS_PER_NODE"};
  return launcher_number(names);
}

static void fill_hello(struct tsnp_hello* h) {
  memset(h, 0, sizeof *h);
  memcpy(h->magic, TSNP_MAGIC, 4);
  h->version = TSNP_VERSION;
  h->record_size = TSNP_RECORD_SIZE;
  h->pid = (uint32_t)getpid();
  h->uid = (uint32_t)getuid();
  h->mono_ns = mono_ns();
  h->realtime_ns = now_ns(CLOCK_REALTIME);
  gethostname(h->hostname, sizeof h->hostname - 1);
  h->world_rank1 = g.world_rank1;
  h->local_size1 = g.local_size1;
}

/* A connection to the collector, or -1. */
static int dial(void) {
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  struct sockaddr_un addr = {.sun_family = AF_UNIX};
  memcpy(addr.sun_path, g.path, sizeof addr.sun_path);
  if (connect(fd, (struct sockaddr*)&addr, sizeof addr) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

static void try_connect(void) {
  if (g.fd >= 0 || !g.path[0] || mono_ns() < g.next_connect) return;
  g.next_connect = mono_ns() + 1000000000u; /* at most one attempt a second */
  int fd = dial();
  if (fd < 0) return;
  g.fd = fd;
  struct tsnp_hello h;
  fill_hello(&h);
  memcpy(&out[0], &h, sizeof h);
  g.out_len = sizeof h;
  g.out_off = 0;
  g.drops_dirty = 1;
  atomic_fetch_add(&g.epoch, 1);
  pthread_mutex_lock(&g.mu);
  struct tsnp_record status = g.act_status;
  pthread_mutex_unlock(&g.mu);
  if (status.kind != 0) {
    memcpy((char*)out + g.out_len, &status, sizeof status);
    g.out_len += sizeof status;
  }
}

/* Writes what is buffered, waiting at most wait_ms for room on the socket. */
static void send_out(int wait_ms) {
  uint64_t deadline = mono_ns() + (uint64_t)wait_ms * 1000000u;
  while (g.fd >= 0 && g.out_off < g.out_len) {
    ssize_t n = send(g.fd, (char*)out + g.out_off, g.out_len - g.out_off, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      g.out_off += (size_t)n;
      g.sent_bytes += (uint64_t)n;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      uint64_t now = mono_ns();
      if (now >= deadline) break;
      struct pollfd p = {.fd = g.fd, .events = POLLOUT};
      int ms = (int)((deadline - now + 999999) / 1000000);
      if (poll(&p, 1, ms) < 0 && errno != EINTR) {
        disconnect();
        return;
      }
      continue;
    }
    disconnect();
    return;
  }
  if (g.out_off == g.out_len) {
    g.out_off = g.out_len = 0;
  } else if (g.out_off >= TSNP_RECORD_SIZE) {
    size_t whole = g.out_off / TSNP_RECORD_SIZE * TSNP_RECORD_SIZE;
    memmove(out, (char*)out + whole, g.out_len - whole);
    g.out_len -= whole;
    g.out_off -= whole;
  }
}

static int out_room(void) { return (int)(TS_BATCH - (g.out_len + TSNP_RECORD_SIZE - 1) / TSNP_RECORD_SIZE); }

static uint64_t cupti_unreturned(void);

/* The process's loss counts now, as a DROPS record. */
static struct tsnp_record drops_record(void) {
  return (struct tsnp_record){.kind = TSNP_DROPS,
                              .tid = gettid_u32(),
                              .t0 = mono_ns(),
                              .t1 = cupti_unreturned(),
                              .a0 = ring_drops(),
                              .a1 = atomic_load(&g.refused),
                              .a2 = g.unsent,
                              .seq = atomic_load(&g.act_dropped),
                              .task = atomic_load(&g.foreign)};
}

static void queue_drops(void) {
  uint64_t now[5] = {ring_drops(), atomic_load(&g.refused), g.unsent, atomic_load(&g.act_dropped),
                     atomic_load(&g.foreign)};
  if (!g.drops_dirty && memcmp(now, g.last_drops, sizeof now) == 0) return;
  if (g.fd < 0 || out_room() < 1) return;
  struct tsnp_record r = drops_record();
  memcpy((char*)out + g.out_len, &r, sizeof r);
  g.out_len += sizeof r;
  memcpy(g.last_drops, now, sizeof now);
  g.drops_dirty = 0;
}

/* Moves records from the rings to the socket (or discards them when there
 * is no collector) until the rings are empty, the socket is full, or
 * wait_ms have passed: a collector reading steadily but slower than the
 * rings fill would otherwise keep the drainer here, deaf to a flush and
 * to the exit's deadline. Returns whether the rings were left empty. */
static int drain(int wait_ms) {
  uint64_t end = mono_ns() + (uint64_t)wait_ms * 1000000u;
  for (int round = 0; round < 256; round++) {
    int more = 0;
    /* The batch's room is shared: each ring with records first gets an
     * equal part, then what is left goes to the rings in turn. Filled in
     * list order alone, a ring that always had a batch to give (CUPTI's
     * under a flood of kernels) starved those after it: a job's NVTX
     * ranges and NCCL operations were what it lost. */
    uint64_t busy = 0;
    for (struct ts_ring* r = atomic_load(&g.rings); r; r = r->next)
      busy += atomic_load_explicit(&r->head, memory_order_acquire) != atomic_load_explicit(&r->tail, memory_order_relaxed);
    uint64_t share = busy ? (uint64_t)out_room() / busy : 0;
    for (int pass = 0; pass < 2; pass++) {
      for (struct ts_ring* r = atomic_load(&g.rings); r; r = r->next) {
        uint64_t t = atomic_load_explicit(&r->tail, memory_order_relaxed);
        uint64_t h = atomic_load_explicit(&r->head, memory_order_acquire);
        uint64_t n = h - t;
        if (g.fd < 0) {
          g.unsent += n;
        } else {
          uint64_t room = (uint64_t)out_room();
          uint64_t take = pass == 0 && share < room ? share : room;
          if (n > take) {
            n = take;
            more |= pass == 1;
          }
          for (uint64_t i = 0; i < n; i++) {
            memcpy((char*)out + g.out_len, &r->recs[(t + i) & (g.ring_cap - 1)], TSNP_RECORD_SIZE);
            g.out_len += TSNP_RECORD_SIZE;
          }
        }
        atomic_store_explicit(&r->tail, t + n, memory_order_release);
      }
    }
    queue_drops();
    uint64_t now = mono_ns();
    send_out(now < end ? (int)((end - now + 999999) / 1000000u) : 0);
    /* A socket that stays full leaves records in the rings, where the
     * producers count what no longer fits: NCCL never waits on us. */
    if (g.out_len > g.out_off) return 0;
    if (!more) return 1;
    if (mono_ns() >= end) return 0;
  }
  return 0;
}

/* On the drainer, as it stops (finalize of the last communicator, or the
 * process exiting): what is still in the rings or the batch cannot go out
 * any more, and is counted as unsent. Where the stream is stuck (a
 * collector behind), even that count would be lost with it: the final
 * counts then go over a connection of their own, a hello and a DROPS
 * record (256 bytes into an empty socket), which the collector reads
 * apart from the first connection's backlog and adds to the same
 * process's. */
static void tally_at_stop(void) {
  uint64_t left = 0;
  for (struct ts_ring* r = atomic_load(&g.rings); r; r = r->next) {
    uint64_t t = atomic_load_explicit(&r->tail, memory_order_relaxed);
    uint64_t h = atomic_load_explicit(&r->head, memory_order_acquire);
    left += h - t;
    atomic_store_explicit(&r->tail, h, memory_order_release);
  }
  g.tally = 1;
  if (left == 0 && g.out_len <= g.out_off) return;
  g.unsent += left;
  int connected = g.fd >= 0;
  disconnect(); /* counts the batch's records as unsent */
  g.tally = 2;
  if (!connected || !g.path[0]) return;
  int fd = dial();
  g.tally = 3;
  if (fd < 0) return;
  struct {
    struct tsnp_hello h;
    struct tsnp_record d;
  } m;
  fill_hello(&m.h);
  m.d = drops_record();
  g.tally = send(fd, &m, sizeof m, MSG_NOSIGNAL | MSG_DONTWAIT) == (ssize_t)sizeof m ? 5 : 4;
  close(fd);
}

static void* drainer_main(void* arg) {
  (void)arg;
  pthread_mutex_lock(&g.mu);
  for (;;) {
    pthread_mutex_unlock(&g.mu);
    try_connect();
    pthread_mutex_lock(&g.mu);
    uint64_t wake = mono_ns() + g.interval_ns;
    struct timespec ts = {(time_t)(wake / 1000000000u), (long)(wake % 1000000000u)};
    while (!g.stop && g.flush_req == g.flush_done && mono_ns() < wake)
      if (pthread_cond_timedwait(&g.wake, &g.mu, &ts) == ETIMEDOUT) break;
    uint64_t req = g.flush_req, deadline = g.flush_deadline;
    pthread_mutex_unlock(&g.mu);

    try_connect();
    int flush = req != g.flush_done;
    if (flush) {
      /* A flush: drain until empty or the deadline. */
      for (;;) {
        uint64_t now = mono_ns();
        if (now >= deadline) break;
        int left = (int)((deadline - now) / 1000000u);
        if (drain(left < TS_SEND_WAIT_MS ? left : TS_SEND_WAIT_MS)) break;
      }
      g.drops_dirty = 1;
      queue_drops();
      uint64_t now = mono_ns();
      send_out(now < deadline ? (int)((deadline - now) / 1000000u) : 0);
    } else {
      drain(TS_SEND_WAIT_MS);
    }

    /* Stop after a flush when a stop is still asked for and no newer
     * flush is: a start since took it back (drainer_start), and then the
     * drainer goes on, its rings kept for the new communicator. Once
     * running is 0 a start waits for this thread to be gone. */
    pthread_mutex_lock(&g.mu);
    int stopping = flush && g.stop && g.flush_req == req;
    if (stopping) g.running = 0;
    pthread_mutex_unlock(&g.mu);
    if (stopping) tally_at_stop();
    pthread_mutex_lock(&g.mu);
    if (flush) {
      g.flush_done = req;
      pthread_cond_broadcast(&g.done);
    }
    if (stopping) break;
  }
  pthread_mutex_unlock(&g.mu);
  disconnect();
  pthread_mutex_lock(&g.mu);
  g.alive = 0;
  pthread_cond_broadcast(&g.done);
  pthread_mutex_unlock(&g.mu);
  return NULL;
}

/* Called with g.mu held. */
static void drainer_start(void) {
  if (g.running) {
    g.stop = 0; /* a stop asked for meanwhile is off: the drainer goes on */
    return;
  }
  /* A drainer still on its way out (a stop's flush that ran late) goes
   * first, within a bound; if it is still there, none starts now and the
   * next start tries again. */
  uint64_t until = mono_ns() + TS_FLUSH_MS * 1000000u;
  struct timespec ts = {(time_t)(until / 1000000000u), (long)(until % 1000000000u)};
  int cancel;
  pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &cancel); /* see flush_locked */
  while (g.alive && mono_ns() < until)
    if (pthread_cond_timedwait(&g.done, &g.mu, &ts) == ETIMEDOUT) break;
  pthread_setcancelstate(cancel, NULL);
  if (g.alive) return;
  g.stop = 0;
  g.next_connect = 0;
  pthread_attr_t attr;
  if (pthread_attr_init(&attr) != 0) return;
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old); /* signals stay with the application's threads */
  if (pthread_create(&g.thread, &attr, drainer_main, NULL) == 0) g.running = g.alive = 1;
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  pthread_attr_destroy(&attr);
}

/* Asks the drainer to send what is left, waiting until deadline; with
 * stop, the drainer exits afterwards (on its own: it is detached, and a
 * start before it has stopped takes the stop back). Several callers at
 * once (the last finalize and the exit hook) each wait for their own
 * flush; none joins or detaches a thread. Called with g.mu held. */
static void flush_locked(uint64_t deadline, int stop) {
  if (!g.running) return;
  uint64_t req = ++g.flush_req;
  g.flush_deadline = deadline;
  if (stop) g.stop = 1;
  pthread_cond_broadcast(&g.wake);
  /* With stop, a little past the deadline: the drainer's sending ends at
   * it, and its tally of what it could not send comes after. */
  uint64_t until = deadline + (stop ? TS_TALLY_MS * 1000000u : 0);
  struct timespec ts = {(time_t)(until / 1000000000u), (long)(until % 1000000000u)};
  /* The wait is no cancellation point: a thread the application cancels
   * here would end holding g.mu, and the exit hook would wait for it
   * forever. A pending cancel acts later, in the application's code. */
  int cancel;
  pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &cancel);
  while (g.flush_done < req && mono_ns() < until)
    if (pthread_cond_timedwait(&g.done, &g.mu, &ts) == ETIMEDOUT) break;
  pthread_setcancelstate(cancel, NULL);
  if (stop && g.flush_done < req) g.detached = 1; /* it missed the deadline: it stops when its wait ends */
}

/* Condition variables that time out on CLOCK_MONOTONIC, as every deadline here is. */
static void init_conds(void) {
  pthread_condattr_t a;
  pthread_condattr_init(&a);
  pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
  pthread_cond_init(&g.wake, &a);
  pthread_cond_init(&g.done, &a);
  pthread_condattr_destroy(&a);
}

static void cu_after_fork(void);
static uint64_t cu_label_push(const char* name);
static void cu_label_pop(uint64_t enclosing);

static void after_fork_child(void) {
  /* The drainer did not come along, and the communicators belong to the parent. */
  g.pid = getpid();
  pthread_mutex_init(&g.mu, NULL);
  init_conds();
  g.running = g.alive = g.stop = 0;
  g.detached = 0;
  g.ncomms = 0;
  g.flush_req = g.flush_done = 0;
  /* The losses so far are the parent's, and it reports them. */
  atomic_store(&g.refused, 0);
  atomic_store(&g.stale, 0);
  atomic_store(&g.foreign, 0);
  atomic_store(&g.act_dropped, 0);
  g.unsent = 0;
  memset(g.last_drops, 0, sizeof g.last_drops);
  if (g.fd >= 0) close(g.fd);
  g.fd = -1;
  g.out_len = g.out_off = 0;
  for (struct ts_ring* r = atomic_load(&g.rings); r; r = r->next) {
    atomic_store(&r->tail, atomic_load(&r->head)); /* the parent sends its own records */
    atomic_store(&r->dropped, 0);
  }
  /* The forking thread goes on in the child, under another thread id,
   * keeping its ring and its open NVTX ranges (the child pops them). The
   * NVTX hooks stay installed (g.nvtx stays set), but the child has no
   * drainer until it initialises a communicator: until then its records
   * wait in its rings, and what does not fit is counted as dropped. */
  if (tls_ring) tls_ring->tid = gettid_u32();
  /* CUPTI stays with the parent: the child neither flushes it at exit
   * nor takes a lock a CUPTI thread of the parent's held at the fork. */
  cu_after_fork();
}

/* A whole number from 1 to max in the environment, or def: a sign, a
 * value out of range or anything but digits is def, not wrapped. */
static uint64_t env_u64(const char* name, uint64_t def, uint64_t max) {
  const char* s = getenv(name);
  if (!s || *s < '0' || *s > '9') return def;
  errno = 0;
  char* end;
  unsigned long long v = strtoull(s, &end, 10);
  return *end || errno || v == 0 || v > max ? def : (uint64_t)v;
}

/* Called with g.mu held, once per load of the library. */
static void set_up(void) {
  if (g.set_up) return;
  g.set_up = 1;
  init_conds();
  uint64_t cap = env_u64("TRAINSCOPE_NCCL_RING_RECORDS", TS_DEFAULT_RING, TS_MAX_RING), p = 16;
  while (p < cap) p <<= 1;
  g.ring_cap = (uint32_t)p;
  g.interval_ns = env_u64("TRAINSCOPE_NCCL_DRAIN_MS", 5, 1000) * 1000000u;
  g.world_rank1 = launcher_rank() + 1;
  g.local_size1 = launcher_local_size() + 1;
  const char* path = getenv("TRAINSCOPE_NCCL_SOCKET");
  if (path && strlen(path) < sizeof g.path) strcpy(g.path, path);
  g.pid = getpid();
  /* TRAINSCOPE_NCCL_PROXY=0: no proxy operations (a p2p then has no
   * transfer end). */
  const char* proxy = getenv("TRAINSCOPE_NCCL_PROXY");
  g.mask = TS_MASK;
  if (proxy && strcmp(proxy, "0") == 0) g.mask &= ~ncclProfileProxyOp;
  g.key_ok = pthread_key_create(&g.key, ring_release) == 0;
  pthread_atfork(NULL, NULL, after_fork_child);
  /* Touch the slot pools now rather than on the event path. */
  memset(&task_pool, 0, sizeof task_pool);
  memset(&kernel_pool, 0, sizeof kernel_pool);
}

static void debug_line(void);

__attribute__((destructor)) static void at_unload(void) {
  /* Process exit without ncclCommDestroy (common): send what is left. */
  pthread_mutex_lock(&g.mu);
  flush_locked(mono_ns() + TS_FLUSH_MS * 1000000u, 1);
  pthread_mutex_unlock(&g.mu);
  debug_line();
}

/* ---- The NCCL interface. ---- */

static void comm_record(struct tsnp_record* r, const struct ts_comm* c, uint16_t kind) {
  memset(r, 0, sizeof *r);
  r->kind = kind;
  r->comm_hash = c->hash;
  r->rank = c->rank;
  r->nranks = c->nranks;
  r->peer = -1;
  memcpy(r->comm_name, c->name, sizeof r->comm_name);
}

/* The CUDA device of the calling thread's current context, through the
 * driver already loaded in the process (nothing is loaded here), and its
 * UUID (left zero where the driver does not say); -1 when there is none.
 * NCCL initialises a communicator on its device. The UUID names the GPU
 * across processes, whatever CUDA_VISIBLE_DEVICES made its ordinal: the
 * collector tells processes sharing a GPU by it. */
static int current_device(uint8_t uuid[16]) {
  void* cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (!cuda) return -1;
  int dev = -1;
  int (*get)(int*) = (int (*)(int*))dlsym(cuda, "cuCtxGetDevice");
  if (!get || get(&dev) != 0) dev = -1;
  int (*get_uuid)(uint8_t*, int) = (int (*)(uint8_t*, int))dlsym(cuda, "cuDeviceGetUuid_v2");
  if (!get_uuid) get_uuid = (int (*)(uint8_t*, int))dlsym(cuda, "cuDeviceGetUuid");
  uint8_t u[16] = {0};
  if (dev >= 0 && get_uuid && get_uuid(u, dev) == 0) memcpy(uuid, u, sizeof u);
  dlclose(cuda);
  return dev;
}

/* NCCL's version code (ncclGetVersion: 22809 for 2.28.9), asked of the
 * NCCL already loaded in the process (nothing is loaded here): a shared
 * libnccl.so.2 found by name whatever scope it was loaded in (PyTorch's
 * is local to its extension module), else a symbol of the global scope
 * (NCCL linked into the program); 0 where neither answers. Asked once. */
static int nccl_version(void) {
  static _Atomic int cached = -1;
  int v = atomic_load(&cached);
  if (v >= 0) return v;
  typedef int (*get_version_fn)(int*);
  get_version_fn get = NULL;
  void* nccl = dlopen("libnccl.so.2", RTLD_NOW | RTLD_NOLOAD);
  if (nccl) get = (get_version_fn)dlsym(nccl, "ncclGetVersion");
  if (!get) get = (get_version_fn)dlsym(RTLD_DEFAULT, "ncclGetVersion");
  v = 0;
  if (!get || get(&v) != 0 || v < 0) v = 0;
  if (nccl) dlclose(nccl); /* NOLOAD took a reference; the library stays loaded */
  atomic_store(&cached, v);
  return v;
}

static ncclResult_t ts_init(void** context, uint64_t comm_id, int* mask, const char* name, int nnodes, int nranks,
                            int rank, ncclDebugLogger_t logfn) {
  *context = NULL;
  if (nranks < 0) nranks = 0;
  struct ts_comm* c = calloc(1, sizeof *c + 2 * (size_t)nranks * sizeof c->p2p_seq[0]);
  if (!c) {
    *mask = 0; /* no events, and training goes on */
    return ncclSuccess;
  }
  c->hash = comm_id;
  c->rank = rank;
  c->nranks = nranks;
  c->nnodes = nnodes;
  if (name) memcpy(c->name, name, strnlen(name, sizeof c->name));
  pthread_mutex_lock(&g.mu);
  set_up();
  drainer_start();
  g.ncomms++;
  int connected_path = g.path[0] != 0;
  pthread_mutex_unlock(&g.mu);
  *mask = g.mask;
  *context = c;
  struct tsnp_record r;
  comm_record(&r, c, TSNP_COMM_INIT);
  r.t0 = mono_ns();
  r.nnodes = nnodes;
  uint8_t uuid[16] = {0};
  r.peer = current_device(uuid);
  r.a0 = (uint64_t)nccl_version();
  memcpy(&r.a1, uuid, 8); /* little-endian hosts: the bytes in order */
  memcpy(&r.a2, uuid + 8, 8);
  push(&r);
  if (logfn)
    logfn(NCCL_LOG_INFO, NCCL_INIT, __FILE__, __LINE__, "trainscope profiler: comm %lx rank %d/%d, records to %s",
          (unsigned long)comm_id, rank, nranks, connected_path ? g.path : "nowhere (TRAINSCOPE_NCCL_SOCKET unset)");
  return ncclSuccess;
}

static ncclResult_t ts_init_v4(void** context, int* mask, const char* name, uint64_t hash, int nnodes, int nranks, int rank,
                               ncclDebugLogger_t logfn) {
  return ts_init(context, hash, mask, name, nnodes, nranks, rank, logfn);
}

static ncclResult_t ts_finalize(void* context) {
  struct ts_comm* c = context;
  if (!c) return ncclSuccess;
  struct tsnp_record r;
  comm_record(&r, c, TSNP_COMM_FINALIZE);
  r.t0 = mono_ns();
  push(&r);
  pthread_mutex_lock(&g.mu);
  /* The last communicator: send what is left, and stop the drainer unless
   * NVTX ranges may still come (then the exit hook stops it). */
  if (--g.ncomms == 0) flush_locked(mono_ns() + TS_FLUSH_MS * 1000000u, !g.nvtx && !g.cupti);
  pthread_mutex_unlock(&g.mu);
  free(c);
  return ncclSuccess;
}

static void start_coll(struct ts_comm* c, void** handle, uint64_t seq, const char* func, size_t count, int root,
                       const char* dtype, uint8_t nch, uint8_t nwarps, const char* algo, const char* proto) {
  struct tsnp_record r;
  comm_record(&r, c, TSNP_COLLECTIVE);
  r.t0 = mono_ns();
  r.seq = seq;
  r.func = func_code(func);
  uint64_t size;
  r.dtype = dtype_code(dtype, &size);
  r.a0 = count;
  r.a1 = count * size;
  if (r.func == TSNP_FUNC_BROADCAST || r.func == TSNP_FUNC_REDUCE || r.func == TSNP_FUNC_GATHER ||
      r.func == TSNP_FUNC_SCATTER)
    r.peer = root;
  r.nchannels = nch;
  r.nwarps = nwarps;
  r.algo = algo_code(algo);
  r.proto = proto_code(proto);
  ring_get(); /* a thread's first event allocates its ring here, not at the stop */
  *handle = pool_put(&task_pool, TAG_COLL, &r, 1);
  if (!*handle) atomic_fetch_add_explicit(&g.refused, 1, memory_order_relaxed);
}

/* ---- API groups: which ncclGroupStart/ncclGroupEnd block a p2p came from. ----
 * NCCL 2.28 (profiler interface v5) starts an event for each outermost
 * group block a thread opens (GroupApi) and for each ncclSend/ncclRecv
 * call in it (P2pApi, whose parent is the group's event), and gives each
 * p2p task the handle of its call's event as parent. Their handles are
 * not slots but a number tagged as such: the group's, counted per
 * process, shared by its calls' handles. A p2p carries it in a2, so that
 * the collector can tell one all-to-all (a send and a receive with every
 * rank, in one block) from separate transfers. Nothing is stored: stop
 * and record-state calls on these handles find no slot and do nothing. */
static _Atomic uint64_t api_groups;

static void* api_handle(uint64_t n, int tag) { return (void*)(uintptr_t)(n << 4 | (uint64_t)tag); }

/* The number a handle of ours with tag carries; 0 for any other handle. */
static uint64_t api_number(const void* h, int tag) {
  uint64_t v = (uint64_t)(uintptr_t)h;
  return (v & 15) == (uint64_t)tag ? v >> 4 : 0;
}

static uint64_t new_api_group(void) { return atomic_fetch_add_explicit(&api_groups, 1, memory_order_relaxed) + 1; }

static void start_p2p(struct ts_comm* c, void** handle, const char* func, size_t count, const char* dtype, int peer,
                      uint8_t nch, uint64_t group) {
  struct tsnp_record r;
  comm_record(&r, c, TSNP_P2P);
  r.t0 = mono_ns();
  r.func = func_code(func);
  uint64_t size;
  r.dtype = dtype_code(dtype, &size);
  r.a0 = count;
  r.a1 = count * size;
  r.peer = peer;
  r.nchannels = nch;
  r.a2 = group;
  _Atomic uint64_t* ctr = &c->p2p_other;
  if (peer >= 0 && peer < c->nranks) ctr = &c->p2p_seq[(r.func == TSNP_FUNC_RECV ? c->nranks : 0) + peer];
  r.seq = atomic_fetch_add_explicit(ctr, 1, memory_order_relaxed);
  ring_get();
  *handle = pool_put(&task_pool, TAG_P2P, &r, 1);
  if (!*handle) atomic_fetch_add_explicit(&g.refused, 1, memory_order_relaxed);
}

/* A kernel channel's parent is the handle we returned for its collective
 * or p2p. It arrives on a proxy thread, possibly long after the parent
 * stopped (or, for a CUDA graph replay, after its slot was reused), so it
 * is checked by generation instead of being trusted. */
static void start_kernel(void** handle, void* parent, uint8_t channel, uint64_t gpu_start) {
  struct tsnp_record r;
  int tag;
  if (!task_get(parent, 1u << TAG_COLL | 1u << TAG_P2P, &r, &tag)) {
    atomic_fetch_add_explicit(&g.refused, 1, memory_order_relaxed);
    return;
  }
  r.kind = TSNP_KERNEL_CHANNEL;
  r.parent_kind = tag == TAG_COLL ? TSNP_COLLECTIVE : TSNP_P2P;
  r.channel = channel;
  r.t0 = gpu_start;
  r.t1 = 0;
  r.a0 = mono_ns();
  r.a1 = 0;
  ring_get();
  *handle = pool_put(&kernel_pool, TAG_KERNEL, &r, 0);
  if (!*handle) atomic_fetch_add_explicit(&g.refused, 1, memory_order_relaxed);
}

/* A proxy operation moves a p2p's data over a network transport on a
 * proxy thread: its stop is when that transfer is done, which for a send
 * can be well after the kernel's channels stopped (they only handed the
 * data over). It starts when the host posts it, long before the GPU runs
 * the kernel, so its start times nothing; the start is still sent, so
 * that the collector knows to wait for the stop. With PXN a proxy runs
 * other processes' operations too, whose parent pointers mean nothing
 * here: only this process's are taken, and the others are counted apart
 * (foreign: their own process never sees them). Collectives' proxy
 * operations are not needed (their kernels wait for the data) and are
 * left out, no loss. The start goes out only once the operation has its
 * slot, so that a stop can follow it. */
static void start_proxy(void** handle, void* parent, pid_t pid, uint8_t channel, int is_send) {
  struct tsnp_record r;
  int tag;
  if (pid != g.pid) {
    atomic_fetch_add_explicit(&g.foreign, 1, memory_order_relaxed);
    return;
  }
  if (!task_get(parent, 1u << TAG_COLL | 1u << TAG_P2P, &r, &tag)) {
    atomic_fetch_add_explicit(&g.refused, 1, memory_order_relaxed);
    return;
  }
  if (tag != TAG_P2P) return;
  r.kind = TSNP_PROXY_OP;
  r.parent_kind = TSNP_P2P;
  r.channel = channel;
  r.t0 = mono_ns();
  r.t1 = 0;
  r.a0 = is_send != 0;
  r.a1 = 0;
  *handle = pool_put(&kernel_pool, TAG_PROXY, &r, 0);
  if (!*handle) {
    atomic_fetch_add_explicit(&g.refused, 1, memory_order_relaxed);
    return;
  }
  push(&r);
}

static ncclResult_t ts_start_v5(void* context, void** handle, ncclProfilerEventDescr_v5_t* d) {
  *handle = NULL;
  struct ts_comm* c = context;
  if (!d) return ncclSuccess;
  switch (d->type) {
  case ncclProfileColl:
    if (c)
      start_coll(c, handle, d->coll.seqNumber, d->coll.func, d->coll.count, d->coll.root, d->coll.datatype,
                 d->coll.nChannels, d->coll.nWarps, d->coll.algo, d->coll.proto);
    break;
  case ncclProfileP2p:
    if (c)
      start_p2p(c, handle, d->p2p.func, d->p2p.count, d->p2p.datatype, d->p2p.peer, d->p2p.nChannels,
                api_number(d->parentObj, TAG_P2P_API));
    break;
  case ncclProfileKernelCh:
    start_kernel(handle, d->parentObj, d->kernelCh.channelId, d->kernelCh.pTimer);
    break;
  case ncclProfileProxyOp:
    start_proxy(handle, d->parentObj, d->proxyOp.pid, d->proxyOp.channelId, d->proxyOp.isSend);
    break;
  case ncclProfileGroupApi:
    *handle = api_handle(new_api_group(), TAG_GROUP_API);
    break;
  case ncclProfileP2pApi: {
    /* A call outside any group event of ours is a block of its own. */
    uint64_t n = api_number(d->parentObj, TAG_GROUP_API);
    *handle = api_handle(n ? n : new_api_group(), TAG_P2P_API);
    break;
  }
  }
  return ncclSuccess;
}

static ncclResult_t ts_start_v4(void* context, void** handle, ncclProfilerEventDescr_v4_t* d) {
  *handle = NULL;
  struct ts_comm* c = context;
  if (!d) return ncclSuccess;
  switch (d->type) {
  case ncclProfileColl:
    if (c)
      start_coll(c, handle, d->coll.seqNumber, d->coll.func, d->coll.count, d->coll.root, d->coll.datatype,
                 d->coll.nChannels, d->coll.nWarps, d->coll.algo, d->coll.proto);
    break;
  case ncclProfileP2p:
    if (c) start_p2p(c, handle, d->p2p.func, d->p2p.count, d->p2p.datatype, d->p2p.peer, d->p2p.nChannels, 0);
    break;
  case ncclProfileKernelCh:
    start_kernel(handle, d->parentObj, d->kernelCh.channelId, d->kernelCh.pTimer);
    break;
  case ncclProfileProxyOp:
    start_proxy(handle, d->parentObj, d->proxyOp.pid, d->proxyOp.channelId, d->proxyOp.isSend);
    break;
  }
  return ncclSuccess;
}

/* A stop sends the event's record. A task slot, once stopped, still
 * serves as its kernel channels' and proxy operations' parent; a kernel
 * slot is done with. A handle whose slot moved on, or whose event already
 * stopped, is refused and counted: its record is lost, or was sent. */
static ncclResult_t ts_stop(void* handle) {
  struct tsnp_record r;
  uint64_t idx, gen;
  int tag;
  if (handle_slot(handle, 1u << TAG_COLL | 1u << TAG_P2P, &idx, &gen, &tag)) {
    struct ts_slot* s = &task_pool.slots[idx];
    uint64_t live = gen << 2 | SLOT_LIVE;
    if (!slot_read(s, gen, 0, &r) ||
        !atomic_compare_exchange_strong_explicit(&s->seq, &live, gen << 2 | SLOT_STOPPED, memory_order_relaxed,
                                                 memory_order_relaxed)) {
      refuse_stale();
      return ncclSuccess;
    }
    r.t1 = mono_ns();
    push(&r);
  } else if (handle_slot(handle, 1u << TAG_KERNEL | 1u << TAG_PROXY, &idx, &gen, &tag)) {
    struct ts_slot* s = &kernel_pool.slots[idx];
    if (!slot_take(s, gen, &r)) {
      refuse_stale();
      return ncclSuccess;
    }
    atomic_store_explicit(&s->seq, gen << 2 | SLOT_STOPPED, memory_order_release);
    if (tag == TAG_PROXY) r.t1 = mono_ns();
    push(&r);
  }
  return ncclSuccess;
}

static ncclResult_t ts_record_state(void* handle, ncclProfilerEventState_t state, ncclProfilerEventStateArgs_v5_t* args) {
  struct tsnp_record r;
  uint64_t idx, gen;
  if (state != ncclProfilerKernelChStop || !args) return ncclSuccess;
  if (!handle_slot(handle, 1u << TAG_KERNEL, &idx, &gen, NULL)) return ncclSuccess;
  uint64_t seen = mono_ns();
  struct ts_slot* s = &kernel_pool.slots[idx];
  if (!slot_take(s, gen, &r)) {
    refuse_stale();
    return ncclSuccess;
  }
  r.t1 = args->kernelCh.pTimer;
  r.a1 = seen;
  slot_fill(s, gen << 2 | SLOT_LIVE, &r);
  return ncclSuccess;
}

TS_EXPORT ncclProfiler_v5_t ncclProfiler_v5 = {
    .name = "trainscope",
    .init = ts_init,
    .startEvent = ts_start_v5,
    .stopEvent = ts_stop,
    .recordEventState = ts_record_state,
    .finalize = ts_finalize,
};

TS_EXPORT ncclProfiler_v4_t ncclProfiler_v4 = {
    .name = "trainscope",
    .init = ts_init_v4,
    .startEvent = ts_start_v4,
    .stopEvent = ts_stop,
    .recordEventState = ts_record_state,
    .finalize = ts_finalize,
};

/* ---- The NVTX interface. ----
 *
 * NVTX calls these on the application's threads, in place of its own
 * no-op functions. A thread's ranges nest: each thread keeps a stack of
 * its open ranges in its ring (struct ts_ring), tracking TS_NVTX_LEVELS
 * levels. A push at depth 0 sends a START record; every pop of a tracked
 * range sends the whole range; ranges deeper than that are counted
 * (nvtx_lost) and their pops only unwind the depth. Like the NCCL events,
 * a push or a pop reads the clock, copies the name and pushes onto the
 * ring: no lock, no allocation and no system call once the thread has a
 * ring (a thread's first push allocates it, as a first NCCL event does).
 *
 * Which calls are taken (the default domain only, one stack per thread,
 * shared by all of them as NVTX nests them):
 *   nvtxRangePushA, nvtxRangePushW, nvtxRangePushEx, nvtxRangePop, and
 *   nvtxDomainRangePushEx / nvtxDomainRangePop with the NULL (default)
 *   domain. A range's name is its ASCII message; a range named any other
 *   way (nvtxRangePushW, a UNICODE or REGISTERED message, none at all) is
 *   sent as "(unnamed)".
 * Ranges of other domains (NCCL's own "NCCL" domain, nvtx3::scoped_range_in
 *   of a named domain, ...) are ignored: not pushed on the stack, their
 *   pops not taken, both returning NVTX_NO_PUSH_POP_TRACKING as without a
 *   tool. For that nvtxDomainCreateA and nvtxDomainCreateW are hooked too,
 *   returning one non-NULL handle for every named domain: a slot the tool
 *   leaves alone makes the creator return NULL, which is the default
 *   domain, and named domains' ranges would be taken for the default's.
 * Everything else (marks, start/end ranges, naming, registered strings,
 * domain destruction) is left to NVTX, which makes it a no-op.
 *
 * Return values follow NVTX: a push returns the zero-based level of the
 * new range, a pop the level of the range it ended, and a pop with no
 * range open on the thread -1 (nothing is sent).
 */

struct ts_nvtx_domain {
  char unused;
};
static struct ts_nvtx_domain named_domain; /* the handle of every domain but the default */

static _Atomic int nvtx_ready; /* set up done: the hooks may use g */

static const char unnamed[] = "(unnamed)";

static void range_send(struct ts_ring* r, const struct ts_frame* f, int32_t depth, uint64_t t1, uint16_t flags) {
  union {
    struct tsnp_record rec;
    struct tsnp_range range;
  } u;
  memset(&u, 0, sizeof u);
  u.range.kind = TSNP_RANGE;
  u.range.flags = flags | (f->name_len > sizeof f->name ? TSNP_RANGE_TRUNCATED : 0);
  u.range.domain = 0;
  u.range.ordinal = f->ordinal;
  u.range.lost = r->nvtx_lost;
  u.range.t0 = f->t0;
  u.range.t1 = t1;
  u.range.depth = depth;
  u.range.name_len = f->name_len;
  memcpy(u.range.name, f->name, sizeof u.range.name);
  push(&u.rec);
}

static int range_push(const char* name) {
  if (!atomic_load_explicit(&nvtx_ready, memory_order_acquire)) return NVTX_NO_PUSH_POP_TRACKING;
  struct ts_ring* r = ring_get();
  if (!r) { /* the range goes unrecorded: counted */
    atomic_fetch_add_explicit(&g.refused, 1, memory_order_relaxed);
    return NVTX_NO_PUSH_POP_TRACKING;
  }
  int32_t depth = r->nvtx_depth;
  if (depth == INT32_MAX) return -1;
  r->nvtx_depth = depth + 1;
  uint64_t ordinal = ++r->nvtx_pushes;
  if (depth >= TS_NVTX_LEVELS) {
    r->nvtx_lost++;
    return depth;
  }
  struct ts_frame* f = &r->nvtx[depth];
  size_t n = strlen(name);
  f->ordinal = ordinal;
  f->name_len = n > UINT32_MAX ? UINT32_MAX : (uint32_t)n;
  if (n >= sizeof f->name) {
    memcpy(f->name, name, sizeof f->name);
  } else {
    memcpy(f->name, name, n);
    memset(f->name + n, 0, sizeof f->name - n);
  }
  f->label = cu_label_push(name);
  f->t0 = mono_ns();
  if (depth == 0) range_send(r, f, 0, 0, TSNP_RANGE_START);
  return depth;
}

static int range_pop(void) {
  if (!atomic_load_explicit(&nvtx_ready, memory_order_acquire)) return NVTX_NO_PUSH_POP_TRACKING;
  struct ts_ring* r = tls_ring; /* a thread with no ring has pushed nothing */
  if (!r) return tls_ring_failed ? NVTX_NO_PUSH_POP_TRACKING : -1;
  if (r->nvtx_depth <= 0) return -1;
  int32_t depth = --r->nvtx_depth;
  if (depth < TS_NVTX_LEVELS) {
    if (r->nvtx[depth].label) {
      uint64_t enclosing = 0; /* the labels in force again */
      for (int32_t d = depth - 1; d >= 0 && !enclosing; d--) enclosing = r->nvtx[d].label;
      cu_label_pop(enclosing);
    }
    range_send(r, &r->nvtx[depth], depth, mono_ns(), 0);
  }
  return depth;
}

/* The name of a range pushed with attributes: its ASCII message. */
static const char* attr_name(const nvtxEventAttributes_t* a) {
  if (!a || (a->size != 0 && a->size < offsetof(nvtxEventAttributes_t, message) + sizeof a->message)) return unnamed;
  if (a->messageType != NVTX_MESSAGE_TYPE_ASCII || !a->message.ascii) return unnamed;
  return a->message.ascii;
}

static int nvtx_push_a(const char* message) { return range_push(message ? message : unnamed); }

static int nvtx_push_w(const wchar_t* message) {
  (void)message;
  return range_push(unnamed);
}

static int nvtx_push_ex(const nvtxEventAttributes_t* a) { return range_push(attr_name(a)); }

static int nvtx_pop(void) { return range_pop(); }

static int nvtx_domain_push_ex(nvtxDomainHandle_t domain, const nvtxEventAttributes_t* a) {
  return domain ? NVTX_NO_PUSH_POP_TRACKING : range_push(attr_name(a));
}

static int nvtx_domain_pop(nvtxDomainHandle_t domain) { return domain ? NVTX_NO_PUSH_POP_TRACKING : range_pop(); }

static nvtxDomainHandle_t nvtx_domain_create_a(const char* name) {
  (void)name;
  return &named_domain;
}

static nvtxDomainHandle_t nvtx_domain_create_w(const wchar_t* name) {
  (void)name;
  return &named_domain;
}

struct ts_hook {
  unsigned id;
  NvtxFunctionPointer fn;
};

/* Whether every slot of hooks is in the table. */
static int hooks_fit(NvtxFunctionTable table, unsigned size, const struct ts_hook* hooks, size_t n) {
  if (!table) return 0;
  for (size_t i = 0; i < n; i++)
    if (hooks[i].id >= size || !table[hooks[i].id]) return 0;
  return 1;
}

static void hooks_install(NvtxFunctionTable table, const struct ts_hook* hooks, size_t n) {
  for (size_t i = 0; i < n; i++) *table[hooks[i].id] = hooks[i].fn;
}

/* NVTX's entry point, called once per NVTX instance in the process (each
 * library built with the NVTX v3 headers has its own), on whichever
 * thread made that instance's first call, possibly while another instance
 * or NCCL is initialising the plugin on another thread. The CORE hooks
 * are all or nothing: without them it returns 0, which turns that NVTX
 * instance off. The CORE2 hooks (domain ranges and domain creation) are
 * installed together when all of their slots exist. */
TS_EXPORT int InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get_export_table) {
  static const struct ts_hook core[] = {
      {NVTX_CBID_CORE_RangePushA, (NvtxFunctionPointer)nvtx_push_a},
      {NVTX_CBID_CORE_RangePushW, (NvtxFunctionPointer)nvtx_push_w},
      {NVTX_CBID_CORE_RangePushEx, (NvtxFunctionPointer)nvtx_push_ex},
      {NVTX_CBID_CORE_RangePop, (NvtxFunctionPointer)nvtx_pop},
  };
  static const struct ts_hook core2[] = {
      {NVTX_CBID_CORE2_DomainRangePushEx, (NvtxFunctionPointer)nvtx_domain_push_ex},
      {NVTX_CBID_CORE2_DomainRangePop, (NvtxFunctionPointer)nvtx_domain_pop},
      {NVTX_CBID_CORE2_DomainCreateA, (NvtxFunctionPointer)nvtx_domain_create_a},
      {NVTX_CBID_CORE2_DomainCreateW, (NvtxFunctionPointer)nvtx_domain_create_w},
  };
  if (!get_export_table) return 0;
  const NvtxExportTableCallbacks* cb = get_export_table(NVTX_ETID_CALLBACKS);
  if (!cb || cb->struct_size < sizeof *cb || !cb->GetModuleFunctionTable) return 0;
  NvtxFunctionTable t1 = NULL, t2 = NULL;
  unsigned n1 = 0, n2 = 0;
  if (!cb->GetModuleFunctionTable(NVTX_CB_MODULE_CORE, &t1, &n1) || !hooks_fit(t1, n1, core, sizeof core / sizeof core[0]))
    return 0;
  int with_core2 = cb->GetModuleFunctionTable(NVTX_CB_MODULE_CORE2, &t2, &n2) &&
                   hooks_fit(t2, n2, core2, sizeof core2 / sizeof core2[0]);

  /* Set up before any hook can run: once a slot is written, the
   * instance's other threads may call it. */
  pthread_mutex_lock(&g.mu);
  set_up();
  drainer_start();
  g.nvtx = 1;
  pthread_mutex_unlock(&g.mu);
  atomic_store_explicit(&nvtx_ready, 1, memory_order_release);

  hooks_install(t1, core, sizeof core / sizeof core[0]);
  if (with_core2) hooks_install(t2, core2, sizeof core2 / sizeof core2[0]);
  return 1;
}

/* ---- The CUDA interface: kernels, copies and memsets, through CUPTI. ----
 *
 * The same library is a CUDA injection library (CUDA_INJECTION64_PATH):
 * the driver calls InitializeInjection once, in cuInit, before the process
 * has a context. It opens CUPTI, has it time every kernel, memory copy and
 * memset on the device into activity buffers of ours (bounded: at most
 * TS_CUPTI_BUFFERS of TS_CUPTI_BUFFER bytes; beyond them CUPTI drops and
 * counts), and has CUPTI take its timestamps on CLOCK_MONOTONIC, the
 * plugin's clock. CUPTI hands full buffers, and every TS_CUPTI_FLUSH_MS
 * those whose records are complete, to a thread of its own, which turns
 * them into ACTIVITY records in its ring. Nothing runs on the
 * application's launch path but CUPTI's own recording, and, once per
 * buffer, the allocation of the next one. NCCL's kernels are left out:
 * its operations come through the NCCL interface. TRAINSCOPE_CUPTI=0
 * turns tracing off; TRAINSCOPE_CUPTI_PATH names the library to use. */

static struct {
  pthread_mutex_t mu; /* the name table; taken on CUPTI's delivering thread only */
  cuptiActivityGetNextRecord_t next;
  cuptiActivityFlushAll_t flush;
  cuptiActivityGetNumDroppedRecords_t dropped;
  int monotonic;
  pid_t pid;           /* the process that started tracing */
  _Atomic int buffers; /* buffers CUPTI holds */
  _Atomic uint64_t exit_by; /* at exit: when deliveries stop waiting for room in a ring */
  _Atomic int delivering;   /* buffers being read now */
  uint32_t names;      /* numbers given */
  /* Counts for TRAINSCOPE_NCCL_DEBUG's line at exit: where records went. */
  _Atomic uint64_t n_read, n_kernels, n_untimed, n_queued, n_full, n_reported, n_refused, n_delivered;
  struct ts_name {
    const char* ptr; /* CUPTI's name, shared by every record of the kernel */
    uint64_t hash;   /* of the text: a module unloaded and another loaded may reuse the address */
    uint32_t id;     /* 0: NCCL's kernel, not sent */
    uint64_t epoch;  /* the connection it was last sent on; TS_UNSENT: a piece was lost, send it again */
  } table[TS_NAMES];
} cu = {.mu = PTHREAD_MUTEX_INITIALIZER};

/* ---- Labels: the forward or backward work a kernel was launched for. ----
 *
 * A job that names its NVTX ranges after the pipeline work inside them
 * ("forward chunk 1 microbatch 3", "bwd_mb3": phase_label) has every
 * kernel launched inside such a range carry its labels. From the first
 * such range on, CUPTI calls the plugin back as each kernel launch (and
 * CUDA graph launch) begins, on the launching thread, with the call's
 * correlation id, which the kernel's activity record will carry; the
 * callback notes the labels in force (lab.corr, by correlation id): those
 * of the thread's innermost labelled range, or, on a thread with none,
 * those last pushed or popped in the process (PyTorch's autograd launches
 * a backward pass's kernels on a thread of its own while the thread that
 * called backward() waits inside its range). The delivering thread reads
 * them back as the kernel's record comes, which is after its launch. A job
 * that names no such range pays nothing: the plugin does not subscribe.
 * TRAINSCOPE_CUPTI_LABELS=0 turns labels off. */

static struct {
  _Atomic int on;   /* labels may be had: CUPTI has the callback API, and they are not turned off */
  _Atomic int once; /* the plugin subscribed (or tried to) */
  cuptiSubscribe_t subscribe;
  cuptiEnableCallback_t enable;
  CUpti_SubscriberHandle subscriber;
  _Atomic uint64_t current; /* the labels last pushed or popped in the process (phase_label) */
  /* correlation id << 32 | the labels of its launch, packed (pack_label) */
  _Atomic uint64_t corr[TS_CORRELATIONS];
} lab;

/* The labels in force on this thread: its innermost labelled range's. */
static __thread uint64_t tls_label;

static int lower(int c) { return c >= 'A' && c <= 'Z' ? c + ('a' - 'A') : c; }
static int is_letter(int c) { return lower(c) >= 'a' && lower(c) <= 'z'; }
static int is_digit(int c) { return c >= '0' && c <= '9'; }

/* The length of word w (lower case) where s starts with it in any case,
 * not followed by a letter; else 0. */
static size_t word_at(const char* s, const char* w) {
  size_t i = 0;
  for (; w[i]; i++)
    if (lower((unsigned char)s[i]) != w[i]) return 0;
  return is_letter((unsigned char)s[i]) ? 0 : i;
}

/* The number after a key: separators (space _ - = : #), then digits not
 * followed by a letter; -1 where there is none. */
static int64_t number_after(const char* s) {
  while (*s == ' ' || *s == '_' || *s == '-' || *s == '=' || *s == ':' || *s == '#') s++;
  if (!is_digit((unsigned char)*s)) return -1;
  int64_t v = 0;
  for (; is_digit((unsigned char)*s); s++)
    if ((v = v * 10 + (*s - '0')) > INT32_MAX) return -1;
  return is_letter((unsigned char)*s) ? -1 : v;
}

static const char* const forward_words[] = {"forward", "fwd"};
static const char* const backward_words[] = {"backward", "bwd"};
static const char* const chunk_keys[] = {"chunk", "vpp"};
static const char* const microbatch_keys[] = {"microbatch", "micro_batch", "micro-batch", "mb"};

static size_t any_word(const char* s, const char* const* words, size_t n) {
  for (size_t i = 0; i < n; i++) {
    size_t k = word_at(s, words[i]);
    if (k) return k;
  }
  return 0;
}

/* The labels a range's name gives the work inside it, packed in 64 bits:
 * bit 63 set, the phase (TSNP_PHASE_*) in bits 48–49, the
 * chunk in bits 32–47 (0xffff: none), the microbatch in bits 0–31
 * (0xffffffff: none); 0 where the name names no forward or backward
 * work. The name starts with forward, fwd, backward or bwd (any case, not
 * followed by a letter: "forward_step" but not "forwarding") and does not
 * name the other phase later ("forward_backward_func" is a whole step).
 * A number after "chunk" or "vpp" is the chunk, one after "microbatch",
 * "micro_batch", "micro-batch" or "mb" the microbatch; a number right
 * after the phase ("forward 3", "bwd_3") is the microbatch too where no
 * key gives it. Keys start a word: after the start or a character that is
 * neither a letter nor a digit. */
static uint64_t phase_label(const char* name) {
  while (*name == ' ') name++;
  uint64_t phase = TSNP_PHASE_FORWARD;
  const char* const* other = backward_words;
  size_t k = any_word(name, forward_words, 2);
  if (!k) {
    phase = TSNP_PHASE_BACKWARD;
    other = forward_words;
    k = any_word(name, backward_words, 2);
  }
  if (!k) return 0;
  const char* rest = name + k;
  int64_t chunk = -1, mb = number_after(rest);
  for (const char* p = rest; *p; p++) {
    if (p > name && (is_letter((unsigned char)p[-1]) || is_digit((unsigned char)p[-1]))) continue;
    if (any_word(p, other, 2)) return 0;
    size_t n = any_word(p, chunk_keys, 2);
    if (n && number_after(p + n) >= 0) chunk = number_after(p + n);
    n = any_word(p, microbatch_keys, 4);
    if (n && number_after(p + n) >= 0) mb = number_after(p + n);
  }
  if (chunk > INT16_MAX) chunk = -1;
  return 1ull << 63 | phase << 48 | (uint64_t)(chunk < 0 ? 0xffffu : (uint16_t)chunk) << 32 |
         (mb < 0 ? 0xffffffffu : (uint32_t)mb);
}

/* A label (phase_label) in 32 bits: bit 31 set, the phase in bits 29–30,
 * the chunk in bits 18–28 (0x7ff: none), the microbatch in bits 0–17
 * (0x3ffff: none; larger numbers are none too). */
static uint32_t pack_label(uint64_t label) {
  if (!label) return 0;
  uint32_t chunk = (uint32_t)(label >> 32) & 0xffffu, mb = (uint32_t)label;
  if (chunk >= 0x7ffu) chunk = 0x7ffu;
  if (mb >= 0x3ffffu) mb = 0x3ffffu;
  return 1u << 31 | (uint32_t)(label >> 48 & 3) << 29 | chunk << 18 | mb;
}

/* CUPTI's callback at each kernel or graph launch the plugin enabled. */
static void cu_callback(void* userdata, int domain, uint32_t cbid, const void* data) {
  (void)userdata;
  (void)domain;
  (void)cbid;
  uint32_t site, id;
  memcpy(&site, (const uint8_t*)data + CUPTI_CB_SITE, sizeof site);
  if (site != CUPTI_API_ENTER) return;
  memcpy(&id, (const uint8_t*)data + CUPTI_CB_CORRELATION, sizeof id);
  uint64_t label = tls_label ? tls_label : atomic_load_explicit(&lab.current, memory_order_relaxed);
  atomic_store_explicit(&lab.corr[id & (TS_CORRELATIONS - 1)], (uint64_t)id << 32 | pack_label(label),
                        memory_order_release);
}

/* The launch callbacks from now on (once). The plugin subscribes only
 * now: CUPTI takes one subscriber a process, and a job that names no
 * labelled range leaves it to any other tool (torch.profiler). Where
 * another has it, labels are off. */
static void cu_callbacks_start(void) {
  if (atomic_exchange(&lab.once, 1)) return;
  if (lab.subscribe(&lab.subscriber, cu_callback, NULL) != CUPTI_SUCCESS) {
    atomic_store(&lab.on, 0);
    return;
  }
  static const uint32_t runtime[] = {CUPTI_RUNTIME_LAUNCHES}, driver[] = {CUPTI_DRIVER_LAUNCHES};
  for (size_t i = 0; i < sizeof runtime / sizeof runtime[0]; i++)
    lab.enable(1, lab.subscriber, CUPTI_CB_DOMAIN_RUNTIME_API, runtime[i]);
  for (size_t i = 0; i < sizeof driver / sizeof driver[0]; i++)
    lab.enable(1, lab.subscriber, CUPTI_CB_DOMAIN_DRIVER_API, driver[i]);
}

/* For the NVTX push hook: the labels of a range named name, now in force
 * on this thread and in the process; 0 where it names no forward or
 * backward work. */
static uint64_t cu_label_push(const char* name) {
  if (!atomic_load_explicit(&lab.on, memory_order_acquire)) return 0;
  uint64_t label = phase_label(name);
  if (!label) return 0;
  if (!atomic_load_explicit(&lab.once, memory_order_relaxed)) {
    cu_callbacks_start();
    if (!atomic_load_explicit(&lab.on, memory_order_acquire)) return 0;
  }
  tls_label = label;
  atomic_store_explicit(&lab.current, label, memory_order_relaxed);
  return label;
}

/* For the NVTX pop hook, popping a labelled range: enclosing are the
 * labels of the thread's range around it (0: none), in force again. */
static void cu_label_pop(uint64_t enclosing) {
  tls_label = enclosing;
  atomic_store_explicit(&lab.current, enclosing, memory_order_relaxed);
}

/* Labels a with the labels its launch noted, if any. */
static void cu_label(struct tsnp_activity* a) {
  uint64_t v = atomic_load_explicit(&lab.corr[a->correlation & (TS_CORRELATIONS - 1)], memory_order_acquire);
  uint32_t packed = (uint32_t)v;
  if ((uint32_t)(v >> 32) != a->correlation || !(packed >> 31)) return;
  uint32_t chunk = packed >> 18 & 0x7ffu, mb = packed & 0x3ffffu;
  a->flags |= TSNP_ACT_LABELLED;
  memset(a->note, 0, sizeof a->note);
  a->label.phase = (uint8_t)(packed >> 29 & 3);
  a->label.chunk = chunk == 0x7ffu ? -1 : (int16_t)chunk;
  a->label.microbatch = mb == 0x3ffffu ? -1 : (int32_t)mb;
}

static void cu_buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = NULL;
  *size = 0;
  *max_records = 0;
  if (atomic_fetch_add(&cu.buffers, 1) >= TS_CUPTI_BUFFERS) {
    atomic_fetch_sub(&cu.buffers, 1);
    atomic_fetch_add(&cu.n_refused, 1);
    return; /* CUPTI drops what this buffer would have held, and counts it */
  }
  uint8_t* b = aligned_alloc(CUPTI_BUFFER_ALIGN, TS_CUPTI_BUFFER);
  if (!b) {
    atomic_fetch_sub(&cu.buffers, 1);
    return;
  }
  *buffer = b;
  *size = TS_CUPTI_BUFFER;
}

/* push, for CUPTI's delivering thread: a full ring is waited on (the
 * drainer empties it every few milliseconds) for at most
 * TS_CUPTI_WAIT_MS of the whole delivery, then dropped and counted.
 * Returns whether the record went into the ring. */
static int push_waiting(struct tsnp_record* rec, uint64_t* deadline) {
  struct ts_ring* r = ring_get();
  if (!r) return 0; /* the caller counts it (a kernel record as ring-full) */
  rec->tid = r->tid;
  for (;;) {
    uint64_t h = atomic_load_explicit(&r->head, memory_order_relaxed);
    uint64_t t = atomic_load_explicit(&r->tail, memory_order_acquire);
    if (h - t < g.ring_cap) {
      r->recs[h & (g.ring_cap - 1)] = *rec;
      atomic_store_explicit(&r->head, h + 1, memory_order_release);
      return 1;
    }
    if (*deadline == 0) *deadline = mono_ns() + TS_CUPTI_WAIT_MS * 1000000u;
    uint64_t exit_by = atomic_load(&cu.exit_by);
    if (exit_by && exit_by < *deadline) *deadline = exit_by;
    if (mono_ns() >= *deadline) {
      atomic_fetch_add_explicit(&r->dropped, 1, memory_order_relaxed);
      return 0;
    }
    struct timespec ts = {0, 200000};
    nanosleep(&ts, NULL);
  }
}

static int is_nccl_kernel(const char* name) { return strstr(name, "ncclDevKernel") || strstr(name, "ncclKernel"); }

#define TS_UNSENT UINT64_MAX

static uint64_t name_hash(const char* s) {
  uint64_t h = 1469598103934665603ull; /* FNV-1a */
  for (; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ull;
  return h;
}

/* The number of a kernel's name, sending the name first where this
 * connection has not had it; 0 for NCCL's kernels and when the table is
 * full (the kernel then goes without a name). Called with cu.mu held. */
static uint32_t cu_name(const char* name, uint64_t* deadline, int* skip) {
  *skip = 0;
  if (!name) return 0;
  uint64_t epoch = atomic_load(&g.epoch), hash = name_hash(name);
  size_t i = ((uintptr_t)name >> 3) * 0x9E3779B97F4A7C15ull >> 40 & (TS_NAMES - 1);
  for (size_t probe = 0; probe < TS_NAMES; probe++, i = (i + 1) & (TS_NAMES - 1)) {
    struct ts_name* e = &cu.table[i];
    if (e->ptr == name && e->hash != hash) {
      /* Another kernel's name at a reused address: a new name. */
      e->hash = hash;
      e->id = is_nccl_kernel(name) ? 0 : ++cu.names;
      e->epoch = TS_UNSENT;
    }
    if (e->ptr == name) {
      if (e->id == 0) {
        *skip = 1;
        return 0;
      }
      if (e->epoch == epoch) return e->id;
      e->epoch = epoch;
      break;
    }
    if (e->ptr == NULL) {
      if (is_nccl_kernel(name)) {
        e->ptr = name; /* id 0: skipped from now on */
        e->hash = hash;
        *skip = 1;
        return 0;
      }
      if (cu.names >= TS_NAMES * 3 / 4) return 0;
      e->ptr = name;
      e->hash = hash;
      e->id = ++cu.names;
      e->epoch = epoch;
      break;
    }
  }
  struct ts_name* e = &cu.table[i];
  if (e->ptr != name) return is_nccl_kernel(name) ? (*skip = 1, 0) : 0; /* the table is full */
  size_t len = strlen(name);
  uint16_t flags = 0;
  if (len > TSNP_NAME_MAX) {
    len = TSNP_NAME_MAX;
    flags = TSNP_NAME_TRUNCATED;
  }
  for (size_t off = 0; off == 0 || off < len; off += sizeof(((struct tsnp_name*)0)->text)) {
    union {
      struct tsnp_record rec;
      struct tsnp_name n;
    } u;
    memset(&u, 0, sizeof u);
    u.n.kind = TSNP_NAME;
    u.n.flags = flags;
    u.n.id = e->id;
    u.n.len = (uint32_t)len;
    u.n.offset = (uint32_t)off;
    size_t n = len - off < sizeof u.n.text ? len - off : sizeof u.n.text;
    memcpy(u.n.text, name + off, n);
    if (!push_waiting(&u.rec, deadline)) e->epoch = TS_UNSENT; /* a piece was lost: send it again next time */
  }
  return e->id;
}

static uint64_t rd64(const uint8_t* p, size_t off) {
  uint64_t v;
  memcpy(&v, p + off, sizeof v);
  return v;
}
static uint32_t rd32(const uint8_t* p, size_t off) {
  uint32_t v;
  memcpy(&v, p + off, sizeof v);
  return v;
}

static void cu_record(const uint8_t* p, int64_t realtime_less_mono, uint64_t* deadline) {
  union {
    struct tsnp_record rec;
    struct tsnp_activity a;
  } u;
  memset(&u, 0, sizeof u);
  u.a.kind = TSNP_ACTIVITY;
  u.a.flags = cu.monotonic ? TSNP_ACT_MONOTONIC : 0;
  uint64_t start, end;
  switch (rd32(p, CUPTI_REC_KIND)) {
    case CUPTI_ACTIVITY_KIND_KERNEL:
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
      const char* name;
      memcpy(&name, p + CUPTI_KERNEL_NAME, sizeof name);
      int skip;
      pthread_mutex_lock(&cu.mu);
      u.a.name_id = cu_name(name, deadline, &skip);
      pthread_mutex_unlock(&cu.mu);
      if (skip) return;
      u.a.what = TSNP_ACT_KERNEL;
      start = rd64(p, CUPTI_KERNEL_START);
      end = rd64(p, CUPTI_KERNEL_END);
      u.a.device = rd32(p, CUPTI_KERNEL_DEVICE);
      u.a.context = rd32(p, CUPTI_KERNEL_CONTEXT);
      u.a.stream = rd32(p, CUPTI_KERNEL_STREAM);
      u.a.correlation = rd32(p, CUPTI_KERNEL_CORRELATION);
      memcpy(u.a.grid, p + CUPTI_KERNEL_GRID, sizeof u.a.grid);
      memcpy(u.a.block, p + CUPTI_KERNEL_BLOCK, sizeof u.a.block);
      break;
    }
    case CUPTI_ACTIVITY_KIND_MEMCPY:
    case CUPTI_ACTIVITY_KIND_MEMSET:
      u.a.what = rd32(p, CUPTI_REC_KIND) == CUPTI_ACTIVITY_KIND_MEMCPY ? TSNP_ACT_MEMCPY : TSNP_ACT_MEMSET;
      if (u.a.what == TSNP_ACT_MEMCPY) u.a.copy_kind = p[CUPTI_MEMCPY_COPY_KIND];
      u.a.bytes = rd64(p, CUPTI_MEM_BYTES);
      start = rd64(p, CUPTI_MEM_START);
      end = rd64(p, CUPTI_MEM_END);
      u.a.device = rd32(p, CUPTI_MEM_DEVICE);
      u.a.context = rd32(p, CUPTI_MEM_CONTEXT);
      u.a.stream = rd32(p, CUPTI_MEM_STREAM);
      u.a.correlation = rd32(p, CUPTI_MEM_CORRELATION);
      break;
    case CUPTI_ACTIVITY_KIND_MEMORY2: {
      /* Device memory only (cudaMalloc, cuMemAlloc, the pools'): the
       * collector keeps each process's total and its peak. */
      uint32_t op = rd32(p, CUPTI_MEMORY2_OPERATION);
      if (rd32(p, CUPTI_MEMORY2_KIND) != CUPTI_MEMORY_KIND_DEVICE ||
          (op != CUPTI_MEMORY_OPERATION_ALLOCATION && op != CUPTI_MEMORY_OPERATION_RELEASE))
        return;
      u.a.what = TSNP_ACT_MEMORY;
      u.a.copy_kind = (uint8_t)op;
      u.a.bytes = rd64(p, CUPTI_MEMORY2_BYTES);
      start = end = rd64(p, CUPTI_MEMORY2_TIMESTAMP);
      u.a.device = rd32(p, CUPTI_MEMORY2_DEVICE);
      u.a.context = rd32(p, CUPTI_MEMORY2_CONTEXT);
      u.a.stream = rd32(p, CUPTI_MEMORY2_STREAM);
      u.a.correlation = rd32(p, CUPTI_MEMORY2_CORRELATION);
      break;
    }
    default:
      return;
  }
  atomic_fetch_add_explicit(&cu.n_read, 1, memory_order_relaxed);
  if (u.a.what == TSNP_ACT_KERNEL) atomic_fetch_add_explicit(&cu.n_kernels, 1, memory_order_relaxed);
  if (start == 0 || end < start) { /* CUPTI could not time it: counted as CUPTI's drops are */
    atomic_fetch_add(&g.act_dropped, 1);
    atomic_fetch_add_explicit(&cu.n_untimed, 1, memory_order_relaxed);
    return;
  }
  u.a.t0 = (uint64_t)((int64_t)start - realtime_less_mono);
  u.a.t1 = (uint64_t)((int64_t)end - realtime_less_mono);
  if (u.a.what != TSNP_ACT_MEMORY) cu_label(&u.a);
  atomic_fetch_add_explicit(push_waiting(&u.rec, deadline) ? &cu.n_queued : &cu.n_full, 1, memory_order_relaxed);
}

static void cu_buffer_completed(void* context, uint32_t stream, uint8_t* buffer, size_t size, size_t valid) {
  (void)size;
  if (!buffer) return;
  atomic_fetch_add(&cu.delivering, 1);
  int64_t off = cu.monotonic ? 0 : (int64_t)now_ns(CLOCK_REALTIME) - (int64_t)mono_ns();
  /* At exit every buffer comes at once: together they wait no longer
   * than the exit's deadline, not TS_CUPTI_WAIT_MS each. */
  uint64_t deadline = atomic_load(&cu.exit_by);
  void* rec = NULL;
  while (valid > 0 && cu.next(buffer, valid, &rec) == CUPTI_SUCCESS && rec) cu_record(rec, off, &deadline);
  size_t dropped = 0;
  if (cu.dropped && cu.dropped(context, stream, &dropped) == CUPTI_SUCCESS && dropped) {
    atomic_fetch_add(&g.act_dropped, dropped);
    atomic_fetch_add(&cu.n_reported, dropped);
  }
  atomic_fetch_add(&cu.n_delivered, 1);
  free(buffer);
  atomic_fetch_sub(&cu.buffers, 1);
  atomic_fetch_sub(&cu.delivering, 1);
}

static uint64_t cu_timestamp(void) { return mono_ns(); }

/* After the exit's hand-over: the activity buffers CUPTI still holds,
 * whose records (up to a few hundred each) will never come; 0 before. */
static uint64_t cupti_unreturned(void) {
  return atomic_load(&cu.exit_by) ? (uint64_t)atomic_load(&cu.buffers) : 0;
}

static void cu_at_exit(void) {
  /* Before the libraries' destructors (the plugin's sends what is left):
   * hand over every buffer, complete or not — in the process that
   * started tracing only. */
  if (cu.flush && cu.pid == getpid()) {
    uint64_t by = mono_ns() + TS_FLUSH_MS * 1000000u;
    atomic_store(&cu.exit_by, by);
    cu.flush(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    /* CUPTI's own thread may still be handing buffers over: until it
     * has, what they hold is neither sent nor counted, and the drainer's
     * last count must come after it (a little past the deadline: past
     * it a delivery only counts what finds no room). */
    struct timespec ts = {0, 1000000};
    while ((atomic_load(&cu.delivering) > 0 || atomic_load(&cu.buffers) > 0) && mono_ns() < by + TS_TALLY_MS * 1000000u)
      nanosleep(&ts, NULL);
  }
}

/* TRAINSCOPE_NCCL_DEBUG=1: at exit, one line on stderr saying where the
 * process's records went, for checking the loss counts against what a
 * job knows it launched. */
static void debug_line(void) {
  const char* d = getenv("TRAINSCOPE_NCCL_DEBUG");
  if (!d || strcmp(d, "1") != 0) return;
  static const char* const tally_how[] = {"none",
                                          "the stream's",
                                          "none: no connection",
                                          "lost: no connection for it",
                                          "lost: not sent whole",
                                          "over a connection of its own"};
  fprintf(stderr, "trainscope-nccl: pid %d: last counts: %s%s\n", (int)getpid(), tally_how[g.tally],
          g.detached ? "; the drainer missed the exit's deadline" : "");
  fprintf(stderr,
          "trainscope-nccl: pid %d: cupti records read %llu (kernels %llu, untimed %llu), queued %llu, "
          "ring full %llu, buffers delivered %llu, refused %llu, unreturned %llu, dropped by cupti %llu; "
          "records sent %llu, unsent %llu, ring drops %llu, refused events %llu (stale handles %llu), "
          "other processes' proxy operations %llu\n",
          (int)getpid(), (unsigned long long)cu.n_read, (unsigned long long)cu.n_kernels,
          (unsigned long long)cu.n_untimed, (unsigned long long)cu.n_queued, (unsigned long long)cu.n_full,
          (unsigned long long)cu.n_delivered, (unsigned long long)cu.n_refused,
          (unsigned long long)atomic_load(&cu.buffers), (unsigned long long)cu.n_reported,
          (unsigned long long)(g.sent_bytes / TSNP_RECORD_SIZE), (unsigned long long)g.unsent,
          (unsigned long long)ring_drops(), (unsigned long long)atomic_load(&g.refused),
          (unsigned long long)atomic_load(&g.stale), (unsigned long long)atomic_load(&g.foreign));
}

static void cu_after_fork(void) {
  cu.flush = NULL;
  pthread_mutex_init(&cu.mu, NULL);
  atomic_store(&lab.on, 0);
}

/* The CUPTI library: TRAINSCOPE_CUPTI_PATH, else one the process has
 * loaded already, else the usual names on the loader's path, else the
 * CUDA toolkit's. */
static void* cu_open(char* which, size_t n) {
  static const char* const names[] = {"libcupti.so.13", "libcupti.so.12", "libcupti.so"};
  static const char* const paths[] = {"/usr/local/cuda/lib64/libcupti.so", "/usr/local/cuda/extras/CUPTI/lib64/libcupti.so"};
  const char* env = getenv("TRAINSCOPE_CUPTI_PATH");
  void* lib = NULL;
  if (env && *env) {
    lib = dlopen(env, RTLD_NOW | RTLD_LOCAL);
    snprintf(which, n, "%s", env);
    return lib;
  }
  for (size_t i = 0; !lib && i < sizeof names / sizeof names[0]; i++)
    if ((lib = dlopen(names[i], RTLD_NOW | RTLD_NOLOAD))) snprintf(which, n, "%s", names[i]);
  for (size_t i = 0; !lib && i < sizeof names / sizeof names[0]; i++)
    if ((lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL))) snprintf(which, n, "%s", names[i]);
  for (size_t i = 0; !lib && i < sizeof paths / sizeof paths[0]; i++)
    if ((lib = dlopen(paths[i], RTLD_NOW | RTLD_LOCAL))) snprintf(which, n, "%s", paths[i]);
  return lib;
}

/* Starts tracing; returns 0, or a reason it could not. */
static const char* cu_start(char* which, size_t n) {
  void* lib = cu_open(which, n);
  if (!lib) return "no libcupti found; set TRAINSCOPE_CUPTI_PATH";
  cuptiActivityRegisterCallbacks_t reg = (cuptiActivityRegisterCallbacks_t)dlsym(lib, "cuptiActivityRegisterCallbacks");
  cuptiActivityEnable_t enable = (cuptiActivityEnable_t)dlsym(lib, "cuptiActivityEnable");
  cuptiActivityFlushPeriod_t period = (cuptiActivityFlushPeriod_t)dlsym(lib, "cuptiActivityFlushPeriod");
  cuptiActivityRegisterTimestampCallback_t clock =
      (cuptiActivityRegisterTimestampCallback_t)dlsym(lib, "cuptiActivityRegisterTimestampCallback");
  cu.next = (cuptiActivityGetNextRecord_t)dlsym(lib, "cuptiActivityGetNextRecord");
  cu.dropped = (cuptiActivityGetNumDroppedRecords_t)dlsym(lib, "cuptiActivityGetNumDroppedRecords");
  cuptiActivityFlushAll_t flush = (cuptiActivityFlushAll_t)dlsym(lib, "cuptiActivityFlushAll");
  if (!reg || !enable || !cu.next || !flush) return "libcupti lacks the activity API";
  /* The clock first: CUPTI takes it only before any activity is enabled. */
  cu.monotonic = clock && clock(cu_timestamp) == CUPTI_SUCCESS;
  if (reg(cu_buffer_requested, cu_buffer_completed) != CUPTI_SUCCESS)
    return "CUPTI refused callbacks: another client?";
  if (enable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) != CUPTI_SUCCESS) return "cannot enable kernel activity";
  enable(CUPTI_ACTIVITY_KIND_MEMCPY);
  enable(CUPTI_ACTIVITY_KIND_MEMSET);
  enable(CUPTI_ACTIVITY_KIND_MEMORY2); /* a CUPTI without it: no peak memory */
  if (period) period(TS_CUPTI_FLUSH_MS);
  cu.pid = getpid();
  cu.flush = flush;
  atexit(cu_at_exit);
  const char* labels = getenv("TRAINSCOPE_CUPTI_LABELS");
  lab.subscribe = (cuptiSubscribe_t)dlsym(lib, "cuptiSubscribe");
  lab.enable = (cuptiEnableCallback_t)dlsym(lib, "cuptiEnableCallback");
  if (lab.subscribe && lab.enable && !(labels && strcmp(labels, "0") == 0))
    atomic_store_explicit(&lab.on, 1, memory_order_release);
  return NULL;
}

/* CUDA's entry point for injection libraries, called once by cuInit on the
 * thread that called it. Returns 1 (the process goes on either way). */
TS_EXPORT int InitializeInjection(void) {
  const char* off = getenv("TRAINSCOPE_CUPTI");
  if (off && strcmp(off, "0") == 0) return 1;
  static _Atomic int once;
  if (atomic_exchange(&once, 1)) return 1;
  pthread_mutex_lock(&g.mu);
  set_up();
  pthread_mutex_unlock(&g.mu);
  /* Loading CUPTI takes a while: not under g.mu, which NCCL's init and
   * the drainer take. */
  char which[256] = "";
  const char* why = cu_start(which, sizeof which);
  union {
    struct tsnp_record rec;
    struct tsnp_activity a;
  } u;
  memset(&u, 0, sizeof u);
  u.a.kind = TSNP_ACTIVITY;
  u.a.t0 = mono_ns();
  u.a.what = why ? TSNP_ACT_UNAVAILABLE : TSNP_ACT_TRACING;
  u.a.flags = cu.monotonic ? TSNP_ACT_MONOTONIC : 0;
  const char* note = why ? why : which; /* a long path is cut to the field */
  memcpy(u.a.note, note, strnlen(note, sizeof u.a.note));
  u.rec.tid = gettid_u32();
  pthread_mutex_lock(&g.mu);
  g.act_status = u.rec;
  if (!why) {
    g.cupti = 1;
    drainer_start();
  }
  pthread_mutex_unlock(&g.mu);
  /* Also now, for a collector already connected (NVTX started the
   * drainer first); a later connection gets it after its hello. */
  push(&u.rec);
  return 1;
}
