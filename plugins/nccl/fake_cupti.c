/*
 * A stand-in for CUPTI's activity interface, for the plugin's tests on a
 * machine without a GPU (the real library runs on the GPU machine:
 * scripts/gpu-wrap.sh kernels). It keeps the records a test "launches"
 * (fake_cupti_launch) and hands them to the client in one buffer at each
 * cuptiActivityFlushAll, laid out at the offsets cupti_activity_abi.h
 * reads, timed with the client's timestamp callback. It reports two
 * dropped records once. Once the client enables API and external
 * correlation records, each launch also makes a runtime API record,
 * preceded by an external correlation record while the client has an
 * external id of its pushed; the flush hands those over in a second
 * buffer, after the device records, so that the client sees the device
 * records first (CUPTI keeps no order between its buffers).
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
static uint8_t pending[MAX][REC], api[2 * MAX][REC];
static int npending, napi, dropped_once, skip_api;
static uint64_t enabled;
static uint32_t correlation;
static _Thread_local uint64_t ext_ids[16]; /* CUPTI keeps external ids per thread */
static _Thread_local int ndepth;

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
EXPORT CUptiResult cuptiActivityPushExternalCorrelationId(int kind, uint64_t id) {
  if (kind != CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM2 || ndepth == 16) return 1;
  ext_ids[ndepth++] = id;
  return CUPTI_SUCCESS;
}
EXPORT CUptiResult cuptiActivityPopExternalCorrelationId(int kind, uint64_t* last) {
  if (kind != CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM2 || ndepth == 0) return 1;
  *last = ext_ids[--ndepth];
  return CUPTI_SUCCESS;
}

/* Hands n records over in one buffer. */
static void hand_over(uint8_t (*recs)[REC], int n) {
  if (!n || !requested || !completed) return;
  uint8_t* buf = NULL;
  size_t size = 0, max = 0;
  requested(&buf, &size, &max);
  if (!buf || size < (size_t)n * REC) return;
  memcpy(buf, recs, (size_t)n * REC);
  completed(NULL, 0, buf, size, (size_t)n * REC);
}

EXPORT CUptiResult cuptiActivityFlushAll(uint32_t flag) {
  (void)flag;
  int n = npending, m = napi;
  npending = napi = 0;
  hand_over(pending, n);
  hand_over(api, m);
  return CUPTI_SUCCESS;
}

/* The next launch makes no API record (its call was not traced). */
EXPORT void fake_cupti_skip_api(void) { skip_api = 1; }

static void put32(uint8_t* r, size_t off, uint32_t v) { memcpy(r + off, &v, sizeof v); }
static void put64(uint8_t* r, size_t off, uint64_t v) { memcpy(r + off, &v, sizeof v); }

/* A kernel (name set) or a memory copy of bytes (name NULL) that started
 * now on the client's clock and lasted dur_ns, on device 1, stream 13. */
EXPORT void fake_cupti_launch(const char* name, uint64_t dur_ns, uint64_t bytes) {
  if (npending == MAX || napi > 2 * MAX - 2 || !clock_fn) return;
  uint8_t* r = pending[npending++];
  memset(r, 0, REC);
  uint64_t t = clock_fn();
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
  const uint64_t want = 1ull << CUPTI_ACTIVITY_KIND_RUNTIME | 1ull << CUPTI_ACTIVITY_KIND_DRIVER;
  if ((enabled & want) != want || !(enabled & 1ull << CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION) || skip_api) {
    skip_api = 0;
    return;
  }
  if (ndepth > 0) {
    uint8_t* x = api[napi++];
    memset(x, 0, REC);
    put32(x, CUPTI_REC_KIND, CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION);
    put32(x, CUPTI_EXT_KIND, CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM2);
    put64(x, CUPTI_EXT_ID, ext_ids[ndepth - 1]);
    put32(x, CUPTI_EXT_CORRELATION, correlation);
  }
  uint8_t* x = api[napi++];
  memset(x, 0, REC);
  put32(x, CUPTI_REC_KIND, CUPTI_ACTIVITY_KIND_RUNTIME);
  put32(x, 4, 211); /* cbid: cudaLaunchKernel */
  put64(x, 8, t);
  put64(x, 16, t + 1000);
  put32(x, CUPTI_API_CORRELATION, correlation);
}
