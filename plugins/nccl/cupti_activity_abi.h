/*
 * The part of CUPTI's activity interface the plugin uses, written from
 * NVIDIA's public documentation of CUPTI (cupti_activity.h, CUDA 12 and
 * 13): function types, the constants, and the offsets of the fields read
 * from activity records. Nothing here is compiled against CUPTI; the
 * library is opened at run time (dlopen), so the plugin builds on a
 * machine without CUDA.
 *
 * The records are read by offset rather than through a struct because
 * their layout is versioned (CUpti_ActivityKernel4 … 11, Memcpy5/6,
 * Memset4): each version appends fields and keeps the ones read here
 * where they were, which is what these offsets rely on.
 */
#ifndef TRAINSCOPE_CUPTI_ACTIVITY_ABI_H
#define TRAINSCOPE_CUPTI_ACTIVITY_ABI_H

#include <stddef.h>
#include <stdint.h>

typedef int CUptiResult; /* CUPTI_SUCCESS = 0 */
enum { CUPTI_SUCCESS = 0 };

/* CUpti_ActivityKind values. */
enum {
  CUPTI_ACTIVITY_KIND_MEMCPY = 1,
  CUPTI_ACTIVITY_KIND_MEMSET = 2,
  CUPTI_ACTIVITY_KIND_KERNEL = 3,
  CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL = 10,
  CUPTI_ACTIVITY_KIND_MEMORY2 = 49,
};

/* CUpti_ActivityFlag: cuptiActivityFlushAll's flag. */
enum { CUPTI_ACTIVITY_FLAG_FLUSH_FORCED = 1 };

/* Buffers must be aligned to this many bytes. */
enum { CUPTI_BUFFER_ALIGN = 8 };

typedef void (*CUpti_BuffersCallbackRequestFunc)(uint8_t** buffer, size_t* size, size_t* maxNumRecords);
typedef void (*CUpti_BuffersCallbackCompleteFunc)(void* context, uint32_t streamId, uint8_t* buffer, size_t size,
                                                  size_t validSize);
typedef uint64_t (*CUpti_TimestampCallbackFunc)(void);

typedef CUptiResult (*cuptiActivityRegisterCallbacks_t)(CUpti_BuffersCallbackRequestFunc,
                                                        CUpti_BuffersCallbackCompleteFunc);
typedef CUptiResult (*cuptiActivityEnable_t)(int kind);
typedef CUptiResult (*cuptiActivityDisable_t)(int kind);
typedef CUptiResult (*cuptiActivityGetNextRecord_t)(uint8_t* buffer, size_t validBufferSizeBytes, void** record);
typedef CUptiResult (*cuptiActivityFlushAll_t)(uint32_t flag);
typedef CUptiResult (*cuptiActivityFlushPeriod_t)(uint32_t ms);
typedef CUptiResult (*cuptiActivityGetNumDroppedRecords_t)(void* context, uint32_t streamId, size_t* dropped);
typedef CUptiResult (*cuptiActivityRegisterTimestampCallback_t)(CUpti_TimestampCallbackFunc);
typedef CUptiResult (*cuptiGetResultString_t)(CUptiResult, const char** str);
/* The callback API (cupti_callbacks.h): a subscriber's function is called
 * as the API functions it enabled begin and end. */
typedef void* CUpti_SubscriberHandle;
typedef void (*CUpti_CallbackFunc)(void* userdata, int domain, uint32_t cbid, const void* cbdata);
typedef CUptiResult (*cuptiSubscribe_t)(CUpti_SubscriberHandle* subscriber, CUpti_CallbackFunc callback,
                                        void* userdata);
typedef CUptiResult (*cuptiEnableCallback_t)(uint32_t enable, CUpti_SubscriberHandle subscriber, int domain,
                                             uint32_t cbid);

/* Every record starts with its kind, a uint32_t. */
enum { CUPTI_REC_KIND = 0 };

/* CUpti_ActivityKernel4 … 11 (KERNEL, CONCURRENT_KERNEL). */
enum {
  CUPTI_KERNEL_START = 16,       /* uint64_t ns */
  CUPTI_KERNEL_END = 24,         /* uint64_t ns */
  CUPTI_KERNEL_DEVICE = 40,      /* uint32_t */
  CUPTI_KERNEL_CONTEXT = 44,     /* uint32_t */
  CUPTI_KERNEL_STREAM = 48,      /* uint32_t */
  CUPTI_KERNEL_GRID = 52,        /* int32_t[3] */
  CUPTI_KERNEL_BLOCK = 64,       /* int32_t[3] */
  CUPTI_KERNEL_CORRELATION = 92, /* uint32_t */
  CUPTI_KERNEL_NAME = 104,       /* const char*, shared by every record of the kernel */
  CUPTI_KERNEL_MIN_SIZE = 112,
};

/* CUpti_ActivityMemcpy5/6 (MEMCPY) and CUpti_ActivityMemset4 (MEMSET). */
enum {
  CUPTI_MEMCPY_COPY_KIND = 4, /* uint8_t, memcpy only */
  CUPTI_MEM_BYTES = 8,        /* uint64_t */
  CUPTI_MEM_START = 16,       /* uint64_t ns */
  CUPTI_MEM_END = 24,         /* uint64_t ns */
  CUPTI_MEM_DEVICE = 32,      /* uint32_t */
  CUPTI_MEM_CONTEXT = 36,     /* uint32_t */
  CUPTI_MEM_STREAM = 40,      /* uint32_t */
  CUPTI_MEM_CORRELATION = 44, /* uint32_t */
  CUPTI_MEM_MIN_SIZE = 48,
};

/* CUpti_ActivityMemory3/4 (MEMORY2): an allocation or a release of
 * memory, timed when the call made it. */
enum {
  CUPTI_MEMORY2_OPERATION = 4,   /* uint32_t CUpti_ActivityMemoryOperationType */
  CUPTI_MEMORY2_KIND = 8,        /* uint32_t CUpti_ActivityMemoryKind */
  CUPTI_MEMORY2_CORRELATION = 12, /* uint32_t */
  CUPTI_MEMORY2_BYTES = 24,      /* uint64_t */
  CUPTI_MEMORY2_TIMESTAMP = 32,  /* uint64_t ns */
  CUPTI_MEMORY2_DEVICE = 52,     /* uint32_t */
  CUPTI_MEMORY2_CONTEXT = 56,    /* uint32_t */
  CUPTI_MEMORY2_STREAM = 60,     /* uint32_t */
  CUPTI_MEMORY2_MIN_SIZE = 64,
};
/* CUpti_ActivityMemoryOperationType and CUpti_ActivityMemoryKind's device
 * memory. */
enum { CUPTI_MEMORY_OPERATION_ALLOCATION = 1, CUPTI_MEMORY_OPERATION_RELEASE = 2 };
enum { CUPTI_MEMORY_KIND_DEVICE = 3 };

/* CUpti_CallbackDomain, and CUpti_ApiCallbackSite's "entering". */
enum { CUPTI_CB_DOMAIN_DRIVER_API = 1, CUPTI_CB_DOMAIN_RUNTIME_API = 2 };
enum { CUPTI_API_ENTER = 0 };

/* CUpti_CallbackData, what a driver or runtime API callback gets: where
 * it is called, and the correlation id the call's kernel records carry. */
enum {
  CUPTI_CB_SITE = 0,         /* uint32_t CUpti_ApiCallbackSite */
  CUPTI_CB_CORRELATION = 64, /* uint32_t */
};

/* The callback ids of the calls that launch kernels (cupti_runtime_cbid.h,
 * cupti_driver_cbid.h): cudaLaunchKernel (_ptsz), cudaLaunchCooperativeKernel
 * (_ptsz), cudaGraphLaunch (_ptsz), cudaLaunchKernelExC (_ptsz); cuLaunchKernel,
 * cuLaunchKernel_ptsz, cuLaunchCooperativeKernel (_ptsz), cuGraphLaunch
 * (_ptsz), cuLaunchKernelEx (_ptsz). */
#define CUPTI_RUNTIME_LAUNCHES 211, 214, 269, 270, 311, 312, 430, 431
#define CUPTI_DRIVER_LAUNCHES 307, 442, 477, 478, 514, 515, 652, 653

#endif
