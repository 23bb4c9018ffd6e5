/*
 * A stand-in for CUPTI's activity interface, for the plugin's tests on a
 * machine without a GPU (the real library runs on the GPU machine:
 * scripts/gpu-wrap.sh kernels). It keeps the records a test "launches"
 * (fake_cupti_launch) and hands them to the client in one buffer at each
 * cuptiActivityFlushAll, laid out at the offsets cupti_activity_abi.h
 * reads, timed with the client's timestamp callback. It reports two
 * dropped records once. A subscriber that enabled the callback of
 * cudaLaunchKernel is called as each kernel launch begins, on the
 * launching thread, with the correlation id the kernel's record carries.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cupti_activity_abi.h"

#define EXPORT __attribute__((visibility("default")))

enum { REC = 144, MAX = 64 };

static CUpti_BuffersCallbackRequestFunc requested;
static CUpti_BuffersCallbackCompleteFunc completed;
static CUpti_TimestampCallbackFunc clock_fn;
static uint8_t pending[MAX][REC];
static int npending, dropped_once, skip_callback, launch_callback;
static uint64_t enabled;
static uint32_t correlation;
static CUpti_CallbackFunc subscriber;

EXPORT CUptiResult cuptiActivityRegisterCallbacks(CUpti_BuffersCallbackRequestFunc r, CUpti_BuffersCallbackCompleteFunc c) {
  requested = r;
  completed = c;
  return CUPTI_SUCCESS;
}
EXPORT CUptiResult cuptiActivityEnable(int kind) {
  if (kind < 0 || kind > 63) return 1;
  enabled |= 1ull << kind;
  return CUPTI_SUCCESS;
}
EXPORT CUptiResult cuptiActivityRegisterTimestampCallback(CUpti_TimestampCallbackFunc f) {
  if (enabled) return 1; /* CUPTI takes a clock only before any activity is enabled */
  clock_fn = f;
  return CUPTI_SUCCESS;
}
EXPORT CUptiResult cuptiActivityFlushPeriod(uint32_t ms) { return ms ? CUPTI_SUCCESS : 1; }
EXPORT CUptiResult cuptiActivityGetNumDroppedRecords(void* ctx, uint32_t stream, size_t* n) {
  (void)ctx;
  (void)stream;
  *n = dropped_once ? 0 : 2;
  dropped_once = 1;
  return CUPTI_SUCCESS;
}
EXPORT CUptiResult cuptiActivityGetNextRecord(uint8_t* buf, size_t valid, void** rec) {
  uint8_t* next = *rec ? (uint8_t*)*rec + REC : buf;
  if (next + REC > buf + valid) return 12; /* CUPTI_ERROR_MAX_LIMIT_REACHED */
  *rec = next;
  return CUPTI_SUCCESS;
}
static int subscriptions;

/* How many times a client subscribed. */
EXPORT int fake_cupti_subscriptions(void) { return subscriptions; }

EXPORT CUptiResult cuptiSubscribe(CUpti_SubscriberHandle* handle, CUpti_CallbackFunc f, void* userdata) {
  (void)userdata;
  subscriptions++;
  if (subscriber) return 39; /* CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED */
  subscriber = f;
  *handle = &subscriber;
  return CUPTI_SUCCESS;
}
EXPORT CUptiResult cuptiEnableCallback(uint32_t enable, CUpti_SubscriberHandle handle, int domain, uint32_t cbid) {
  if (handle != &subscriber) return 1;
  if (domain == CUPTI_CB_DOMAIN_RUNTIME_API && cbid == 211) launch_callback = enable != 0; /* cudaLaunchKernel */
  return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiActivityFlushAll(uint32_t flag) {
  (void)flag;
  if (!npending || !requested || !completed) return CUPTI_SUCCESS;
  uint8_t* buf = NULL;
  size_t size = 0, max = 0;
  requested(&buf, &size, &max);
  if (!buf || size < (size_t)npending * REC) return CUPTI_SUCCESS;
  memcpy(buf, pending, (size_t)npending * REC);
  size_t valid = (size_t)npending * REC;
  npending = 0;
  completed(NULL, 0, buf, size, valid);
  return CUPTI_SUCCESS;
}

/* The next launch calls no callback (a launch CUPTI does not call back). */
EXPORT void fake_cupti_skip_callback(void) { skip_callback = 1; }

static void put32(uint8_t* r, size_t off, uint32_t v) { memcpy(r + off, &v, sizeof v); }
static void put64(uint8_t* r, size_t off, uint64_t v) { memcpy(r + off, &v, sizeof v); }

/* Memory of kind (3: the device's) allocated (op 1) or released (op 2)
 * now on the client's clock, on device 1. */
EXPORT void fake_cupti_memory(uint32_t op, uint32_t kind, uint64_t bytes) {
  if (npending == MAX || !clock_fn) return;
  uint8_t* r = pending[npending++];
  memset(r, 0, REC);
  put32(r, CUPTI_REC_KIND, CUPTI_ACTIVITY_KIND_MEMORY2);
  put32(r, CUPTI_MEMORY2_OPERATION, op);
  put32(r, CUPTI_MEMORY2_KIND, kind);
  put32(r, CUPTI_MEMORY2_CORRELATION, ++correlation);
  put64(r, CUPTI_MEMORY2_BYTES, bytes);
  put64(r, CUPTI_MEMORY2_TIMESTAMP, clock_fn());
  put32(r, CUPTI_MEMORY2_DEVICE, 1);
}

/* A kernel CUPTI could not time: its start, no end (CUPTI's records of
 * work that had not finished when they were flushed). */
EXPORT void fake_cupti_untimed(const char* name) {
  if (npending == MAX || !clock_fn) return;
  uint8_t* r = pending[npending++];
  memset(r, 0, REC);
  put32(r, CUPTI_REC_KIND, CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  put64(r, CUPTI_KERNEL_START, clock_fn());
  put32(r, CUPTI_KERNEL_DEVICE, 1);
  put32(r, CUPTI_KERNEL_STREAM, 13);
  put32(r, CUPTI_KERNEL_CORRELATION, ++correlation);
  memcpy(r + CUPTI_KERNEL_NAME, &name, sizeof name);
}

/* A kernel (name set) or a memory copy of bytes (name NULL) that started
 * now on the client's clock and lasted dur_ns, on device 1, stream 13. */
EXPORT void fake_cupti_launch(const char* name, uint64_t dur_ns, uint64_t bytes) {
  if (npending == MAX || !clock_fn) return;
  uint8_t* r = pending[npending++];
  memset(r, 0, REC);
  uint64_t t = clock_fn();
  if (name && subscriber && launch_callback && !skip_callback) {
    uint8_t data[72] = {0}; /* CUpti_CallbackData at API entry */
    uint32_t id = correlation + 1;
    memcpy(data + CUPTI_CB_CORRELATION, &id, sizeof id);
    subscriber(NULL, CUPTI_CB_DOMAIN_RUNTIME_API, 211, data);
  }
  skip_callback = 0;
  if (name) {
    put32(r, CUPTI_REC_KIND, CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
    put64(r, CUPTI_KERNEL_START, t);
    put64(r, CUPTI_KERNEL_END, t + dur_ns);
    put32(r, CUPTI_KERNEL_DEVICE, 1);
    put32(r, CUPTI_KERNEL_STREAM, 13);
    put32(r, CUPTI_KERNEL_CORRELATION, ++correlation);
    memcpy(r + CUPTI_KERNEL_NAME, &name, sizeof name);
  } else {
    put32(r, CUPTI_REC_KIND, CUPTI_ACTIVITY_KIND_MEMCPY);
    r[CUPTI_MEMCPY_COPY_KIND] = 1; /* HtoD */
    put64(r, CUPTI_MEM_BYTES, bytes);
    put64(r, CUPTI_MEM_START, t);
    put64(r, CUPTI_MEM_END, t + dur_ns);
    put32(r, CUPTI_MEM_DEVICE, 1);
    put32(r, CUPTI_MEM_STREAM, 13);
    put32(r, CUPTI_MEM_CORRELATION, ++correlation);
  }
}
