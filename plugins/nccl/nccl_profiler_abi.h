/*
 * The part of NCCL's profiler plugin interface this plugin uses: names
 * and memory layouts only, restated so the plugin builds without NCCL's
 * headers. The layouts mirror NCCL 2.28 (checked against 2.28.3 and
 * 2.28.9, whose profiler interface is identical): interface version 5,
 * which NCCL 2.28 looks up first (data symbol "ncclProfiler_v5"), and
 * version 4 (NCCL 2.25-2.27, "ncclProfiler_v4"), whose event descriptor
 * differs in the width of its type field, in the argument order of init,
 * and in the absence of the v5-only members.
 *
 * Only fields this plugin reads are named; every member up to the last
 * one read is present so that offsets match. Members after the ones
 * named in a union arm are left out (they do not move earlier members).
 */
#ifndef TRAINSCOPE_NCCL_PROFILER_ABI_H
#define TRAINSCOPE_NCCL_PROFILER_ABI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* ncclResult_t is an int-sized enum; 0 is success. */
typedef enum { ncclSuccess = 0 } ncclResult_t;

/* Debug logger NCCL passes to init (level, subsystem flags, file, line, format). */
typedef enum { NCCL_LOG_NONE = 0, NCCL_LOG_VERSION = 1, NCCL_LOG_WARN = 2, NCCL_LOG_INFO = 3 } ncclDebugLogLevel;
enum { NCCL_INIT = 1 };
typedef void (*ncclDebugLogger_t)(ncclDebugLogLevel level, unsigned long flags, const char* file, int line,
                                  const char* fmt, ...);

/* Event types: the descriptor's type field and the bits of the activation mask. */
enum {
  ncclProfileGroup = 1 << 0,
  ncclProfileColl = 1 << 1,
  ncclProfileP2p = 1 << 2,
  ncclProfileProxyOp = 1 << 3,
  ncclProfileProxyStep = 1 << 4,
  ncclProfileProxyCtrl = 1 << 5,
  ncclProfileKernelCh = 1 << 6,
  ncclProfileNetPlugin = 1 << 7,
  ncclProfileGroupApi = 1 << 8,
  ncclProfileCollApi = 1 << 9,
  ncclProfileP2pApi = 1 << 10,
  ncclProfileKernelLaunch = 1 << 11,
};

/* Event states passed to recordEventState; only the kernel-channel stop is used here. */
typedef enum {
  ncclProfilerKernelChStop = 22,
} ncclProfilerEventState_t;

/* Version 5 event descriptor (NCCL 2.28). */
typedef struct {
  uint64_t type;   /* one ncclProfile* bit */
  void* parentObj; /* handle the plugin returned for the parent event, or NULL */
  int rank;
  union {
    struct {
      uint64_t seqNumber; /* per communicator and collective function, equal on every rank */
      const char* func;
      const void* sendBuff;
      void* recvBuff;
      size_t count;
      int root;
      const char* datatype;
      uint8_t nChannels;
      uint8_t nWarps;
      const char* algo;
      const char* proto;
      void* parentGroup;
    } coll;
    struct {
      const char* func;
      void* buff;
      const char* datatype;
      size_t count;
      int peer;
      uint8_t nChannels;
      void* parentGroup;
    } p2p;
    struct {
      pid_t pid; /* process that issued the proxied operation (PXN: maybe another) */
      uint8_t channelId;
      int peer;
      int nSteps;
      int chunkSize;
      int isSend;
    } proxyOp;
    struct {
      uint8_t channelId;
      uint64_t pTimer; /* GPU %globaltimer (ns) when the channel started */
    } kernelCh;
  };
} ncclProfilerEventDescr_v5_t;

typedef union {
  struct {
    size_t transSize;
  } proxyStep;
  struct {
    int appendedProxyOps;
  } proxyCtrl;
  struct {
    void* data;
  } netPlugin;
  struct {
    uint64_t pTimer; /* GPU %globaltimer (ns) when the channel stopped */
  } kernelCh;
} ncclProfilerEventStateArgs_v5_t;

typedef struct {
  const char* name;
  ncclResult_t (*init)(void** context, uint64_t commId, int* eActivationMask, const char* commName, int nNodes,
                       int nranks, int rank, ncclDebugLogger_t logfn);
  ncclResult_t (*startEvent)(void* context, void** eHandle, ncclProfilerEventDescr_v5_t* eDescr);
  ncclResult_t (*stopEvent)(void* eHandle);
  ncclResult_t (*recordEventState)(void* eHandle, ncclProfilerEventState_t eState,
                                   ncclProfilerEventStateArgs_v5_t* eStateArgs);
  ncclResult_t (*finalize)(void* context);
} ncclProfiler_v5_t;

/* Version 4 event descriptor (NCCL 2.25-2.27): an 8-bit type; the union
 * starts at the same offset as in version 5. */
typedef struct {
  uint8_t type;
  void* parentObj;
  int rank;
  union {
    struct {
      uint64_t seqNumber;
      const char* func;
      const void* sendBuff;
      void* recvBuff;
      size_t count;
      int root;
      const char* datatype;
      uint8_t nChannels;
      uint8_t nWarps;
      const char* algo;
      const char* proto;
    } coll;
    struct {
      const char* func;
      void* buff;
      const char* datatype;
      size_t count;
      int peer;
      uint8_t nChannels;
    } p2p;
    struct {
      pid_t pid;
      uint8_t channelId;
      int peer;
      int nSteps;
      int chunkSize;
      int isSend;
    } proxyOp;
    struct {
      uint8_t channelId;
      uint64_t pTimer;
    } kernelCh;
  };
} ncclProfilerEventDescr_v4_t;

typedef ncclProfilerEventStateArgs_v5_t ncclProfilerEventStateArgs_v4_t;

typedef struct {
  const char* name;
  ncclResult_t (*init)(void** context, int* eActivationMask, const char* commName, uint64_t commHash, int nNodes,
                       int nranks, int rank, ncclDebugLogger_t logfn);
  ncclResult_t (*startEvent)(void* context, void** eHandle, ncclProfilerEventDescr_v4_t* eDescr);
  ncclResult_t (*stopEvent)(void* eHandle);
  ncclResult_t (*recordEventState)(void* eHandle, ncclProfilerEventState_t eState,
                                   ncclProfilerEventStateArgs_v4_t* eStateArgs);
  ncclResult_t (*finalize)(void* context);
} ncclProfiler_v4_t;

/* Offsets NCCL's own layout gives on LP64 (x86-64, aarch64): a mistake
 * here would misread every event, so the build checks them. */
_Static_assert(offsetof(ncclProfilerEventDescr_v5_t, coll) == 24, "v5 union offset");
_Static_assert(offsetof(ncclProfilerEventDescr_v5_t, coll.count) == 56, "v5 coll.count");
_Static_assert(offsetof(ncclProfilerEventDescr_v5_t, coll.datatype) == 72, "v5 coll.datatype");
_Static_assert(offsetof(ncclProfilerEventDescr_v5_t, coll.nChannels) == 80, "v5 coll.nChannels");
_Static_assert(offsetof(ncclProfilerEventDescr_v5_t, coll.algo) == 88, "v5 coll.algo");
_Static_assert(offsetof(ncclProfilerEventDescr_v5_t, p2p.peer) == 56, "v5 p2p.peer");
_Static_assert(offsetof(ncclProfilerEventDescr_v5_t, kernelCh.pTimer) == 32, "v5 kernelCh.pTimer");
_Static_assert(offsetof(ncclProfilerEventDescr_v5_t, proxyOp.channelId) == 28, "v5 proxyOp.channelId");
_Static_assert(offsetof(ncclProfilerEventDescr_v5_t, proxyOp.isSend) == 44, "v5 proxyOp.isSend");
_Static_assert(offsetof(ncclProfilerEventDescr_v4_t, coll) == 24, "v4 union offset");
_Static_assert(offsetof(ncclProfilerEventDescr_v4_t, proxyOp.isSend) == 44, "v4 proxyOp.isSend");
_Static_assert(offsetof(ncclProfilerEventDescr_v4_t, kernelCh.pTimer) == 32, "v4 kernelCh.pTimer");

#endif
