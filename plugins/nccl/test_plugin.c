/*
 * Tests libtrainscope-nccl.so without NCCL: each case forks a child that
 * dlopens the plugin and calls it the way NCCL 2.28 does (init, task
 * events on the calling thread, kernel-channel events from another
 * thread, finalize), while this process listens on the Unix socket as
 * the collector would and checks the bytes that arrive.
 *
 *   ./test_plugin ./libtrainscope-nccl.so
 *
 * With --drive, it only makes the main case's calls, against the
 * collector named by TRAINSCOPE_NCCL_SOCKET (the Go end-to-end tests),
 * as rank 1 of 4 or as the rank given:
 *
 *   ./test_plugin --drive ./libtrainscope-nccl.so [RANK NRANKS]
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "nccl_profiler_abi.h"
#include "trainscope_nccl_wire.h"

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
  int conns[8], nconn = 0, exited = 0;
  uint64_t end = mono_ms() + (uint64_t)timeout_ms;
  memset(s, 0, sizeof *s);
  while (mono_ms() < end) {
    if (!exited && waitpid(child, status, WNOHANG) == child) exited = 1;
    struct pollfd p[9];
    int n = 0;
    p[n++] = (struct pollfd){.fd = lfd, .events = POLLIN};
    for (int i = 0; i < nconn; i++)
      if (conns[i] >= 0 && !no_read) p[n++] = (struct pollfd){.fd = conns[i], .events = POLLIN};
    if (exited && n == 1) break;
    if (poll(p, (nfds_t)n, 20) <= 0) continue;
    if (p[0].revents & POLLIN) {
      int c = accept(lfd, NULL, NULL);
      if (c >= 0 && nconn < 8) conns[nconn++] = c, s->connections++;
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

/* drive makes the main case's calls as rank `rank` of `nranks`. */
static void drive(int rank, int nranks) {
  ncclProfiler_v5_t* p = load();
  void* ctx = NULL;
  int mask = -1;
  if (p->init(&ctx, 0xabcdef0123456789ull, &mask, "pg-data-parallel", 1, nranks, rank, NULL) != ncclSuccess || !ctx) _exit(3);
  if (mask != (ncclProfileColl | ncclProfileP2p | ncclProfileKernelCh | ncclProfileProxyOp)) _exit(4);

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

  p->stopEvent(NULL);
  p->finalize(ctx);
}

static void main_child(void) { drive(1, 4); }

static const struct tsnp_record* rec(const struct stream* s, size_t i) {
  return (const struct tsnp_record*)(s->buf + TSNP_RECORD_SIZE * (i + 1));
}

static void test_main(void) {
  int lfd = listen_unix();
  setenv("TRAINSCOPE_NCCL_SOCKET", sock_path, 1);
  unsetenv("OMPI_COMM_WORLD_RANK");
  unsetenv("SLURM_PROCID");
  unsetenv("PMI_RANK");
  setenv("RANK", "5", 1);
  pid_t pid = spawn(main_child);
  unsetenv("RANK");
  struct stream s;
  int status = 0;
  collect(lfd, pid, &s, 10000, 0, &status);
  close(lfd);
  child_ok(status, "main");
  CHECK(s.connections == 1, "connections %d, want 1", s.connections);
  CHECK(s.len >= TSNP_RECORD_SIZE && s.len % TSNP_RECORD_SIZE == 0, "stream of %zu bytes", s.len);
  if (s.len < TSNP_RECORD_SIZE) return;

  struct tsnp_hello h;
  memcpy(&h, s.buf, sizeof h);
  CHECK(memcmp(h.magic, "TSNP", 4) == 0, "magic");
  CHECK(h.version == 1 && h.record_size == 128, "version %u size %u", h.version, h.record_size);
  CHECK(h.pid == (uint32_t)pid, "hello pid %u, child %d", h.pid, (int)pid);
  CHECK(h.mono_ns > 0 && h.realtime_ns > h.mono_ns, "hello clocks");
  CHECK(h.world_rank1 == 6, "hello launcher rank + 1 %d, want 6 (RANK=5)", h.world_rank1);

  size_t n = s.len / TSNP_RECORD_SIZE - 1;
  int inits = 0, fins = 0, colls = 0, p2ps = 0, kernels = 0, drops = 0, proxy_starts = 0, proxy_stops = 0;
  uint64_t ar_task = 0, ar_t1 = 0, send_task = 0;
  uint32_t ar_tid = 0;
  const struct tsnp_record* last_drops = NULL;
  /* Records come ring by ring: a kernel channel may precede its parent. */
  for (size_t i = 0; i < n; i++)
    if (rec(&s, i)->kind == TSNP_COLLECTIVE && rec(&s, i)->func == TSNP_FUNC_ALLREDUCE)
      ar_task = rec(&s, i)->task, ar_t1 = rec(&s, i)->t1, ar_tid = rec(&s, i)->tid;
  for (size_t i = 0; i < n && !send_task; i++)
    if (rec(&s, i)->kind == TSNP_P2P && rec(&s, i)->func == TSNP_FUNC_SEND) send_task = rec(&s, i)->task;
  for (size_t i = 0; i < n; i++) {
    const struct tsnp_record* r = rec(&s, i);
    CHECK(r->kind >= 1 && r->kind <= 7, "record %zu kind %u", i, r->kind);
    if (r->kind != TSNP_DROPS) {
      CHECK(r->comm_hash == 0xabcdef0123456789ull, "record %zu hash %llx", i, (unsigned long long)r->comm_hash);
      CHECK(strcmp(r->comm_name, "pg-data-parallel") == 0, "record %zu comm name %.32s", i, r->comm_name);
      CHECK(r->rank == 1 && r->nranks == 4, "record %zu rank %d/%d", i, r->rank, r->nranks);
    }
    switch (r->kind) {
    case TSNP_COMM_INIT:
      inits++;
      CHECK(r->nnodes == 1, "nnodes %d", r->nnodes);
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
    CHECK(last_drops->a0 == 0 && last_drops->a1 == 2 && last_drops->a2 == 0, "drops ring %llu refused %llu unsent %llu",
          (unsigned long long)last_drops->a0, (unsigned long long)last_drops->a1, (unsigned long long)last_drops->a2);
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

/* ---- No collector, and a collector that never reads. ---- */

static void busy_child(void) {
  ncclProfiler_v5_t* p = load();
  void* ctx = NULL;
  int mask;
  if (p->init(&ctx, 7, &mask, NULL, 1, 2, 0, NULL) != ncclSuccess || mask == 0) _exit(3);
  for (int i = 0; i < 200000; i++) {
    ncclProfilerEventDescr_v5_t c = {0};
    c.type = ncclProfileColl;
    c.coll.func = "ReduceScatter";
    c.coll.count = 4;
    c.coll.datatype = "ncclFloat16";
    void* h = NULL;
    p->startEvent(ctx, &h, &c);
    p->stopEvent(h);
  }
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

int main(int argc, char** argv) {
  if ((argc == 3 || argc == 5) && strcmp(argv[1], "--drive") == 0) {
    lib_path = argv[2];
    int rank = argc == 5 ? atoi(argv[3]) : 1, nranks = argc == 5 ? atoi(argv[4]) : 4;
    if (nranks < 1 || rank < 0 || rank >= nranks) {
      fprintf(stderr, "--drive: rank %d of %d ranks\n", rank, nranks);
      return 2;
    }
    drive(rank, nranks);
    return 0;
  }
  if (argc != 2) {
    fprintf(stderr, "usage: %s [--drive] path/to/libtrainscope-nccl.so [RANK NRANKS]\n", argv[0]);
    return 2;
  }
  lib_path = argv[1];
  char dir[] = "/tmp/tsnp-test-XXXXXX";
  if (!mkdtemp(dir)) return 2;
  snprintf(sock_path, sizeof sock_path, "%s/s", dir);
  test_main();
  test_ring_full();
  test_no_collector();
  test_stuck_collector();
  unlink(sock_path);
  rmdir(dir);
  if (failures) {
    fprintf(stderr, "%d check(s) failed\n", failures);
    return 1;
  }
  printf("test_plugin: ok\n");
  return 0;
}
