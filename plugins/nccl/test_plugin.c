/*
 * Tests libtrainscope-nccl.so without NCCL or NVTX: each case forks a
 * child that dlopens the plugin and calls it the way NCCL 2.28 does (init,
 * task events on the calling thread, kernel-channel events from another
 * thread, finalize), or the way an NVTX v3 instance does (dlopen,
 * InitializeInjectionNvtx2 with a fake export table, calls through the
 * function-pointer slots the plugin filled), while this process listens
 * on the Unix socket as the collector would and checks the bytes that
 * arrive.
 *
 *   ./test_plugin ./libtrainscope-nccl.so
 *
 * With --drive, it only makes the main case's calls, against the
 * collector named by TRAINSCOPE_NCCL_SOCKET (the Go end-to-end tests),
 * as rank 1 of 4 or as the rank given:
 *
 *   ./test_plugin --drive ./libtrainscope-nccl.so [RANK NRANKS]
 *
 * With --drive-nvtx, the same against that collector, wrapped in NVTX
 * ranges made through the injection as NVTX makes them (one thread):
 * push "step" (depth 0); push "forward" (with nvtxRangePushEx), sleep
 * 1 ms, pop; the main case's NCCL calls up to, not including, the
 * finalize (comm init, AllReduce, Broadcast, two Sends and a Recv, the
 * kernel channels and proxy operations from another thread); pop "step";
 * push "step" again, sleep 2 ms, pop; then finalize. It sends RANGE
 * records: START "step" (ordinal 1), "forward" (ordinal 2, depth 1),
 * "step" (ordinal 1), START "step" (ordinal 3), "step" (ordinal 3).
 *
 *   ./test_plugin --drive-nvtx ./libtrainscope-nccl.so [RANK NRANKS]
 *
 * With --drive-steps, a data-parallel loop's collectives and no NVTX
 * ranges: two all-reduces of a first step, then STEPS steps of three
 * all-reduces (4000, 4000 and 1000 floats, each with one kernel channel
 * of 100 µs) 5 ms apart and a 35 ms pause.
 *
 *   ./test_plugin --drive-steps ./libtrainscope-nccl.so STEPS [RANK NRANKS]
 *
 * With --bench-nvtx, it prints what an NVTX push and pop cost with the
 * plugin attached (ns per pair, a recorded range and an ignored one).
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cupti_activity_abi.h"
#include "nccl_profiler_abi.h"
#include "nvtx_injection_abi.h"
#include "trainscope_nccl_wire.h"

/* The plugin asks the process's NCCL for its version: this program stands
 * in for it, exporting ncclGetVersion to the global scope (linked with
 * -rdynamic). */
#define TEST_NCCL_VERSION 22809
__attribute__((visibility("default"))) int ncclGetVersion(int* version);
int ncclGetVersion(int* version) {
  *version = TEST_NCCL_VERSION;
  return 0;
}

static const char* lib_path;
static char sock_path[108];
static int failures;

#define CHECK(cond, ...)                                  \
  do {                                                    \
    if (!(cond)) {                                        \
      fprintf(stderr, "%s:%d: FAIL: ", __FILE__, __LINE__); \
      fprintf(stderr, __VA_ARGS__);                       \
      fprintf(stderr, "\n");                              \
      failures++;                                         \
    }                                                     \
  } while (0)

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint64_t mono_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static ncclProfiler_v5_t* load(void) {
  void* h = dlopen(lib_path, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    fprintf(stderr, "dlopen %s: %s\n", lib_path, dlerror());
    _exit(2);
  }
  ncclProfiler_v5_t* p = dlsym(h, "ncclProfiler_v5");
  if (!p || !dlsym(h, "ncclProfiler_v4")) {
    fprintf(stderr, "ncclProfiler_v5 or ncclProfiler_v4 missing\n");
    _exit(2);
  }
  return p;
}

static int listen_unix(void) {
  int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  struct sockaddr_un a = {.sun_family = AF_UNIX};
  strcpy(a.sun_path, sock_path);
  unlink(sock_path);
  if (fd < 0 || bind(fd, (struct sockaddr*)&a, sizeof a) || listen(fd, 8)) {
    perror("listen");
    exit(2);
  }
  return fd;
}

struct stream {
  char* buf;
  size_t len, cap;
  int connections;
};

/* Reads every connection made to lfd until the child exits (and its
 * connections close) or timeout_ms pass; with no_read, accepts but never
 * reads, as a stuck collector would. */
static void collect(int lfd, pid_t child, struct stream* s, int timeout_ms, int no_read, int* status) {
  int conns[32], nconn = 0, exited = 0;
  uint64_t end = mono_ms() + (uint64_t)timeout_ms;
  memset(s, 0, sizeof *s);
  while (mono_ms() < end) {
    if (!exited && waitpid(child, status, WNOHANG) == child) exited = 1;
    struct pollfd p[33];
    int n = 0;
    p[n++] = (struct pollfd){.fd = lfd, .events = POLLIN};
    for (int i = 0; i < nconn; i++)
      if (conns[i] >= 0 && !no_read) p[n++] = (struct pollfd){.fd = conns[i], .events = POLLIN};
    if (exited && n == 1) {
      /* Every connection read to its end; but one the child made after
       * the last accept (a second communicator's drainer) waits in the
       * backlog, its records whole, though the child has exited. */
      struct pollfd lp = {.fd = lfd, .events = POLLIN};
      if (poll(&lp, 1, 0) <= 0) break;
    }
    if (poll(p, (nfds_t)n, 20) <= 0) continue;
    if (p[0].revents & POLLIN) {
      int c = accept(lfd, NULL, NULL);
      if (c >= 0 && nconn < 32) conns[nconn++] = c, s->connections++;
    }
    for (int i = 1; i < n; i++) {
      if (!(p[i].revents & (POLLIN | POLLHUP))) continue;
      if (s->cap - s->len < 65536) s->buf = realloc(s->buf, s->cap = s->cap * 2 + 65536);
      ssize_t got = read(p[i].fd, s->buf + s->len, s->cap - s->len);
      if (got > 0) {
        s->len += (size_t)got;
      } else {
        for (int j = 0; j < nconn; j++)
          if (conns[j] == p[i].fd) conns[j] = -1;
        close(p[i].fd);
      }
    }
  }
  if (!exited) {
    CHECK(waitpid(child, status, 0) == child, "waitpid");
  }
  for (int i = 0; i < nconn; i++)
    if (conns[i] >= 0) close(conns[i]);
}

static pid_t spawn(void (*body)(void)) {
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    failures = 0; /* a child's checks are its own, not the parent's so far */
    body();
    _exit(0);
  }
  return pid;
}

static void child_ok(int status, const char* what) {
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "%s: child status %#x", what, status);
}

/* ---- The main case. ---- */

struct kernel_args {
  ncclProfiler_v5_t* p;
  void* ctx;
  void* parent;
  void* send; /* the first Send's handle, for its proxy operations */
};

static void* kernel_thread(void* arg) {
  struct kernel_args* k = arg;
  for (int ch = 0; ch < 2; ch++) {
    ncclProfilerEventDescr_v5_t d = {0};
    d.type = ncclProfileKernelCh;
    d.parentObj = k->parent;
    d.kernelCh.channelId = (uint8_t)ch;
    d.kernelCh.pTimer = 1000000 + 100 * (uint64_t)ch;
    void* h = NULL;
    k->p->startEvent(k->ctx, &h, &d);
    if (!h) _exit(10);
    ncclProfilerEventStateArgs_v5_t a = {0};
    a.kernelCh.pTimer = 1005000 + 1000 * (uint64_t)ch;
    k->p->recordEventState(h, ncclProfilerKernelChStop, &a);
    k->p->stopEvent(h);
  }
  /* Proxy operations: the Send's on two channels, sent at their start and
   * at their stop; one of another process (PXN) and one of a collective,
   * both left out without a handle. */
  void* ph[2] = {NULL, NULL};
  for (int ch = 0; ch < 2; ch++) {
    ncclProfilerEventDescr_v5_t d = {0};
    d.type = ncclProfileProxyOp;
    d.parentObj = k->send;
    d.proxyOp.pid = getpid();
    d.proxyOp.channelId = (uint8_t)ch;
    d.proxyOp.peer = 2;
    d.proxyOp.isSend = 1;
    k->p->startEvent(k->ctx, &ph[ch], &d);
    if (!ph[ch]) _exit(12);
  }
  usleep(1000);
  for (int ch = 0; ch < 2; ch++) k->p->stopEvent(ph[ch]);
  void* others[] = {k->send, k->parent};
  pid_t pids[] = {getpid() + 1, getpid()};
  for (int i = 0; i < 2; i++) {
    ncclProfilerEventDescr_v5_t d = {0};
    d.type = ncclProfileProxyOp;
    d.parentObj = others[i];
    d.proxyOp.pid = pids[i];
    void* h = (void*)1;
    k->p->startEvent(k->ctx, &h, &d);
    if (h) _exit(13);
  }
  /* A parent pointer that is not one of the plugin's handles, and one
   * that is a real pointer: both refused, neither dereferenced. */
  int on_stack = 0;
  void* bogus[] = {(void*)(uintptr_t)0xdeadbeefu, &on_stack};
  for (int i = 0; i < 2; i++) {
    ncclProfilerEventDescr_v5_t d = {0};
    d.type = ncclProfileKernelCh;
    d.parentObj = bogus[i];
    void* h = (void*)1;
    k->p->startEvent(k->ctx, &h, &d);
    if (h) _exit(11);
  }
  return NULL;
}

/* The main case's calls as rank `rank` of `nranks`, in three parts:
 * drive_init initialises the communicator, drive_ops makes the
 * collectives, p2p operations and (on another thread) their kernel
 * channels and proxy operations, drive_finish finalises. */
/* The communicator's name: TEST_PLUGIN_COMM_NAME when set (a pipeline's,
 * say; "-" for none, as PyTorch up to 2.11 passes), else a data-parallel
 * group's. */
static const char* comm_name(void) {
  const char* n = getenv("TEST_PLUGIN_COMM_NAME");
  if (n && strcmp(n, "-") == 0) return NULL;
  return n && *n ? n : "pg-data-parallel";
}

static void* drive_init(ncclProfiler_v5_t* p, int rank, int nranks) {
  void* ctx = NULL;
  int mask = -1;
  if (p->init(&ctx, 0xabcdef0123456789ull, &mask, comm_name(), 1, nranks, rank, NULL) != ncclSuccess || !ctx) _exit(3);
  if (mask != (ncclProfileColl | ncclProfileP2p | ncclProfileKernelCh | ncclProfileProxyOp)) _exit(4);
  return ctx;
}

static void drive_ops(ncclProfiler_v5_t* p, void* ctx, int rank, int nranks) {
  /* NCCL starts a group event too; the plugin does not want it. */
  ncclProfilerEventDescr_v5_t g = {.type = ncclProfileGroup};
  void* gh = (void*)1;
  p->startEvent(ctx, &gh, &g);
  if (gh) _exit(5);

  ncclProfilerEventDescr_v5_t c = {0};
  c.type = ncclProfileColl;
  c.rank = rank;
  c.coll.seqNumber = 7;
  c.coll.func = "AllReduce";
  c.coll.count = 1000;
  c.coll.root = 0;
  c.coll.datatype = "ncclFloat32";
  c.coll.nChannels = 2;
  c.coll.nWarps = 16;
  c.coll.algo = "RING";
  c.coll.proto = "SIMPLE";
  void* ch = NULL;
  p->startEvent(ctx, &ch, &c);
  if (!ch) _exit(6);
  usleep(1000);
  p->stopEvent(ch);

  ncclProfilerEventDescr_v5_t b = c;
  b.coll.func = "Broadcast";
  b.coll.seqNumber = 0;
  b.coll.root = 3;
  b.coll.datatype = "ncclBfloat16";
  b.coll.count = 5;
  b.coll.algo = "TREE";
  b.coll.proto = "LL128";
  void* bh = NULL;
  p->startEvent(ctx, &bh, &b);
  p->stopEvent(bh);

  const char* funcs[] = {"Send", "Send", "Recv"};
  int peers[] = {2, 2, 3};
  if (nranks == 2) /* a pipeline of two stages: every p2p with the other rank */
    peers[0] = peers[1] = peers[2] = 1 - rank;
  void* first_send = NULL;
  for (int i = 0; i < 3; i++) {
    ncclProfilerEventDescr_v5_t q = {0};
    q.type = ncclProfileP2p;
    q.p2p.func = funcs[i];
    q.p2p.count = 10;
    q.p2p.datatype = "ncclInt64";
    q.p2p.peer = peers[i];
    q.p2p.nChannels = 1;
    void* qh = NULL;
    p->startEvent(ctx, &qh, &q);
    p->stopEvent(qh);
    if (i == 0) first_send = qh;
  }

  /* Kernel channels and proxy operations come later, on a proxy thread. */
  struct kernel_args k = {p, ctx, ch, first_send};
  pthread_t t;
  pthread_create(&t, NULL, kernel_thread, &k);
  pthread_join(t, NULL);
}

static void drive_finish(ncclProfiler_v5_t* p, void* ctx) {
  p->stopEvent(NULL);
  p->finalize(ctx);
}

static void drive(int rank, int nranks) {
  ncclProfiler_v5_t* p = load();
  void* ctx = drive_init(p, rank, nranks);
  drive_ops(p, ctx, rank, nranks);
  drive_finish(p, ctx);
}

static void main_child(void) { drive(1, 4); }

/* --drive-steps: a data-parallel training loop's collectives and nothing
 * else (no NVTX): a first step of other sizes, then `steps` steps of
 * three all-reduces 5 ms apart and a 35 ms pause after the last (the
 * optimizer, the next batch): a step of about 50 ms that profile-run
 * finds from the cycle. With TEST_PLUGIN_FAKE_CUPTI naming the stand-in
 * CUPTI (libfakecupti.so), the plugin is also the process's CUDA
 * injection, and each step "launches" a kernel of 10 ms in the pause,
 * after its last all-reduce: whichever operation a cycle starts at, it
 * holds one such kernel whole, so the GPU is busy 10 ms of it. With
 * TEST_PLUGIN_STALL_EVERY=N and TEST_PLUGIN_STALL_MS=M, every Nth step's
 * pause (steps N-1, 2N-1, …) is M ms longer: a checkpoint. */
static void drive_steps(int steps, int rank, int nranks) {
  ncclProfiler_v5_t* p = load();
  void* ctx = drive_init(p, rank, nranks);
  void (*launch)(const char*, uint64_t, uint64_t) = NULL;
  CUptiResult (*flush)(uint32_t) = NULL;
  const char* fake = getenv("TEST_PLUGIN_FAKE_CUPTI");
  if (fake && *fake) {
    setenv("TRAINSCOPE_CUPTI_PATH", fake, 1);
    void* h = dlopen(lib_path, RTLD_NOW | RTLD_LOCAL);
    int (*init)(void) = h ? (int (*)(void))dlsym(h, "InitializeInjection") : NULL;
    CHECK(init && init() == 1, "InitializeInjection failed");
    void* f = dlopen(fake, RTLD_NOW | RTLD_NOLOAD);
    launch = f ? (void (*)(const char*, uint64_t, uint64_t))dlsym(f, "fake_cupti_launch") : NULL;
    flush = f ? (CUptiResult(*)(uint32_t))dlsym(f, "cuptiActivityFlushAll") : NULL;
    if (!launch || !flush) {
      fprintf(stderr, "the plugin did not load %s\n", fake);
      _exit(2);
    }
  }
  const char* every_s = getenv("TEST_PLUGIN_STALL_EVERY");
  const char* ms_s = getenv("TEST_PLUGIN_STALL_MS");
  int stall_every = every_s ? atoi(every_s) : 0;
  int stall_ms = ms_s ? atoi(ms_s) : 0;
  static const size_t warm[] = {7000, 3000};
  static const size_t sizes[] = {4000, 4000, 1000};
  uint64_t seq = 0;
  for (int s = -1; s < steps; s++) {
    const size_t* counts = s < 0 ? warm : sizes;
    int n = s < 0 ? 2 : 3;
    for (int i = 0; i < n; i++) {
      ncclProfilerEventDescr_v5_t c = {0};
      c.type = ncclProfileColl;
      c.rank = rank;
      c.coll.seqNumber = seq++;
      c.coll.func = "AllReduce";
      c.coll.count = counts[i];
      c.coll.datatype = "ncclFloat32";
      c.coll.nChannels = 1;
      c.coll.algo = "RING";
      c.coll.proto = "SIMPLE";
      void* h = NULL;
      p->startEvent(ctx, &h, &c);
      p->stopEvent(h);
      /* Its one kernel channel, 100 µs on the GPU's timer (here the host's
       * clock): a collective completes with its channels, as in NCCL. */
      struct timespec now;
      clock_gettime(CLOCK_MONOTONIC, &now);
      uint64_t t = (uint64_t)now.tv_sec * 1000000000u + (uint64_t)now.tv_nsec;
      ncclProfilerEventDescr_v5_t k = {0};
      k.type = ncclProfileKernelCh;
      k.parentObj = h;
      k.kernelCh.channelId = 0;
      k.kernelCh.pTimer = t;
      void* kh = NULL;
      p->startEvent(ctx, &kh, &k);
      if (!kh) _exit(14);
      ncclProfilerEventStateArgs_v5_t a = {0};
      a.kernelCh.pTimer = t + 100000;
      p->recordEventState(kh, ncclProfilerKernelChStop, &a);
      p->stopEvent(kh);
      usleep(5000);
    }
    if (launch && s >= 0) {
      launch("_ZN7cutlass7Kernel2INS_4GemmEEEvNT_6ParamsE", 10000000, 0);
      flush(0);
    }
    usleep(35000);
    if (stall_every > 0 && s >= 0 && s % stall_every == stall_every - 1)
      usleep((useconds_t)stall_ms * 1000);
  }
  drive_finish(p, ctx);
}

static const struct tsnp_record* rec(const struct stream* s, size_t i) {
  return (const struct tsnp_record*)(s->buf + TSNP_RECORD_SIZE * (i + 1));
}

/* Runs body in a child as the main case's process (launcher RANK=5,
 * LOCAL_WORLD_SIZE=8) against a collector here, and returns what it sent. */
static pid_t run_main_like(void (*body)(void), const char* what, struct stream* s) {
  int lfd = listen_unix();
  setenv("TRAINSCOPE_NCCL_SOCKET", sock_path, 1);
  unsetenv("OMPI_COMM_WORLD_RANK");
  unsetenv("SLURM_PROCID");
  unsetenv("PMI_RANK");
  unsetenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  unsetenv("MPI_LOCALNRANKS");
  unsetenv("SLURM_NTASKS_PER_NODE");
  setenv("RANK", "5", 1);
  setenv("LOCAL_WORLD_SIZE", "8", 1);
  pid_t pid = spawn(body);
  unsetenv("RANK");
  unsetenv("LOCAL_WORLD_SIZE");
  int status = 0;
  collect(lfd, pid, s, 10000, 0, &status);
  close(lfd);
  child_ok(status, what);
  return pid;
}

static void check_hello(const struct stream* s, pid_t pid) {
  CHECK(s->connections == 1, "connections %d, want 1", s->connections);
  CHECK(s->len >= TSNP_RECORD_SIZE && s->len % TSNP_RECORD_SIZE == 0, "stream of %zu bytes", s->len);
  if (s->len < TSNP_RECORD_SIZE) return;
  struct tsnp_hello h;
  memcpy(&h, s->buf, sizeof h);
  CHECK(memcmp(h.magic, "TSNP", 4) == 0, "magic");
  CHECK(h.version == TSNP_VERSION && h.record_size == 128, "version %u size %u", h.version, h.record_size);
  CHECK(h.pid == (uint32_t)pid, "hello pid %u, child %d", h.pid, (int)pid);
  CHECK(h.mono_ns > 0 && h.realtime_ns > h.mono_ns, "hello clocks");
}

/* Checks the NCCL records of the main case's calls; with ranges, RANGE
 * records may come too (checked by the caller). */
static void check_main_records(const struct stream* s, pid_t pid, int ranges) {
  check_hello(s, pid);
  if (s->len < TSNP_RECORD_SIZE) return;
  struct tsnp_hello h;
  memcpy(&h, s->buf, sizeof h);
  CHECK(h.world_rank1 == 6, "hello launcher rank + 1 %d, want 6 (RANK=5)", h.world_rank1);
  CHECK(h.local_size1 == 9, "hello launcher local size + 1 %d, want 9 (LOCAL_WORLD_SIZE=8)", h.local_size1);

  size_t n = s->len / TSNP_RECORD_SIZE - 1;
  int inits = 0, fins = 0, colls = 0, p2ps = 0, kernels = 0, drops = 0, proxy_starts = 0, proxy_stops = 0;
  uint64_t ar_task = 0, ar_t1 = 0, send_task = 0;
  uint32_t ar_tid = 0;
  const struct tsnp_record* last_drops = NULL;
  /* Records come ring by ring: a kernel channel may precede its parent. */
  for (size_t i = 0; i < n; i++)
    if (rec(s, i)->kind == TSNP_COLLECTIVE && rec(s, i)->func == TSNP_FUNC_ALLREDUCE)
      ar_task = rec(s, i)->task, ar_t1 = rec(s, i)->t1, ar_tid = rec(s, i)->tid;
  for (size_t i = 0; i < n && !send_task; i++)
    if (rec(s, i)->kind == TSNP_P2P && rec(s, i)->func == TSNP_FUNC_SEND) send_task = rec(s, i)->task;
  for (size_t i = 0; i < n; i++) {
    const struct tsnp_record* r = rec(s, i);
    CHECK((r->kind >= 1 && r->kind <= 7) || (ranges && r->kind == TSNP_RANGE), "record %zu kind %u", i, r->kind);
    if (r->kind == TSNP_RANGE) continue;
    if (r->kind != TSNP_DROPS) {
      CHECK(r->comm_hash == 0xabcdef0123456789ull, "record %zu hash %llx", i, (unsigned long long)r->comm_hash);
      CHECK(strcmp(r->comm_name, comm_name()) == 0, "record %zu comm name %.32s", i, r->comm_name);
      CHECK(r->rank == 1 && r->nranks == 4, "record %zu rank %d/%d", i, r->rank, r->nranks);
    }
    switch (r->kind) {
    case TSNP_COMM_INIT:
      inits++;
      CHECK(r->nnodes == 1, "nnodes %d", r->nnodes);
      CHECK(r->a0 == TEST_NCCL_VERSION, "comm init NCCL version %llu, want %d (this program's ncclGetVersion)",
            (unsigned long long)r->a0, TEST_NCCL_VERSION);
      break;
    case TSNP_COMM_FINALIZE: fins++; break;
    case TSNP_COLLECTIVE:
      colls++;
      if (r->func == TSNP_FUNC_ALLREDUCE) {
        CHECK(r->seq == 7 && r->a0 == 1000 && r->a1 == 4000, "allreduce seq %llu count %llu bytes %llu",
              (unsigned long long)r->seq, (unsigned long long)r->a0, (unsigned long long)r->a1);
        CHECK(r->dtype == TSNP_DTYPE_FLOAT32 && r->algo == TSNP_ALGO_RING && r->proto == TSNP_PROTO_SIMPLE,
              "allreduce codes %u %u %u", r->dtype, r->algo, r->proto);
        CHECK(r->nchannels == 2 && r->nwarps == 16 && r->peer == -1, "allreduce nch %u nwarps %u root %d", r->nchannels,
              r->nwarps, r->peer);
        CHECK(r->t1 >= r->t0 + 900000, "allreduce host interval %llu..%llu (slept 1 ms)", (unsigned long long)r->t0,
              (unsigned long long)r->t1);
      } else {
        CHECK(r->func == TSNP_FUNC_BROADCAST && r->peer == 3 && r->a1 == 10 && r->dtype == TSNP_DTYPE_BFLOAT16 &&
                  r->algo == TSNP_ALGO_TREE && r->proto == TSNP_PROTO_LL128,
              "broadcast func %u root %d bytes %llu", r->func, r->peer, (unsigned long long)r->a1);
      }
      CHECK(r->task != 0, "collective task 0");
      break;
    case TSNP_P2P:
      p2ps++;
      CHECK(r->a0 == 10 && r->a1 == 80 && r->dtype == TSNP_DTYPE_INT64, "p2p count/bytes %llu/%llu",
            (unsigned long long)r->a0, (unsigned long long)r->a1);
      if (r->func == TSNP_FUNC_SEND)
        CHECK(r->peer == 2 && r->seq == (uint64_t)(p2ps - 1), "send %d: peer %d seq %llu", p2ps, r->peer,
              (unsigned long long)r->seq);
      else
        CHECK(r->func == TSNP_FUNC_RECV && r->peer == 3 && r->seq == 0, "recv: func %u peer %d seq %llu", r->func,
              r->peer, (unsigned long long)r->seq);
      break;
    case TSNP_KERNEL_CHANNEL:
      kernels++;
      CHECK(r->parent_kind == TSNP_COLLECTIVE && r->func == TSNP_FUNC_ALLREDUCE && r->seq == 7,
            "kernel parent kind %u func %u seq %llu", r->parent_kind, r->func, (unsigned long long)r->seq);
      CHECK(r->t0 == 1000000 + 100u * r->channel && r->t1 == 1005000 + 1000u * r->channel,
            "kernel channel %u gpu %llu..%llu", r->channel, (unsigned long long)r->t0, (unsigned long long)r->t1);
      CHECK(r->a0 > 0 && r->a1 >= r->a0, "kernel seen %llu..%llu", (unsigned long long)r->a0, (unsigned long long)r->a1);
      CHECK(r->task == ar_task && ar_task != 0, "kernel task %llu, allreduce task %llu", (unsigned long long)r->task,
            (unsigned long long)ar_task);
      CHECK(r->tid != ar_tid, "kernel channel on the caller's thread %u", r->tid);
      CHECK(r->a0 >= ar_t1, "kernel seen before its parent stopped");
      break;
    case TSNP_PROXY_OP:
      if (r->t1 == 0)
        proxy_starts++;
      else
        proxy_stops++;
      CHECK(r->parent_kind == TSNP_P2P && r->func == TSNP_FUNC_SEND && r->peer == 2 && r->seq == 0 &&
                r->task == send_task && send_task != 0,
            "proxy parent kind %u func %u peer %d seq %llu task %llu (send %llu)", r->parent_kind, r->func, r->peer,
            (unsigned long long)r->seq, (unsigned long long)r->task, (unsigned long long)send_task);
      CHECK(r->a0 == 1 && r->channel < 2 && r->t0 > 0, "proxy send %llu channel %u t0 %llu", (unsigned long long)r->a0,
            r->channel, (unsigned long long)r->t0);
      CHECK(r->t1 == 0 || r->t1 >= r->t0 + 900000, "proxy interval %llu..%llu (slept 1 ms)", (unsigned long long)r->t0,
            (unsigned long long)r->t1);
      break;
    case TSNP_DROPS:
      drops++;
      last_drops = r;
      break;
    }
  }
  CHECK(proxy_starts == 2 && proxy_stops == 2, "proxy starts %d stops %d, want 2 and 2", proxy_starts, proxy_stops);
  CHECK(inits == 1 && fins == 1, "comm init %d finalize %d", inits, fins);
  CHECK(colls == 2 && p2ps == 3 && kernels == 2, "collectives %d p2p %d kernel channels %d", colls, p2ps, kernels);
  CHECK(last_drops != NULL, "no drops record");
  if (last_drops)
    CHECK(last_drops->a0 == 0 && last_drops->a1 == 2 && last_drops->a2 == 0 && last_drops->task == 1,
          "drops ring %llu refused %llu unsent %llu other processes' proxy operations %llu", (unsigned long long)last_drops->a0,
          (unsigned long long)last_drops->a1, (unsigned long long)last_drops->a2, (unsigned long long)last_drops->task);
}

static void test_main(void) {
  struct stream s;
  pid_t pid = run_main_like(main_child, "main", &s);
  check_main_records(&s, pid, 0);
  free(s.buf);
}


/* ---- A full ring. ---- */

static void ring_child(void) {
  ncclProfiler_v5_t* p = load();
  void* ctx = NULL;
  int mask;
  p->init(&ctx, 42, &mask, "small", 1, 2, 0, NULL);
  for (int i = 0; i < 100; i++) {
    ncclProfilerEventDescr_v5_t c = {0};
    c.type = ncclProfileColl;
    c.coll.seqNumber = (uint64_t)i;
    c.coll.func = "AllGather";
    c.coll.count = 1;
    c.coll.datatype = "ncclUint8";
    void* h = NULL;
    p->startEvent(ctx, &h, &c);
    p->stopEvent(h);
  }
  p->finalize(ctx);
}

static void test_ring_full(void) {
  int lfd = listen_unix();
  setenv("TRAINSCOPE_NCCL_SOCKET", sock_path, 1);
  setenv("TRAINSCOPE_NCCL_RING_RECORDS", "64", 1);
  setenv("TRAINSCOPE_NCCL_DRAIN_MS", "60000", 1); /* nothing drained before finalize */
  pid_t pid = spawn(ring_child);
  unsetenv("TRAINSCOPE_NCCL_RING_RECORDS");
  unsetenv("TRAINSCOPE_NCCL_DRAIN_MS");
  struct stream s;
  int status = 0;
  collect(lfd, pid, &s, 10000, 0, &status);
  close(lfd);
  child_ok(status, "ring");
  size_t n = s.len / TSNP_RECORD_SIZE - 1;
  /* 102 pushes (init, 100 collectives, finalize) into 64 places. */
  int colls = 0;
  uint64_t drop = ~0ull;
  for (size_t i = 0; i < n; i++) {
    const struct tsnp_record* r = rec(&s, i);
    if (r->kind == TSNP_COLLECTIVE) {
      CHECK(r->seq == (uint64_t)colls, "collective %d has seq %llu: the oldest must be kept", colls,
            (unsigned long long)r->seq);
      colls++;
    }
    if (r->kind == TSNP_DROPS) drop = r->a0;
  }
  CHECK(colls == 63, "collectives received %d, want 63 (init + 63 fill the ring)", colls);
  CHECK(drop == 38, "ring-full drops reported %llu, want 38", (unsigned long long)drop);
  free(s.buf);
}

/* ---- Group blocks: which ncclGroupStart/End block each p2p came from. ---- */

/* Starts NCCL's event for a Send or Recv call (parent: its group's event,
 * or NULL outside one) and the p2p task of it, as NCCL 2.28 does. */
static void api_p2p(ncclProfiler_v5_t* p, void* ctx, void* group, const char* func, int peer) {
  ncclProfilerEventDescr_v5_t a = {.type = ncclProfileP2pApi, .parentObj = group};
  void* ah = NULL;
  p->startEvent(ctx, &ah, &a);
  if (!ah) _exit(7);
  p->stopEvent(ah);
  p->recordEventState(ah, ncclProfilerKernelChStop, NULL);
  ncclProfilerEventDescr_v5_t q = {.type = ncclProfileP2p, .parentObj = ah};
  q.p2p.func = func;
  q.p2p.count = 4;
  q.p2p.datatype = "ncclFloat32";
  q.p2p.peer = peer;
  q.p2p.nChannels = 1;
  void* qh = NULL;
  p->startEvent(ctx, &qh, &q);
  p->stopEvent(qh);
}

static void api_groups_child(void) {
  ncclProfiler_v5_t* p = load();
  void* ctx = NULL;
  int mask;
  if (p->init(&ctx, 99, &mask, "a2a", 1, 2, 0, NULL) != ncclSuccess) _exit(3);
  /* Two all-to-all blocks over 2 ranks: peer 0 (itself) and 1. */
  for (int b = 0; b < 2; b++) {
    ncclProfilerEventDescr_v5_t g = {.type = ncclProfileGroupApi};
    void* gh = NULL;
    p->startEvent(ctx, &gh, &g);
    if (!gh) _exit(5);
    for (int peer = 0; peer < 2; peer++) {
      api_p2p(p, ctx, gh, "Send", peer);
      api_p2p(p, ctx, gh, "Recv", peer);
    }
    p->stopEvent(gh);
  }
  /* Two calls outside any group event: a block each. */
  api_p2p(p, ctx, NULL, "Send", 1);
  api_p2p(p, ctx, NULL, "Recv", 1);
  p->finalize(ctx);

  /* The v4 interface has no API events: no block numbers. */
  void* h = dlopen(lib_path, RTLD_NOW | RTLD_LOCAL);
  ncclProfiler_v4_t* p4 = dlsym(h, "ncclProfiler_v4");
  if (!p4 || p4->init(&ctx, &mask, "v4", 98, 1, 2, 0, NULL) != ncclSuccess) _exit(6);
  ncclProfilerEventDescr_v4_t q = {.type = ncclProfileP2p};
  q.p2p.func = "Send";
  q.p2p.count = 4;
  q.p2p.datatype = "ncclFloat32";
  q.p2p.peer = 1;
  void* qh = NULL;
  p4->startEvent(ctx, &qh, &q);
  p4->stopEvent(qh);
  p4->finalize(ctx);
}

/* Runs body in a child against a collector here, for at most timeout_ms,
 * and checks it exited 0; s gets what it sent. */
static void run_collected(void (*body)(void), int timeout_ms, const char* what, struct stream* s) {
  int lfd = listen_unix();
  setenv("TRAINSCOPE_NCCL_SOCKET", sock_path, 1);
  pid_t pid = spawn(body);
  int status = 0;
  collect(lfd, pid, s, timeout_ms, 0, &status);
  close(lfd);
  child_ok(status, what);
}

static void test_api_groups(void) {
  struct stream s;
  run_collected(api_groups_child, 10000, "api groups", &s);
  size_t n = s.len / TSNP_RECORD_SIZE - 1;
  uint64_t blocks[8] = {0};
  int nb = 0, v4 = 0;
  for (size_t i = 0; i < n; i++) {
    const struct tsnp_record* r = rec(&s, i);
    if (r->kind != TSNP_P2P) continue;
    if (r->comm_hash == 98) {
      v4++;
      CHECK(r->a2 == 0, "v4 p2p block %llu, want 0 (unknown)", (unsigned long long)r->a2);
      continue;
    }
    if (nb < 8) blocks[nb] = r->a2;
    nb++;
  }
  CHECK(nb == 10 && v4 == 1, "p2p records %d (want 10) and v4 %d (want 1)", nb, v4);
  if (nb != 10) {
    free(s.buf);
    return;
  }
  /* Records come in order from the one thread. */
  for (int i = 0; i < 8; i++) CHECK(blocks[i] != 0, "p2p %d without a block number", i);
  for (int i = 1; i < 4; i++) CHECK(blocks[i] == blocks[0], "block 1: p2p %d numbered %llu, first %llu", i, (unsigned long long)blocks[i], (unsigned long long)blocks[0]);
  for (int i = 5; i < 8; i++) CHECK(blocks[i] == blocks[4], "block 2: p2p %d numbered %llu, first %llu", i, (unsigned long long)blocks[i], (unsigned long long)blocks[4]);
  CHECK(blocks[4] != blocks[0], "two blocks share number %llu", (unsigned long long)blocks[0]);
  const struct tsnp_record* lone[2];
  int nl = 0;
  for (size_t i = 0; i < n && nl < 2; i++) {
    const struct tsnp_record* r = rec(&s, i);
    if (r->kind == TSNP_P2P && r->comm_hash == 99 && nl < 2 && r->a2 != blocks[0] && r->a2 != blocks[4]) lone[nl++] = r;
  }
  CHECK(nl == 2 && lone[0]->a2 != 0 && lone[1]->a2 != 0 && lone[0]->a2 != lone[1]->a2,
        "calls outside a group: want a fresh block number each");
  free(s.buf);
}

/* ---- Event handles whose slot moved on, and proxy operations left out. ---- */

enum { SLOTS = 32768 }; /* the plugin's event slots per pool (TS_SLOTS) */

static void* start_channel(ncclProfiler_v5_t* p, void* ctx, void* parent, uint8_t ch, uint64_t gpu_start) {
  ncclProfilerEventDescr_v5_t d = {0};
  d.type = ncclProfileKernelCh;
  d.parentObj = parent;
  d.kernelCh.channelId = ch;
  d.kernelCh.pTimer = gpu_start;
  void* h = NULL;
  p->startEvent(ctx, &h, &d);
  return h;
}

/* What NCCL's proxy does when it sees a channel's stop. */
static void stop_channel(ncclProfiler_v5_t* p, void* h, uint64_t gpu_stop) {
  ncclProfilerEventStateArgs_v5_t a = {0};
  a.kernelCh.pTimer = gpu_stop;
  p->recordEventState(h, ncclProfilerKernelChStop, &a);
  p->stopEvent(h);
}

static void* start_proxy_op(ncclProfiler_v5_t* p, void* ctx, void* parent, pid_t pid, uint8_t ch) {
  ncclProfilerEventDescr_v5_t d = {0};
  d.type = ncclProfileProxyOp;
  d.parentObj = parent;
  d.proxyOp.pid = pid;
  d.proxyOp.channelId = ch;
  d.proxyOp.peer = 1;
  d.proxyOp.isSend = 1;
  void* h = (void*)1;
  p->startEvent(ctx, &h, &d);
  return h;
}

/* Starts an AllReduce (with stop) or a Send (stop: 0, left in flight). */
static void* start_task(ncclProfiler_v5_t* p, void* ctx, const char* func, int stop) {
  ncclProfilerEventDescr_v5_t d = {0};
  if (strcmp(func, "Send") == 0) {
    d.type = ncclProfileP2p;
    d.p2p.func = func;
    d.p2p.count = 1;
    d.p2p.datatype = "ncclInt8";
    d.p2p.peer = 1;
    d.p2p.nChannels = 1;
  } else {
    d.type = ncclProfileColl;
    d.coll.func = func;
    d.coll.count = 1;
    d.coll.datatype = "ncclInt8";
    d.coll.nChannels = 1;
  }
  void* h = NULL;
  p->startEvent(ctx, &h, &d);
  if (!h) _exit(9);
  if (stop) p->stopEvent(h);
  return h;
}

static const struct tsnp_record* final_drops(const struct stream* s) {
  const struct tsnp_record* d = NULL;
  for (size_t i = 0; s->len >= TSNP_RECORD_SIZE && i < s->len / TSNP_RECORD_SIZE - 1; i++)
    if (rec(s, i)->kind == TSNP_DROPS) d = rec(s, i);
  return d;
}

static void stale_child(void) {
  ncclProfiler_v5_t* p = load();
  void* ctx = NULL;
  int mask;
  if (p->init(&ctx, 55, &mask, "stale", 1, 2, 0, NULL) != ncclSuccess) _exit(3);
  void* coll = start_task(p, ctx, "AllReduce", 1);
  /* A channel still in flight when SLOTS later ones have started (their
   * stops still to come): the last of them has its slot. */
  void* old = start_channel(p, ctx, coll, 1, 100);
  if (!old) _exit(10);
  for (int i = 0; i < SLOTS - 1; i++)
    if (!start_channel(p, ctx, coll, 2, 200)) _exit(11);
  void* cur = start_channel(p, ctx, coll, 3, 300);
  if (!cur) _exit(12);
  /* The old channel's stop, late: refused and counted (2), the new one's
   * record untouched. */
  stop_channel(p, old, 999);
  stop_channel(p, cur, 350);
  /* A handle used again after its stop: refused and counted (2), nothing
   * sent twice. */
  stop_channel(p, cur, 999);
  p->finalize(ctx);
}

static void test_stale_handles(void) {
  struct stream s;
  run_collected(stale_child, 10000, "stale handles", &s);
  size_t n = s.len >= TSNP_RECORD_SIZE ? s.len / TSNP_RECORD_SIZE - 1 : 0;
  int kernels = 0;
  for (size_t i = 0; i < n; i++) {
    const struct tsnp_record* r = rec(&s, i);
    if (r->kind != TSNP_KERNEL_CHANNEL) continue;
    kernels++;
    CHECK(r->channel == 3 && r->t0 == 300 && r->t1 == 350 && r->a0 > 0 && r->a1 >= r->a0,
          "stale: kernel channel %u gpu %llu..%llu seen %llu..%llu, want channel 3 at 300..350", r->channel,
          (unsigned long long)r->t0, (unsigned long long)r->t1, (unsigned long long)r->a0, (unsigned long long)r->a1);
  }
  CHECK(kernels == 1, "stale: %d kernel-channel records, want 1", kernels);
  const struct tsnp_record* d = final_drops(&s);
  CHECK(d != NULL, "stale: no drops record");
  if (d)
    CHECK(d->a0 == 0 && d->a1 == 4, "stale: drops ring %llu refused %llu, want 0 and 4 (two late calls, two after the stop)",
          (unsigned long long)d->a0, (unsigned long long)d->a1);
  free(s.buf);
}

static void orphan_proxy_child(void) {
  ncclProfiler_v5_t* p = load();
  void* ctx = NULL;
  int mask;
  if (p->init(&ctx, 56, &mask, "orphans", 1, 2, 0, NULL) != ncclSuccess) _exit(3);
  void* send = start_task(p, ctx, "Send", 1);
  void* coll = start_task(p, ctx, "AllReduce", 1);
  /* PXN: other processes' operations on this process's proxy thread, with
   * their handles (meaningless here, or by chance one of ours): not
   * recorded, counted apart (2). */
  if (start_proxy_op(p, ctx, send, getpid() + 1, 0)) _exit(10);
  if (start_proxy_op(p, ctx, (void*)(uintptr_t)0x7f00deadbee0u, getpid() + 2, 0)) _exit(11);
  /* A collective's: left out by design, no loss. */
  if (start_proxy_op(p, ctx, coll, getpid(), 0)) _exit(12);
  /* One whose stop comes after SLOTS later events took the slots: its
   * start went out; the stop is refused and counted (1). */
  void* late = start_proxy_op(p, ctx, send, getpid(), 1);
  if (!late) _exit(13);
  for (int i = 0; i < SLOTS; i++)
    if (!start_channel(p, ctx, coll, 2, 200)) _exit(14);
  p->stopEvent(late);
  /* One whose parent's slot was taken by SLOTS later operations: refused
   * and counted (1). */
  for (int i = 0; i < SLOTS; i++) start_task(p, ctx, "Send", 0);
  if (start_proxy_op(p, ctx, send, getpid(), 2)) _exit(15);
  p->finalize(ctx);
}

static void test_orphan_proxy(void) {
  struct stream s;
  run_collected(orphan_proxy_child, 10000, "orphan proxy operations", &s);
  size_t n = s.len >= TSNP_RECORD_SIZE ? s.len / TSNP_RECORD_SIZE - 1 : 0;
  int proxies = 0;
  for (size_t i = 0; i < n; i++) {
    const struct tsnp_record* r = rec(&s, i);
    if (r->kind != TSNP_PROXY_OP) continue;
    proxies++;
    CHECK(r->channel == 1 && r->t1 == 0, "orphans: proxy-op channel %u stop %llu, want only channel 1's start",
          r->channel, (unsigned long long)r->t1);
  }
  CHECK(proxies == 1, "orphans: %d proxy-op records, want 1", proxies);
  const struct tsnp_record* d = final_drops(&s);
  CHECK(d != NULL, "orphans: no drops record");
  if (d)
    CHECK(d->a0 == 0 && d->a1 == 2 && d->task == 2,
          "orphans: drops ring %llu refused %llu other processes' proxy operations %llu, want 0, 2 and 2",
          (unsigned long long)d->a0, (unsigned long long)d->a1, (unsigned long long)d->task);
  free(s.buf);
}

/* A proxy thread's late calls on channels in flight while another thread
 * starts channels into their slots. The late thread calls on the handle
 * that held the slot the next channel takes, again and again (a handle is
 * published once its own calls are done); the other thread's channels (every second one stopped, the rest left in flight,
 * as channels whose stop NCCL never reports) must arrive as they were
 * made, or be counted. */
enum { RACE_EVENTS = 8 * SLOTS };
static ncclProfiler_v5_t* race_p;
static _Atomic uint64_t race_next;
static _Atomic int race_done;
static _Atomic(void*) race_handles[SLOTS];
static _Atomic int race_started;

static void* race_late(void* arg) {
  (void)arg;
  ncclProfilerEventStateArgs_v5_t a = {0};
  a.kernelCh.pTimer = 3;
  atomic_store(&race_started, 1);
  while (!atomic_load(&race_done)) {
    void* h = atomic_load(&race_handles[atomic_load(&race_next) & (SLOTS - 1)]);
    if (h) race_p->recordEventState(h, ncclProfilerKernelChStop, &a);
  }
  return NULL;
}

static void reuse_race_child(void) {
  ncclProfiler_v5_t* p = race_p = load();
  void* ctx = NULL;
  int mask;
  if (p->init(&ctx, 57, &mask, "reuse", 1, 2, 0, NULL) != ncclSuccess) _exit(3);
  void* coll = start_task(p, ctx, "AllReduce", 1);
  pthread_t t;
  if (pthread_create(&t, NULL, race_late, NULL) != 0) _exit(4);
  while (!atomic_load(&race_started)) sched_yield();
  for (uint64_t i = 0; i < RACE_EVENTS; i++) {
    uint64_t t0 = (i + 1) * 16;
    void* h = start_channel(p, ctx, coll, (uint8_t)(i & 63), t0);
    if (!h) _exit(10);
    ncclProfilerEventStateArgs_v5_t a = {0};
    a.kernelCh.pTimer = t0 + 7;
    p->recordEventState(h, ncclProfilerKernelChStop, &a);
    if (i & 1) p->stopEvent(h);
    atomic_store(&race_next, i + 1);
    atomic_store(&race_handles[i & (SLOTS - 1)], h);
  }
  atomic_store(&race_done, 1);
  pthread_join(t, NULL);
  p->finalize(ctx);
}

static void test_slot_reuse_race(void) {
  setenv("TRAINSCOPE_NCCL_RING_RECORDS", "262144", 1); /* every stopped channel's record fits */
  struct stream s;
  run_collected(reuse_race_child, 30000, "slot reuse race", &s);
  unsetenv("TRAINSCOPE_NCCL_RING_RECORDS");
  size_t n = s.len >= TSNP_RECORD_SIZE ? s.len / TSNP_RECORD_SIZE - 1 : 0;
  static uint8_t seen[RACE_EVENTS];
  memset(seen, 0, sizeof seen);
  uint64_t got = 0, bad = 0, twice = 0;
  for (size_t i = 0; i < n; i++) {
    const struct tsnp_record* r = rec(&s, i);
    if (r->kind != TSNP_KERNEL_CHANNEL) continue;
    uint64_t e = r->t0 / 16 - 1;
    if (r->t0 % 16 || r->t0 == 0 || e >= RACE_EVENTS || !(e & 1) || r->channel != (e & 63) || r->t1 != r->t0 + 7 ||
        r->a0 == 0 || r->a1 < r->a0) {
      if (bad++ < 3)
        CHECK(0, "reuse: kernel channel %u gpu %llu..%llu is no channel's as it was made", r->channel,
              (unsigned long long)r->t0, (unsigned long long)r->t1);
      continue;
    }
    twice += seen[e];
    seen[e] = 1;
    got++;
  }
  CHECK(bad == 0 && twice == 0, "reuse: %llu records corrupt, %llu sent twice", (unsigned long long)bad,
        (unsigned long long)twice);
  const struct tsnp_record* d = final_drops(&s);
  CHECK(d != NULL, "reuse: no drops record");
  uint64_t want = RACE_EVENTS / 2;
  if (d) {
    CHECK(got + d->a0 + d->a2 >= want,
          "reuse: %llu of %llu stopped channels arrived, %llu lost to a full ring, %llu unsent: the rest lost uncounted",
          (unsigned long long)got, (unsigned long long)want, (unsigned long long)d->a0, (unsigned long long)d->a2);
    CHECK(d->a1 > 0, "reuse: no late call refused (counted)");
  }
  free(s.buf);
}

/* ---- No collector, and a collector that never reads. ---- */

/* Starts and stops n collectives of func on ctx, as fast as it can. */
static void issue(ncclProfiler_v5_t* p, void* ctx, const char* func, size_t count, const char* dtype, int n) {
  for (int i = 0; i < n; i++) {
    ncclProfilerEventDescr_v5_t c = {0};
    c.type = ncclProfileColl;
    c.coll.func = func;
    c.coll.count = count;
    c.coll.datatype = dtype;
    void* h = NULL;
    p->startEvent(ctx, &h, &c);
    p->stopEvent(h);
  }
}

static void busy_child(void) {
  ncclProfiler_v5_t* p = load();
  void* ctx = NULL;
  int mask;
  if (p->init(&ctx, 7, &mask, NULL, 1, 2, 0, NULL) != ncclSuccess || mask == 0) _exit(3);
  issue(p, ctx, "ReduceScatter", 4, "ncclFloat16", 200000);
  uint64_t t = mono_ms();
  p->finalize(ctx);
  if (mono_ms() - t > 1000) _exit(20); /* finalize must not wait on the collector */
}

static void test_no_collector(void) {
  unsetenv("TRAINSCOPE_NCCL_SOCKET");
  pid_t pid = spawn(busy_child);
  int status;
  waitpid(pid, &status, 0);
  child_ok(status, "no socket configured");

  setenv("TRAINSCOPE_NCCL_SOCKET", "/nonexistent/trainscope.sock", 1);
  pid = spawn(busy_child);
  waitpid(pid, &status, 0);
  child_ok(status, "socket path with no listener");
}

static void test_stuck_collector(void) {
  int lfd = listen_unix();
  setenv("TRAINSCOPE_NCCL_SOCKET", sock_path, 1);
  pid_t pid = spawn(busy_child);
  struct stream s;
  int status = 0;
  uint64_t t = mono_ms();
  collect(lfd, pid, &s, 10000, 1, &status);
  close(lfd);
  child_ok(status, "collector that never reads");
  CHECK(mono_ms() - t < 5000, "child took %llu ms", (unsigned long long)(mono_ms() - t));
  free(s.buf);
}

/* Reads every connection to its end (first, where given, holds what was
 * already read of the first) and checks that the records that arrived
 * and those the process's last counts say it lost add up to want (not
 * without what); broadcasts, where given, counts the Broadcasts among
 * them. */
static void check_tally_from(struct stream* first, int* conns, int nconn, uint64_t want, const char* what,
                             uint64_t* broadcasts) {
  uint64_t received = 0, ring_full = 0, refused = 0, unsent = 0;
  struct stream s = {0};
  for (int i = 0; i < nconn; i++) {
    struct stream* cur = i == 0 && first ? first : &s;
    if (cur == &s) s.len = 0;
    for (;;) {
      if (cur->cap - cur->len < 65536) cur->buf = realloc(cur->buf, cur->cap = cur->cap * 2 + 65536);
      ssize_t got = read(conns[i], cur->buf + cur->len, cur->cap - cur->len);
      if (got <= 0) break;
      cur->len += (size_t)got;
    }
    close(conns[i]);
    size_t n = cur->len / TSNP_RECORD_SIZE; /* a record cut short at the end is not one */
    for (size_t j = 1; j < n; j++) {
      const struct tsnp_record* r = rec(cur, j - 1);
      if (r->kind == TSNP_DROPS) {
        ring_full = r->a0 > ring_full ? r->a0 : ring_full;
        refused = r->a1 > refused ? r->a1 : refused;
        unsent = r->a2 > unsent ? r->a2 : unsent;
      } else {
        received++;
        if (broadcasts && r->kind == TSNP_COLLECTIVE && r->func == TSNP_FUNC_BROADCAST) ++*broadcasts;
      }
    }
  }
  free(s.buf);
  if (!what) return; /* the caller counts only the broadcasts */
  CHECK(ring_full + unsent > 0, "%s: nothing lost: the collector was not behind enough to test this", what);
  CHECK(received + ring_full + refused + unsent == want,
        "%s: %llu records arrived, %llu dropped with the ring full, %llu refused, %llu unsent: %llu, want %llu", what,
        (unsigned long long)received, (unsigned long long)ring_full, (unsigned long long)refused,
        (unsigned long long)unsent, (unsigned long long)(received + ring_full + refused + unsent),
        (unsigned long long)want);
}

static void check_tally(int* conns, int nconn, uint64_t want, const char* what) {
  check_tally_from(NULL, conns, nconn, want, what, NULL);
}

/* A collector behind when the process ends: busy_child's 200,002 records
 * (init, 200,000 collectives, finalize) cannot all go out, and finalize
 * waits a bounded time. Whatever did not arrive must be counted: the last
 * counts come over a second connection, which a collector whose first is
 * stuck still reads. This one reads nothing until the child has exited,
 * then everything. */
/* Runs body in a child against a collector here that accepts every
 * connection and, with rate (bytes a millisecond), reads the first at that
 * rate into first; without, reads nothing until the child has exited.
 * Then accepts the connections made since (the tally's), for the caller
 * to read to their end. Returns how long the child took. */
static uint64_t run_behind(void (*body)(void), size_t rate, struct stream* first, int* conns, int* nconn,
                           const char* what) {
  int lfd = listen_unix();
  setenv("TRAINSCOPE_NCCL_SOCKET", sock_path, 1);
  uint64_t t = mono_ms();
  pid_t pid = spawn(body);
  int status = 0, exited = 0;
  char* buf = rate ? malloc(rate) : NULL;
  *nconn = 0;
  while (mono_ms() - t < 10000) {
    if (waitpid(pid, &status, WNOHANG) == pid) {
      exited = 1;
      break;
    }
    struct pollfd p = {.fd = lfd, .events = POLLIN};
    if (poll(&p, 1, rate ? 0 : 20) > 0) {
      int c = accept(lfd, NULL, NULL);
      if (c >= 0 && *nconn < 4) conns[(*nconn)++] = c;
    }
    if (rate && *nconn > 0) {
      ssize_t got = recv(conns[0], buf, rate, MSG_DONTWAIT);
      if (got > 0) {
        if (first->cap - first->len < (size_t)got)
          first->buf = realloc(first->buf, first->cap = first->cap * 2 + 65536);
        memcpy(first->buf + first->len, buf, (size_t)got);
        first->len += (size_t)got;
      }
      struct timespec ms = {0, 1000000};
      nanosleep(&ms, NULL);
    }
  }
  uint64_t took = mono_ms() - t;
  free(buf);
  if (!exited) {
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
  }
  child_ok(status, what);
  for (;;) { /* the connections made since: the tally's */
    struct pollfd p = {.fd = lfd, .events = POLLIN};
    if (poll(&p, 1, 200) <= 0) break;
    int c = accept(lfd, NULL, NULL);
    if (c >= 0 && *nconn < 4) conns[(*nconn)++] = c;
  }
  close(lfd);
  return took;
}

static void test_exit_tally(void) {
  int conns[4], nconn;
  uint64_t took = run_behind(busy_child, 0, NULL, conns, &nconn, "exit with the collector behind");
  CHECK(took < 5000, "the child took %llu ms to end with the collector behind", (unsigned long long)took);
  CHECK(nconn == 2, "%d connections, want 2: the stream, then the count of what it could not carry", nconn);
  check_tally(conns, nconn, 200002, "the collector reading nothing until the child exited");
}

/* The same with a collector that reads steadily, but slower than the
 * process records (4 KB a millisecond): the drainer, forever finding a
 * full batch to send and room on the socket soon after, must still hear
 * the stop and make its tally in time. Before it did, it sent batch after
 * batch past the stop's deadline, was left behind as the process exited,
 * and the last ring's worth of records went uncounted. */
static _Atomic uint64_t* produced; /* shared with the child */

/* Maps produced where parent and child share it; 0 where it cannot. */
static int map_produced(void) {
  produced = mmap(NULL, sizeof *produced, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  CHECK(produced != MAP_FAILED, "mmap: %s", strerror(errno));
  return produced != MAP_FAILED;
}

static void steady_child(void) {
  ncclProfiler_v5_t* p = load();
  void* ctx = NULL;
  int mask;
  if (p->init(&ctx, 9, &mask, NULL, 1, 2, 0, NULL) != ncclSuccess || mask == 0) _exit(3);
  uint64_t n = 0, t = mono_ms();
  for (; mono_ms() - t < 800; n += 1000) issue(p, ctx, "AllGather", 8, "ncclFloat32", 1000);
  atomic_store(produced, n + 2); /* and the communicator's init and finalize */
  p->finalize(ctx);
}

static void test_slow_collector(void) {
  if (!map_produced()) return;
  int conns[4], nconn;
  struct stream first = {0}; /* what is read of the first connection meanwhile, counted with the rest */
  run_behind(steady_child, 4096, &first, conns, &nconn, "exit with the collector reading slowly");
  CHECK(first.len > (size_t)1 << 20, "only %zu bytes read while the child ran", first.len);
  check_tally_from(&first, conns, nconn, atomic_load(produced), "the collector reading slowly", NULL);
  free(first.buf);
  munmap((void*)produced, sizeof *produced);
}

/* A thread that records little beside one that floods its ring, with the
 * collector behind: the few must all arrive, the flood's excess being
 * what is dropped. The drainer had filled each batch from the rings in
 * list order, the newest ring first, and a ring that always had a batch
 * to give starved those after it: under a flood of kernels, a job's NVTX
 * step ranges and NCCL operations were what it lost. */
static _Atomic int flooding;

static void* flood(void* ctx) {
  ncclProfiler_v5_t* p = load();
  while (atomic_load(&flooding)) issue(p, ctx, "AllGather", 8, "ncclFloat32", 1000);
  return NULL;
}

static void sparse_child(void) {
  ncclProfiler_v5_t* p = load();
  void* ctx = NULL;
  int mask;
  if (p->init(&ctx, 11, &mask, NULL, 1, 2, 0, NULL) != ncclSuccess || mask == 0) _exit(3);
  issue(p, ctx, "Broadcast", 4, "ncclInt8", 1); /* this thread's ring first: the flood's is newer */
  atomic_store(&flooding, 1);
  pthread_t t;
  if (pthread_create(&t, NULL, flood, ctx) != 0) _exit(4);
  uint64_t n = 1, start = mono_ms();
  for (; mono_ms() - start < 800; n++) {
    issue(p, ctx, "Broadcast", 4, "ncclInt8", 1);
    struct timespec ms = {0, 1000000};
    nanosleep(&ms, NULL);
  }
  atomic_store(&flooding, 0);
  pthread_join(t, NULL);
  atomic_store(produced, n);
  p->finalize(ctx);
}

static void test_sparse_beside_flood(void) {
  if (!map_produced()) return;
  int conns[4], nconn;
  struct stream first = {0};
  run_behind(sparse_child, 4096, &first, conns, &nconn, "a sparse thread beside a flood");
  uint64_t broadcasts = 0, want = atomic_load(produced);
  check_tally_from(&first, conns, nconn, 0, NULL, &broadcasts);
  CHECK(want > 100 && broadcasts == want, "%llu of the sparse thread's %llu collectives arrived beside the flood",
        (unsigned long long)broadcasts, (unsigned long long)want);
  free(first.buf);
  munmap((void*)produced, sizeof *produced);
}

/* ---- Tuning values out of range. ---- */

/* This process's threads. */
static int tasks(void) {
  DIR* d = opendir("/proc/self/task");
  if (!d) return -1;
  int n = 0;
  for (struct dirent* e; (e = readdir(d));)
    if (e->d_name[0] != '.') n++;
  closedir(d);
  return n;
}

static double cpu_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* TRAINSCOPE_NCCL_DRAIN_MS=-5 wrapped to a negative interval, and the
 * drainer spun a core; TRAINSCOPE_NCCL_RING_RECORDS=-1 gave a ring of
 * 2 GiB, every page touched. Both are the defaults now. */
static void env_child(void) {
  ncclProfiler_v5_t* p = load();
  void* ctx = NULL;
  int mask;
  if (p->init(&ctx, 11, &mask, "env", 1, 2, 0, NULL) != ncclSuccess || mask == 0) _exit(3);
  issue(p, ctx, "AllReduce", 4, "ncclFloat32", 10); /* this thread's ring exists now */
  double before = cpu_seconds();
  struct timespec pause = {0, 300 * 1000000};
  nanosleep(&pause, NULL);
  double used = cpu_seconds() - before;
  long pages = 0, resident = 0;
  FILE* f = fopen("/proc/self/statm", "r");
  if (f) {
    if (fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
    fclose(f);
  }
  double rss_mib = (double)resident * (double)sysconf(_SC_PAGESIZE) / (1 << 20);
  CHECK(used < 0.1, "idle for 0.3 s with DRAIN_MS=-5: %.3f s of CPU used (a spinning drainer)", used);
  CHECK(rss_mib < 256, "resident %.0f MiB with RING_RECORDS=-1 (a ring past its bound)", rss_mib);
  p->finalize(ctx);
  exit(failures ? 40 : 0);
}

static void test_env_bounds(void) {
  unsetenv("TRAINSCOPE_NCCL_SOCKET");
  setenv("TRAINSCOPE_NCCL_DRAIN_MS", "-5", 1);
  setenv("TRAINSCOPE_NCCL_RING_RECORDS", "-1", 1);
  pid_t pid = spawn(env_child);
  unsetenv("TRAINSCOPE_NCCL_DRAIN_MS");
  unsetenv("TRAINSCOPE_NCCL_RING_RECORDS");
  int status;
  waitpid(pid, &status, 0);
  child_ok(status, "tuning values out of range");
}

/* ---- The drainer stopped and started again. ---- */

/* The last communicator's finalize stops the drainer; one made at once
 * after starts it again. Never two drainers (they would share the rings
 * and the socket), and the second communicator's records arrive. */
static void restart_child(void) {
  failures = 0; /* the parent's are its own */
  ncclProfiler_v5_t* p = load();
  int mask;
  for (int round = 0; round < 12; round++) { /* a connection each, at most: collect takes 32 */
    void* ctx = NULL;
    if (p->init(&ctx, 100 + (uint64_t)round, &mask, "restart", 1, 2, 0, NULL) != ncclSuccess || mask == 0) _exit(3);
    /* A drainer runs: this thread and it (a stopped one may still be
     * on its way out of the process, never draining). */
    CHECK(tasks() >= 2, "round %d: %d threads with a communicator open: no drainer", round, tasks());
    issue(p, ctx, "Broadcast", 4, "ncclFloat32", 5);
    p->finalize(ctx);
  }
  exit(failures ? 40 : 0);
}

static void test_restart(void) {
  struct stream s;
  run_collected(restart_child, 20000, "drainer restarted", &s);
  /* Each drainer connects anew: a hello, then records, per connection. */
  size_t casts = 0;
  for (size_t off = 0; off + TSNP_RECORD_SIZE <= s.len; off += TSNP_RECORD_SIZE) {
    const struct tsnp_record* r = (const struct tsnp_record*)(s.buf + off);
    if (memcmp(r, TSNP_MAGIC, 4) != 0 && r->kind == TSNP_COLLECTIVE) casts++;
  }
  CHECK(casts == 12 * 5, "%zu Broadcasts arrived over %d connections, want %d", casts, s.connections, 12 * 5);
  free(s.buf);
}

/* ---- No thread-specific key left for the plugin. ---- */

/* A process that has used up its pthread keys (PTHREAD_KEYS_MAX) before
 * the plugin sets up: the plugin's pthread_key_create fails, and it must
 * not then store its ring in key 0, which belongs to someone else (here
 * this process; under AddressSanitizer, ASan's own thread key): that
 * owner would find a ring where its value was, and its destructor would
 * get the ring at thread exit. Whatever it cannot record is counted. */
struct key_args {
  ncclProfiler_v5_t* p;
  void* ctx;
  void* before; /* key 0's value in the thread before the event, and after */
  void* after;
};

static void* key_thread(void* arg) {
  struct key_args* k = arg;
  k->before = pthread_getspecific(0);
  issue(k->p, k->ctx, "AllReduce", 4, "ncclFloat32", 1);
  k->after = pthread_getspecific(0);
  if (k->after != k->before) pthread_setspecific(0, k->before); /* for the owner's destructor */
  return NULL;
}

static void no_key_child(void) {
  failures = 0;
  pthread_key_t k;
  int made = 0;
  while (pthread_key_create(&k, NULL) == 0) made++;
  CHECK(made > 0, "no pthread key could be made: nothing to test");
  ncclProfiler_v5_t* p = load();
  void* ctx = NULL;
  int mask;
  if (p->init(&ctx, 12, &mask, "nokey", 1, 2, 0, NULL) != ncclSuccess || !ctx) _exit(3);
  struct key_args a = {p, ctx, NULL, NULL};
  pthread_t t;
  if (pthread_create(&t, NULL, key_thread, &a) != 0) _exit(4);
  pthread_join(t, NULL);
  CHECK(a.after == a.before, "the plugin stored %p in pthread key 0, another's (it held %p)", a.after, a.before);
  p->finalize(ctx);
  exit(failures ? 40 : 0);
}

static void test_no_key(void) {
  struct stream s;
  run_collected(no_key_child, 10000, "no pthread key left", &s);
  size_t n = s.len >= TSNP_RECORD_SIZE ? s.len / TSNP_RECORD_SIZE - 1 : 0;
  uint64_t received = 0, refused = 0, ring_full = 0, unsent = 0;
  for (size_t i = 0; i < n; i++) {
    const struct tsnp_record* r = rec(&s, i);
    if (r->kind == TSNP_DROPS) {
      ring_full = r->a0, refused = r->a1, unsent = r->a2;
    } else {
      received++;
    }
  }
  /* The communicator's init, the AllReduce, the finalize. */
  CHECK(received + ring_full + refused + unsent == 3,
        "no pthread key: %llu records arrived, %llu dropped, %llu refused, %llu unsent: want 3 in all",
        (unsigned long long)received, (unsigned long long)ring_full, (unsigned long long)refused,
        (unsigned long long)unsent);
  free(s.buf);
}

/* ---- A thread cancelled while it waits on the drainer. ---- */

/* The application cancels a thread (pthread_cancel, deferred) that is
 * destroying the last communicator: the finalize's wait for the drainer
 * is a cancellation point, where the thread would end holding the
 * plugin's lock, and the exit hook, taking it, would hang the process
 * at exit. */
static _Atomic int cancel_go;

static void* cancelled_thread(void* arg) {
  void** a = arg;
  ncclProfiler_v5_t* p = a[0];
  while (!atomic_load(&cancel_go)) {
  }
  p->finalize(a[1]); /* the cancel is pending: the first cancellation point acts on it */
  return NULL;
}

static void cancel_child(void) {
  ncclProfiler_v5_t* p = load();
  void* ctx = NULL;
  int mask;
  if (p->init(&ctx, 13, &mask, "cancel", 1, 2, 0, NULL) != ncclSuccess || !ctx) _exit(3);
  /* More than the socket holds, with the collector not reading: the
   * finalize's flush waits for the drainer, blocked on the socket. */
  issue(p, ctx, "AllReduce", 4, "ncclFloat32", 200000);
  void* a[2] = {p, ctx};
  pthread_t t;
  if (pthread_create(&t, NULL, cancelled_thread, a) != 0) _exit(4);
  pthread_cancel(t);
  atomic_store(&cancel_go, 1);
  void* ret = NULL;
  pthread_join(t, &ret);
  exit(0); /* the exit hook runs */
}

static void test_cancelled_finalize(void) {
  int conns[4], nconn;
  uint64_t took = run_behind(cancel_child, 0, NULL, conns, &nconn, "a thread cancelled in finalize");
  CHECK(took < 5000, "the child took %llu ms to exit after a thread was cancelled in finalize",
        (unsigned long long)took);
  for (int i = 0; i < nconn; i++) close(conns[i]);
}

/* ---- An event from a thread's exit, after its ring has gone back. ---- */

/* A thread-specific destructor that runs after the plugin's (its key made
 * later) and makes an NCCL call: the thread's ring is no longer its own,
 * so nothing is recorded, and the record lost is counted. */
struct late_args {
  ncclProfiler_v5_t* p;
  void* ctx;
};
static pthread_key_t late_key;

static void late_destructor(void* arg) {
  struct late_args* a = arg;
  issue(a->p, a->ctx, "AllReduce", 4, "ncclFloat32", 1);
}

static void* late_thread(void* arg) {
  struct late_args* a = arg;
  issue(a->p, a->ctx, "AllReduce", 4, "ncclFloat32", 1);
  pthread_setspecific(late_key, a);
  return NULL;
}

static void late_child(void) {
  ncclProfiler_v5_t* p = load();
  void* ctx = NULL;
  int mask;
  if (p->init(&ctx, 14, &mask, "late", 1, 2, 0, NULL) != ncclSuccess || !ctx) _exit(3);
  if (pthread_key_create(&late_key, late_destructor) != 0) _exit(4);
  struct late_args a = {p, ctx};
  pthread_t t;
  if (pthread_create(&t, NULL, late_thread, &a) != 0) _exit(5);
  pthread_join(t, NULL);
  p->finalize(ctx);
}

static void test_late_destructor(void) {
  struct stream s;
  run_collected(late_child, 10000, "an event from a thread's exit", &s);
  size_t n = s.len >= TSNP_RECORD_SIZE ? s.len / TSNP_RECORD_SIZE - 1 : 0;
  uint64_t colls = 0, refused = 0;
  for (size_t i = 0; i < n; i++) {
    const struct tsnp_record* r = rec(&s, i);
    if (r->kind == TSNP_DROPS) refused = r->a1;
    colls += r->kind == TSNP_COLLECTIVE;
  }
  CHECK(colls == 1 && refused == 1, "an event at thread exit: %llu collectives arrived (want 1), %llu refused (want 1)",
        (unsigned long long)colls, (unsigned long long)refused);
  free(s.buf);
}

/* ---- NVTX: this process plays an NVTX v3 instance loading the plugin. ---- */

/* What a library built with the NVTX headers holds: its function-pointer
 * slots, the tables of pointers to them it hands out per module, and its
 * callbacks export table. The slots start NULL here (NVTX's own hold its
 * initialising functions). Two instances, as a process with PyTorch and
 * NCCL has. */
struct fake_nvtx {
  NvtxFunctionPointer core[NVTX_CBID_CORE_SIZE], core2[NVTX_CBID_CORE2_SIZE];
  NvtxFunctionPointer* core_tab[NVTX_CBID_CORE_SIZE + 1];
  NvtxFunctionPointer* core2_tab[NVTX_CBID_CORE2_SIZE + 1];
  unsigned core_size; /* what GetModuleFunctionTable reports for CORE */
  NvtxExportTableCallbacks cb;
};

static struct fake_nvtx fakes[3];

static int fake_module(struct fake_nvtx* f, int module, NvtxFunctionTable* out, unsigned* size) {
  switch (module) {
  case NVTX_CB_MODULE_CORE:
    *out = f->core_tab;
    *size = f->core_size;
    return 1;
  case NVTX_CB_MODULE_CORE2:
    *out = f->core2_tab;
    *size = NVTX_CBID_CORE2_SIZE;
    return 1;
  }
  return 0;
}

static int fake_module0(int m, NvtxFunctionTable* t, unsigned* n) { return fake_module(&fakes[0], m, t, n); }
static int fake_module1(int m, NvtxFunctionTable* t, unsigned* n) { return fake_module(&fakes[1], m, t, n); }
static int fake_module2(int m, NvtxFunctionTable* t, unsigned* n) { return fake_module(&fakes[2], m, t, n); }

static const void* fake_get0(uint32_t id) { return id == NVTX_ETID_CALLBACKS ? &fakes[0].cb : NULL; }
static const void* fake_get1(uint32_t id) { return id == NVTX_ETID_CALLBACKS ? &fakes[1].cb : NULL; }
/* An instance whose CORE table is too short for the pop slot. */
static const void* fake_get_short(uint32_t id) { return id == NVTX_ETID_CALLBACKS ? &fakes[2].cb : NULL; }
/* No callbacks table, and one of a size too small to hold the function. */
static const void* fake_get_none(uint32_t id) {
  (void)id;
  return NULL;
}
static const void* fake_get_small(uint32_t id) {
  static const NvtxExportTableCallbacks small = {sizeof(size_t), NULL};
  return id == NVTX_ETID_CALLBACKS ? &small : NULL;
}

static void fake_init(struct fake_nvtx* f, int (*module)(int, NvtxFunctionTable*, unsigned*), unsigned core_size) {
  memset(f, 0, sizeof *f);
  for (int i = 1; i < NVTX_CBID_CORE_SIZE; i++) f->core_tab[i] = &f->core[i];
  for (int i = 1; i < NVTX_CBID_CORE2_SIZE; i++) f->core2_tab[i] = &f->core2[i];
  f->core_size = core_size;
  f->cb.struct_size = sizeof f->cb;
  f->cb.GetModuleFunctionTable = module;
}

/* NVTX's side of the loading: dlopen the NVTX_INJECTION64_PATH file lazily
 * and look the entry point up. */
static NvtxInitializeInjectionNvtxFunc_t inject(void) {
  void* h = dlopen(lib_path, RTLD_LAZY);
  if (!h) {
    fprintf(stderr, "dlopen %s: %s\n", lib_path, dlerror());
    _exit(2);
  }
  NvtxInitializeInjectionNvtxFunc_t init = (NvtxInitializeInjectionNvtxFunc_t)dlsym(h, "InitializeInjectionNvtx2");
  if (!init) {
    fprintf(stderr, "InitializeInjectionNvtx2 missing\n");
    _exit(2);
  }
  return init;
}

/* The NVTX API of an instance: what its nvtxRangePushA etc. call. */
struct nvtx_api {
  nvtxRangePushA_fn push_a;
  nvtxRangePushW_fn push_w;
  nvtxRangePushEx_fn push_ex;
  nvtxRangePop_fn pop;
  nvtxDomainRangePushEx_fn dpush;
  nvtxDomainRangePop_fn dpop;
  nvtxDomainCreateA_fn create_a;
  nvtxDomainCreateW_fn create_w;
};

static struct nvtx_api api_of(const struct fake_nvtx* f) {
  struct nvtx_api a = {
      (nvtxRangePushA_fn)f->core[NVTX_CBID_CORE_RangePushA],
      (nvtxRangePushW_fn)f->core[NVTX_CBID_CORE_RangePushW],
      (nvtxRangePushEx_fn)f->core[NVTX_CBID_CORE_RangePushEx],
      (nvtxRangePop_fn)f->core[NVTX_CBID_CORE_RangePop],
      (nvtxDomainRangePushEx_fn)f->core2[NVTX_CBID_CORE2_DomainRangePushEx],
      (nvtxDomainRangePop_fn)f->core2[NVTX_CBID_CORE2_DomainRangePop],
      (nvtxDomainCreateA_fn)f->core2[NVTX_CBID_CORE2_DomainCreateA],
      (nvtxDomainCreateW_fn)f->core2[NVTX_CBID_CORE2_DomainCreateW],
  };
  return a;
}

static nvtxEventAttributes_t ascii_attr(const char* msg) {
  nvtxEventAttributes_t a;
  memset(&a, 0, sizeof a);
  a.version = 3;
  a.size = sizeof a;
  a.colorType = 1;
  a.color = 0xff00ff00u;
  a.messageType = NVTX_MESSAGE_TYPE_ASCII;
  a.message.ascii = msg;
  return a;
}

/* Injects into instance 0 (and, with second, into instance 1 as well),
 * checking which slots the plugin filled. */
static struct nvtx_api nvtx_up(int second) {
  NvtxInitializeInjectionNvtxFunc_t init = inject();
  fake_init(&fakes[0], fake_module0, NVTX_CBID_CORE_SIZE);
  fake_init(&fakes[1], fake_module1, NVTX_CBID_CORE_SIZE);
  if (init(fake_get0) == 0) _exit(30);
  if (second && init(fake_get1) == 0) _exit(31);
  for (int k = 0; k <= second; k++) {
    const struct fake_nvtx* f = &fakes[k];
    for (int i = 0; i < NVTX_CBID_CORE_SIZE; i++) {
      int want = i == NVTX_CBID_CORE_RangePushA || i == NVTX_CBID_CORE_RangePushW || i == NVTX_CBID_CORE_RangePushEx ||
                 i == NVTX_CBID_CORE_RangePop;
      if ((f->core[i] != NULL) != want) _exit(32);
    }
    for (int i = 0; i < NVTX_CBID_CORE2_SIZE; i++) {
      int want = i == NVTX_CBID_CORE2_DomainRangePushEx || i == NVTX_CBID_CORE2_DomainRangePop ||
                 i == NVTX_CBID_CORE2_DomainCreateA || i == NVTX_CBID_CORE2_DomainCreateW;
      if ((f->core2[i] != NULL) != want) _exit(33);
    }
  }
  return api_of(&fakes[0]);
}

#define NVTX_EXPECT(call, want)                                                \
  do {                                                                         \
    int got_ = (call);                                                         \
    CHECK(got_ == (want), "%s returned %d, want %d", #call, got_, (int)(want)); \
  } while (0)

static const char long_name[] =
    "a-range-name-longer-than-the-seventy-two-bytes-a-record-holds-0123456789-and-some-more";

static void* nvtx_other_thread(void* arg) {
  const struct nvtx_api* a = arg;
  NVTX_EXPECT(a->pop(), -1);
  NVTX_EXPECT(a->push_a("t2"), 0);
  nvtxEventAttributes_t in = ascii_attr("t2-inner");
  NVTX_EXPECT(a->push_ex(&in), 1);
  NVTX_EXPECT(a->pop(), 1);
  NVTX_EXPECT(a->pop(), 0);
  return NULL;
}

/* The NVTX case: no NCCL at all; the child checks what the hooks return,
 * the parent what arrives. */
static void nvtx_child(void) {
  NvtxInitializeInjectionNvtxFunc_t init = inject();
  /* No callbacks table, or one that cannot be used: 0, and nothing set up. */
  fake_init(&fakes[2], fake_module2, NVTX_CBID_CORE_RangePop);
  NVTX_EXPECT(init(NULL), 0);
  NVTX_EXPECT(init(fake_get_none), 0);
  NVTX_EXPECT(init(fake_get_small), 0);
  NVTX_EXPECT(init(fake_get_short), 0);
  for (int i = 0; i < NVTX_CBID_CORE_SIZE; i++) CHECK(fakes[2].core[i] == NULL, "short table: slot %d written", i);

  struct nvtx_api a = nvtx_up(1), b = api_of(&fakes[1]);
  CHECK(a.push_a == b.push_a && a.dpop == b.dpop, "instances got different hooks");

  NVTX_EXPECT(a.pop(), -1); /* nothing pushed: an error, nothing sent */
  NVTX_EXPECT(a.push_a("outer"), 0);
  nvtxEventAttributes_t ex = ascii_attr("inner-ex");
  NVTX_EXPECT(a.push_ex(&ex), 1);
  nvtxEventAttributes_t dd = ascii_attr("default-domain");
  NVTX_EXPECT(b.dpush(NULL, &dd), 2); /* another instance, the same thread stack */
  nvtxDomainHandle_t other = a.create_a("other"), other_w = b.create_w(L"other-w");
  CHECK(other != NULL && other_w != NULL, "named domains got NULL (the default domain)");
  nvtxEventAttributes_t ig = ascii_attr("ignored");
  NVTX_EXPECT(a.dpush(other, &ig), NVTX_NO_PUSH_POP_TRACKING);
  nvtxEventAttributes_t wide;
  memset(&wide, 0, sizeof wide);
  wide.version = 3;
  wide.size = sizeof wide;
  wide.messageType = NVTX_MESSAGE_TYPE_UNICODE;
  wide.message.unicode = L"wide";
  NVTX_EXPECT(a.push_ex(&wide), 3);
  NVTX_EXPECT(a.dpop(other), NVTX_NO_PUSH_POP_TRACKING);
  NVTX_EXPECT(a.pop(), 3);
  NVTX_EXPECT(a.dpop(NULL), 2);
  NVTX_EXPECT(b.pop(), 1);
  NVTX_EXPECT(a.push_a(long_name), 1);
  NVTX_EXPECT(a.pop(), 1);
  NVTX_EXPECT(a.pop(), 0);
  NVTX_EXPECT(a.pop(), -1);
  NVTX_EXPECT(b.dpop(other_w), NVTX_NO_PUSH_POP_TRACKING);

  /* Deeper than tracked: levels 16-19 are counted, not sent. */
  for (int i = 0; i < 20; i++) {
    char name[16];
    snprintf(name, sizeof name, "lvl%d", i);
    NVTX_EXPECT(a.push_a(name), i);
  }
  for (int i = 19; i >= 0; i--) NVTX_EXPECT(a.pop(), i);
  NVTX_EXPECT(a.pop(), -1);

  NVTX_EXPECT(a.push_w(L"wide"), 0);
  NVTX_EXPECT(a.pop(), 0);
  NVTX_EXPECT(a.push_a("after"), 0);
  usleep(1000);
  NVTX_EXPECT(a.pop(), 0);

  pthread_t t;
  pthread_create(&t, NULL, nvtx_other_thread, &b);
  pthread_join(t, NULL);
  /* Exit without any communicator: the library's exit hook sends what is
   * left (exit, not spawn's _exit, runs it). */
  exit(failures ? 40 : 0);
}

struct want_range {
  uint16_t flags;
  uint64_t ordinal;
  int32_t depth;
  const char* name;
  uint64_t lost;
};

/* Checks one thread's RANGE records against want, in order. START
 * records must carry the t0 of their end record. */
static void check_ranges(const struct stream* s, uint32_t tid, const struct want_range* want, size_t nwant) {
  size_t n = s->len / TSNP_RECORD_SIZE - 1, k = 0;
  uint64_t start_t0[64] = {0};
  for (size_t i = 0; i < n; i++) {
    const struct tsnp_range* r = (const struct tsnp_range*)(s->buf + TSNP_RECORD_SIZE * (i + 1));
    if (r->kind != TSNP_RANGE || r->tid != tid) continue;
    if (k >= nwant) {
      CHECK(0, "tid %u: extra range record %zu (ordinal %llu)", tid, k, (unsigned long long)r->ordinal);
      k++;
      continue;
    }
    const struct want_range* w = &want[k++];
    size_t len = strlen(w->name);
    uint16_t flags = w->flags | (len > sizeof r->name ? TSNP_RANGE_TRUNCATED : 0);
    CHECK(r->flags == flags && r->ordinal == w->ordinal && r->depth == w->depth && r->lost == w->lost && r->domain == 0,
          "tid %u range %zu: flags %u ordinal %llu depth %d lost %llu domain %llu, want %u %llu %d %llu 0", tid, k - 1,
          r->flags, (unsigned long long)r->ordinal, r->depth, (unsigned long long)r->lost,
          (unsigned long long)r->domain, flags, (unsigned long long)w->ordinal, w->depth, (unsigned long long)w->lost);
    CHECK(r->name_len == len, "tid %u range %zu: name_len %u, want %zu", tid, k - 1, r->name_len, len);
    char want_field[sizeof r->name];
    memset(want_field, 0, sizeof want_field);
    memcpy(want_field, w->name, len < sizeof want_field ? len : sizeof want_field);
    CHECK(memcmp(r->name, want_field, sizeof want_field) == 0, "tid %u range %zu: name %.72s, want %s", tid, k - 1,
          r->name, w->name);
    CHECK(r->t0 > 0, "tid %u range %zu: t0 0", tid, k - 1);
    if (r->flags & TSNP_RANGE_START) {
      CHECK(r->depth == 0 && r->t1 == 0, "start record at depth %d with t1 %llu", r->depth, (unsigned long long)r->t1);
      if (r->ordinal < 64) start_t0[r->ordinal] = r->t0;
    } else {
      CHECK(r->t1 >= r->t0, "tid %u range %zu: t1 %llu before t0 %llu", tid, k - 1, (unsigned long long)r->t1,
            (unsigned long long)r->t0);
      if (r->depth == 0 && r->ordinal < 64)
        CHECK(start_t0[r->ordinal] == r->t0, "tid %u ordinal %llu: start t0 %llu, end t0 %llu", tid,
              (unsigned long long)r->ordinal, (unsigned long long)start_t0[r->ordinal], (unsigned long long)r->t0);
    }
  }
  CHECK(k == nwant, "tid %u: %zu range records, want %zu", tid, k, nwant);
}

/* A range record of tid with ordinal and the given flags, or NULL. */
static const struct tsnp_range* find_range(const struct stream* s, uint32_t tid, uint64_t ordinal, int start) {
  size_t n = s->len / TSNP_RECORD_SIZE - 1;
  for (size_t i = 0; i < n; i++) {
    const struct tsnp_range* r = (const struct tsnp_range*)(s->buf + TSNP_RECORD_SIZE * (i + 1));
    if (r->kind == TSNP_RANGE && r->tid == tid && r->ordinal == ordinal && !(r->flags & TSNP_RANGE_START) == !start)
      return r;
  }
  return NULL;
}

static void test_nvtx(void) {
  int lfd = listen_unix();
  setenv("TRAINSCOPE_NCCL_SOCKET", sock_path, 1);
  pid_t pid = spawn(nvtx_child);
  struct stream s;
  int status = 0;
  collect(lfd, pid, &s, 10000, 0, &status);
  close(lfd);
  child_ok(status, "nvtx");
  check_hello(&s, pid);
  if (s.len < TSNP_RECORD_SIZE) {
    free(s.buf);
    return;
  }

  size_t n = s.len / TSNP_RECORD_SIZE - 1;
  uint32_t main_tid = (uint32_t)pid, other_tid = 0;
  const struct tsnp_record* last_drops = NULL;
  for (size_t i = 0; i < n; i++) {
    const struct tsnp_record* r = rec(&s, i);
    CHECK(r->kind == TSNP_RANGE || r->kind == TSNP_DROPS, "record %zu kind %u", i, r->kind);
    if (r->kind == TSNP_DROPS) last_drops = r;
    if (r->kind == TSNP_RANGE && r->tid != main_tid) {
      CHECK(other_tid == 0 || other_tid == r->tid, "ranges from a third thread %u", r->tid);
      other_tid = r->tid;
    }
  }
  CHECK(other_tid != 0, "no ranges from the second thread");
  CHECK(last_drops && last_drops->a0 == 0 && last_drops->a1 == 0 && last_drops->a2 == 0, "drops record");

  enum { S = TSNP_RANGE_START };
  struct want_range want[27] = {
      {S, 1, 0, "outer", 0},
      {0, 4, 3, "(unnamed)", 0},
      {0, 3, 2, "default-domain", 0},
      {0, 2, 1, "inner-ex", 0},
      {0, 5, 1, long_name, 0},
      {0, 1, 0, "outer", 0},
      {S, 6, 0, "lvl0", 0},
  };
  size_t nw = 7;
  static char lvl[16][16];
  for (int i = 15; i >= 0; i--) { /* ordinals 6-25 are lvl0-lvl19; 22-25 were lost */
    snprintf(lvl[i], sizeof lvl[i], "lvl%d", i);
    want[nw++] = (struct want_range){0, 6 + (uint64_t)i, i, lvl[i], 4};
  }
  want[nw++] = (struct want_range){S, 26, 0, "(unnamed)", 4};
  want[nw++] = (struct want_range){0, 26, 0, "(unnamed)", 4};
  want[nw++] = (struct want_range){S, 27, 0, "after", 4};
  want[nw++] = (struct want_range){0, 27, 0, "after", 4};
  check_ranges(&s, main_tid, want, nw);
  const struct tsnp_range* after = find_range(&s, main_tid, 27, 0);
  CHECK(after && after->t1 >= after->t0 + 900000, "\"after\" lasted less than its 1 ms sleep");

  const struct want_range other[] = {
      {S, 1, 0, "t2", 0},
      {0, 2, 1, "t2-inner", 0},
      {0, 1, 0, "t2", 0},
  };
  check_ranges(&s, other_tid, other, 3);
  free(s.buf);

  /* No collector configured: the same calls, harmless. */
  unsetenv("TRAINSCOPE_NCCL_SOCKET");
  pid = spawn(nvtx_child);
  waitpid(pid, &status, 0);
  child_ok(status, "nvtx without a socket");
}

/* NVTX and NCCL initialising the plugin at once on two threads, then a
 * range after the last communicator is gone: it must still be sent. */
struct race {
  pthread_barrier_t go;
  NvtxInitializeInjectionNvtxFunc_t init;
  int result;
};

static void* race_nvtx(void* arg) {
  struct race* r = arg;
  fake_init(&fakes[0], fake_module0, NVTX_CBID_CORE_SIZE);
  pthread_barrier_wait(&r->go);
  r->result = r->init(fake_get0);
  return NULL;
}

static void race_child(void) {
  ncclProfiler_v5_t* p = load();
  struct race r = {.init = inject()};
  pthread_barrier_init(&r.go, NULL, 2);
  pthread_t t;
  pthread_create(&t, NULL, race_nvtx, &r);
  pthread_barrier_wait(&r.go);
  void* ctx = NULL;
  int mask = 0;
  CHECK(p->init(&ctx, 99, &mask, "race", 1, 2, 0, NULL) == ncclSuccess && ctx && mask != 0, "comm init");
  pthread_join(t, NULL);
  pthread_barrier_destroy(&r.go);
  CHECK(r.result != 0, "InitializeInjectionNvtx2 returned 0");
  struct nvtx_api a = api_of(&fakes[0]);
  NVTX_EXPECT(a.push_a("with-comm"), 0);
  NVTX_EXPECT(a.pop(), 0);
  p->finalize(ctx);
  NVTX_EXPECT(a.push_a("late"), 0);
  NVTX_EXPECT(a.pop(), 0);
  exit(failures ? 40 : 0); /* the exit hook sends "late" */
}

static void test_nvtx_race(void) {
  int lfd = listen_unix();
  setenv("TRAINSCOPE_NCCL_SOCKET", sock_path, 1);
  setenv("TRAINSCOPE_NCCL_DRAIN_MS", "60000", 1); /* only the flushes send */
  pid_t pid = spawn(race_child);
  unsetenv("TRAINSCOPE_NCCL_DRAIN_MS");
  struct stream s;
  int status = 0;
  collect(lfd, pid, &s, 10000, 0, &status);
  close(lfd);
  child_ok(status, "nvtx and nccl at once");
  check_hello(&s, pid);
  if (s.len < TSNP_RECORD_SIZE) {
    free(s.buf);
    return;
  }
  int inits = 0, fins = 0;
  size_t n = s.len / TSNP_RECORD_SIZE - 1;
  for (size_t i = 0; i < n; i++) {
    inits += rec(&s, i)->kind == TSNP_COMM_INIT;
    fins += rec(&s, i)->kind == TSNP_COMM_FINALIZE;
  }
  CHECK(inits == 1 && fins == 1, "comm init %d finalize %d", inits, fins);
  enum { S = TSNP_RANGE_START };
  const struct want_range want[] = {
      {S, 1, 0, "with-comm", 0},
      {0, 1, 0, "with-comm", 0},
      {S, 2, 0, "late", 0},
      {0, 2, 0, "late", 0},
  };
  check_ranges(&s, (uint32_t)pid, want, 4);
  free(s.buf);
}

/* --drive-nvtx: a training step of NVTX ranges around the main case's
 * NCCL calls, made through the injection as NVTX makes them. */
static void drive_nvtx(int rank, int nranks) {
  struct nvtx_api a = nvtx_up(0);
  if (a.push_a("step") != 0) _exit(50);
  nvtxEventAttributes_t fwd = ascii_attr("forward");
  if (a.push_ex(&fwd) != 1) _exit(51);
  usleep(1000);
  if (a.pop() != 1) _exit(52);
  ncclProfiler_v5_t* p = load();
  void* ctx = drive_init(p, rank, nranks);
  drive_ops(p, ctx, rank, nranks);
  if (a.pop() != 0) _exit(53);
  if (a.push_a("step") != 0) _exit(54);
  usleep(2000);
  if (a.pop() != 0) _exit(55);
  drive_finish(p, ctx);
}

static void drive_nvtx_child(void) { drive_nvtx(1, 4); }

/* --bench-nvtx: what an NVTX push and pop cost the application's thread
 * with the plugin attached, in ns per pair: a named range of the default
 * domain (recorded; every 4096 pairs the ring is left to the drainer, or
 * drops when there is no collector), and a range of a named domain (what
 * NCCL's own NVTX calls cost: ignored). */
static double bench_ns(struct nvtx_api* a, nvtxDomainHandle_t domain, int n) {
  nvtxEventAttributes_t attr = ascii_attr("step");
  uint64_t t0 = now_ns();
  for (int i = 0; i < n; i++) {
    if (domain) {
      a->dpush(domain, &attr);
      a->dpop(domain);
    } else {
      a->push_a("step");
      a->pop();
    }
  }
  return (double)(now_ns() - t0) / n;
}

static void bench_nvtx(void) {
  struct nvtx_api a = nvtx_up(0);
  nvtxDomainHandle_t nccl = a.create_a("NCCL");
  const int n = 1000000;
  bench_ns(&a, NULL, n / 10);
  printf("nvtx push+pop, default domain (recorded): %.1f ns per pair\n", bench_ns(&a, NULL, n));
  printf("nvtx push+pop, named domain (ignored):    %.1f ns per pair\n", bench_ns(&a, nccl, n));
}

static void test_drive_nvtx(void) {
  struct stream s;
  pid_t pid = run_main_like(drive_nvtx_child, "drive-nvtx", &s);
  check_main_records(&s, pid, 1);
  if (s.len < TSNP_RECORD_SIZE) goto out;
  uint32_t tid = (uint32_t)pid;
  enum { S = TSNP_RANGE_START };
  const struct want_range want[] = {
      {S, 1, 0, "step", 0},
      {0, 2, 1, "forward", 0},
      {0, 1, 0, "step", 0},
      {S, 3, 0, "step", 0},
      {0, 3, 0, "step", 0},
  };
  check_ranges(&s, tid, want, 5);
  const struct tsnp_range *fwd = find_range(&s, tid, 2, 0), *step1 = find_range(&s, tid, 1, 0),
                          *step2 = find_range(&s, tid, 3, 0);
  if (!fwd || !step1 || !step2) goto out;
  CHECK(fwd->t1 >= fwd->t0 + 900000, "forward lasted less than its 1 ms sleep");
  CHECK(step2->t1 >= step2->t0 + 1900000, "the second step lasted less than its 2 ms sleep");
  CHECK(fwd->t0 >= step1->t0 && fwd->t1 <= step1->t1 && step2->t0 >= step1->t1, "ranges out of order");
  /* The first step holds the main thread's NCCL calls: its start comes
   * before the communicator's init, its end after the last p2p. */
  size_t n = s.len / TSNP_RECORD_SIZE - 1, start_at = n, init_at = n, end_at = n, last_p2p = 0;
  for (size_t i = 0; i < n; i++) {
    const struct tsnp_record* r = rec(&s, i);
    const struct tsnp_range* g = (const struct tsnp_range*)r;
    if (r->tid != tid) continue;
    if (r->kind == TSNP_RANGE && g->ordinal == 1) *(g->flags & TSNP_RANGE_START ? &start_at : &end_at) = i;
    if (r->kind == TSNP_COMM_INIT) init_at = i;
    if (r->kind == TSNP_P2P) {
      last_p2p = i;
      CHECK(r->t0 >= step1->t0 && r->t1 <= step1->t1, "p2p outside the first step");
    }
  }
  CHECK(start_at < init_at && init_at < last_p2p && last_p2p < end_at,
        "record order: step start %zu, init %zu, last p2p %zu, step end %zu", start_at, init_at, last_p2p, end_at);
out:
  free(s.buf);
}

/* The CUDA driver's side of the loading: InitializeInjection with the
 * stand-in CUPTI (fake_cupti.c) named by TRAINSCOPE_CUPTI_PATH; then
 * kernels and a copy "run", CUPTI hands them over, and the process exits
 * without a communicator: the exit hooks send what is left. */
static void drive_cupti(const char* fake) {
  setenv("TRAINSCOPE_CUPTI_PATH", fake, 1);
  void* h = dlopen(lib_path, RTLD_NOW | RTLD_LOCAL);
  int (*init)(void) = h ? (int (*)(void))dlsym(h, "InitializeInjection") : NULL;
  if (!init) {
    fprintf(stderr, "InitializeInjection missing from %s\n", lib_path);
    _exit(2);
  }
  CHECK(init() == 1, "InitializeInjection failed");
  void* f = dlopen(fake, RTLD_NOW | RTLD_NOLOAD);
  void (*launch)(const char*, uint64_t, uint64_t) = f ? (void (*)(const char*, uint64_t, uint64_t))dlsym(f, "fake_cupti_launch") : NULL;
  CUptiResult (*flush)(uint32_t) = f ? (CUptiResult(*)(uint32_t))dlsym(f, "cuptiActivityFlushAll") : NULL;
  if (!launch || !flush) {
    fprintf(stderr, "the plugin did not load %s\n", fake);
    _exit(2);
  }
  /* 141 bytes: sent in two pieces. */
  static const char gemm[] = "_ZN7cutlass7Kernel2INS_100aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaEEEvNT_6ParamsE";
  launch(gemm, 50000, 0);
  launch("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 7000, 0); /* NCCL's own: not sent */
  launch("_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11FillFunctorIfEESt5arrayIPcLm1EEEEviT0_T1_", 5000, 0);
  flush(0);
  launch(gemm, 40000, 0);
  launch(NULL, 3000, 4096);
  /* A kernel CUPTI could not time: not sent, counted with CUPTI's drops. */
  void (*untimed)(const char*) = (void (*)(const char*))dlsym(f, "fake_cupti_untimed");
  CHECK(untimed != NULL, "fake_cupti_untimed missing");
  if (untimed) untimed(gemm);
  /* Device memory: 1, 3, 2 then 6 MiB held (the peak); pinned host
   * memory (kind 2) is not the device's. */
  void (*memory)(uint32_t, uint32_t, uint64_t) = (void (*)(uint32_t, uint32_t, uint64_t))dlsym(f, "fake_cupti_memory");
  CHECK(memory != NULL, "fake_cupti_memory missing");
  if (memory) {
    memory(1, 3, 1 << 20);
    memory(1, 3, 2 << 20);
    memory(1, 2, 64 << 20);
    memory(2, 3, 1 << 20);
    memory(1, 3, 4 << 20);
  }
  /* No labelled range was pushed: CUPTI's one callback subscriber is
   * left to other tools. */
  int (*subscriptions)(void) = (int (*)(void))dlsym(f, "fake_cupti_subscriptions");
  CHECK(subscriptions && subscriptions() == 0, "the plugin subscribed to CUPTI's callbacks with no labelled range pushed");
  /* Left for the exit hook's forced flush. */
}

struct launcher {
  void (*launch)(const char*, uint64_t, uint64_t);
  const char* name;
};

static void* launch_on_thread(void* arg) {
  const struct launcher* l = arg;
  l->launch(l->name, 1000, 0);
  return NULL;
}

/* --drive-cupti-labels: NVTX ranges named after forward and backward
 * work, and kernels launched inside them and outside, each kernel named
 * "k:" and the innermost range's name (internal/ncclplugin's
 * TestPluginEndToEndLabels says which labels each must carry). */
static void drive_cupti_labels(const char* fake) {
  struct nvtx_api a = nvtx_up(0);
  setenv("TRAINSCOPE_CUPTI_PATH", fake, 1);
  void* h = dlopen(lib_path, RTLD_NOW | RTLD_LOCAL);
  int (*init)(void) = h ? (int (*)(void))dlsym(h, "InitializeInjection") : NULL;
  if (!init || init() != 1) {
    fprintf(stderr, "InitializeInjection missing from %s or failed\n", lib_path);
    _exit(2);
  }
  void* f = dlopen(fake, RTLD_NOW | RTLD_NOLOAD);
  void (*launch)(const char*, uint64_t, uint64_t) = f ? (void (*)(const char*, uint64_t, uint64_t))dlsym(f, "fake_cupti_launch") : NULL;
  void (*skip_callback)(void) = f ? (void (*)(void))dlsym(f, "fake_cupti_skip_callback") : NULL;
  CUptiResult (*flush)(uint32_t) = f ? (CUptiResult(*)(uint32_t))dlsym(f, "cuptiActivityFlushAll") : NULL;
  if (!launch || !skip_callback || !flush) {
    fprintf(stderr, "the plugin did not load %s\n", fake);
    _exit(2);
  }
  launch("k:before any labelled range", 1000, 0);
  static const char* const alone[] = {
      "forward chunk 1 microbatch 3", "bwd_mb3_chunk1", "Forward 7",  "backward", "forward_step",
      "forward_backward_func",        "forwarding",     "fwd vpp=2 mb=5", "optimizer",
  };
  /* CUPTI's kernel names stay put: the plugin knows a name by its address. */
  static char names[sizeof alone / sizeof alone[0]][64];
  for (size_t i = 0; i < sizeof alone / sizeof alone[0]; i++) {
    a.push_a(alone[i]);
    snprintf(names[i], sizeof names[i], "k:%s", alone[i]);
    launch(names[i], 1000, 0);
    a.pop();
  }
  flush(0);
  a.push_a("forward chunk 0 mb 1");
  a.push_a("attention");
  launch("k:attention", 1000, 0);
  a.pop();
  launch(NULL, 500, 64); /* a copy inside the forward range */
  skip_callback();
  launch("k:no callback", 1000, 0);
  a.pop();
  launch("k:after", 1000, 0);
  /* A backward pass whose kernels another thread launches while this one
   * waits inside its range, as PyTorch's autograd does. */
  a.push_a("backward microbatch 2");
  struct launcher l = {launch, "k:autograd thread"};
  pthread_t t;
  if (pthread_create(&t, NULL, launch_on_thread, &l) != 0 || pthread_join(t, NULL) != 0) _exit(3);
  a.pop();
  l.name = "k:autograd thread, after";
  if (pthread_create(&t, NULL, launch_on_thread, &l) != 0 || pthread_join(t, NULL) != 0) _exit(3);
  int (*subscriptions)(void) = (int (*)(void))dlsym(f, "fake_cupti_subscriptions");
  CHECK(subscriptions && subscriptions() == 1, "the plugin subscribed to CUPTI's callbacks %d times, want once",
        subscriptions ? subscriptions() : -1);
  /* Left for the exit hook's forced flush. */
}

int main(int argc, char** argv) {
  if (argc == 4 && strcmp(argv[1], "--drive-cupti") == 0) {
    lib_path = argv[2];
    drive_cupti(argv[3]);
    return failures ? 1 : 0;
  }
  if (argc == 4 && strcmp(argv[1], "--drive-cupti-labels") == 0) {
    lib_path = argv[2];
    drive_cupti_labels(argv[3]);
    return failures ? 1 : 0;
  }
  if (argc == 3 && strcmp(argv[1], "--bench-nvtx") == 0) {
    lib_path = argv[2];
    bench_nvtx();
    return 0;
  }
  if ((argc == 4 || argc == 6) && strcmp(argv[1], "--drive-steps") == 0) {
    lib_path = argv[2];
    int steps = atoi(argv[3]), rank = argc == 6 ? atoi(argv[4]) : 1, nranks = argc == 6 ? atoi(argv[5]) : 4;
    if (steps < 1 || nranks < 1 || rank < 0 || rank >= nranks) {
      fprintf(stderr, "%s: %d steps as rank %d of %d ranks\n", argv[1], steps, rank, nranks);
      return 2;
    }
    drive_steps(steps, rank, nranks);
    return 0;
  }
  if ((argc == 3 || argc == 5) && (strcmp(argv[1], "--drive") == 0 || strcmp(argv[1], "--drive-nvtx") == 0)) {
    lib_path = argv[2];
    int rank = argc == 5 ? atoi(argv[3]) : 1, nranks = argc == 5 ? atoi(argv[4]) : 4;
    if (nranks < 1 || rank < 0 || rank >= nranks) {
      fprintf(stderr, "%s: rank %d of %d ranks\n", argv[1], rank, nranks);
      return 2;
    }
    if (strcmp(argv[1], "--drive") == 0)
      drive(rank, nranks);
    else
      drive_nvtx(rank, nranks);
    return 0;
  }
  if (argc != 2) {
    fprintf(stderr, "usage: %s [--drive | --drive-nvtx | --bench-nvtx] path/to/libtrainscope-nccl.so [RANK NRANKS]\n       %s --drive-steps path/to/libtrainscope-nccl.so STEPS [RANK NRANKS]\n       %s --drive-cupti[-labels] path/to/libtrainscope-nccl.so path/to/libfakecupti.so\n", argv[0], argv[0], argv[0]);
    return 2;
  }
  lib_path = argv[1];
  char dir[] = "/tmp/tsnp-test-XXXXXX";
  if (!mkdtemp(dir)) return 2;
  snprintf(sock_path, sizeof sock_path, "%s/s", dir);
  test_main();
  test_ring_full();
  test_api_groups();
  test_stale_handles();
  test_orphan_proxy();
  test_slot_reuse_race();
  test_no_collector();
  test_stuck_collector();
  test_exit_tally();
  test_slow_collector();
  test_sparse_beside_flood();
  test_env_bounds();
  test_restart();
  test_no_key();
  test_cancelled_finalize();
  test_late_destructor();
  test_nvtx();
  test_nvtx_race();
  test_drive_nvtx();
  unlink(sock_path);
  rmdir(dir);
  if (failures) {
    fprintf(stderr, "%d check(s) failed\n", failures);
    return 1;
  }
  printf("test_plugin: ok\n");
  return 0;
}
