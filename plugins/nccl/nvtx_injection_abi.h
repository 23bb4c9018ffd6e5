/*
 * The part of NVTX's tool-injection interface this plugin uses: names and
 * memory layouts only, restated so the plugin builds without NVIDIA's
 * headers. Checked against the NVTX v3 headers (nvToolsExt.h,
 * nvtxDetail/nvtxTypes.h, nvtxImpl.h, nvtxInit.h, nvtxInitDefs.h,
 * nvtxImplCore.h).
 *
 * How NVTX v3 (header-only, compiled into every library that uses it)
 * finds a tool: on the first NVTX call of an instance it dlopens the file
 * named by NVTX_INJECTION64_PATH (RTLD_LAZY), looks up
 * "InitializeInjectionNvtx2" and calls it with its getExportTable
 * function. The tool fetches the callbacks export table and, per module,
 * an array of pointers to that instance's function-pointer slots, and
 * writes its own functions into the slots it wants. When the init
 * function returns 0, NVTX dlcloses the library and makes every call a
 * no-op; when it returns nonzero, every slot the tool left alone is set
 * to NULL, which the API functions treat as "no tool": pushes and pops
 * return NVTX_NO_PUSH_POP_TRACKING, creators (nvtxDomainCreateA,
 * nvtxDomainRegisterStringA, ...) return NULL, the rest do nothing.
 *
 * Each shared object that includes the NVTX v3 headers has its own
 * instance (its own tables, initialised on its own first call), so one
 * process may call InitializeInjectionNvtx2 several times, from several
 * threads: for instance once for PyTorch's and once for NCCL's, which
 * uses NVTX itself, in its "NCCL" domain.
 */
#ifndef TRAINSCOPE_NVTX_INJECTION_ABI_H
#define TRAINSCOPE_NVTX_INJECTION_ABI_H

#include <stddef.h>
#include <stdint.h>
#include <wchar.h>

/* Export tables (NvtxExportTableID). */
enum { NVTX_ETID_CALLBACKS = 1 };

/* Callback modules (NvtxCallbackModule, an int-sized enum). */
enum { NVTX_CB_MODULE_CORE = 1, NVTX_CB_MODULE_CORE2 = 5 };

/* Slots of the CORE module (NvtxCallbackIdCore) this plugin fills; slot 0 is unused. */
enum {
  NVTX_CBID_CORE_RangePushEx = 8,
  NVTX_CBID_CORE_RangePushA = 9,
  NVTX_CBID_CORE_RangePushW = 10,
  NVTX_CBID_CORE_RangePop = 11,
  NVTX_CBID_CORE_SIZE = 16, /* the table's out_size in NVTX v3; later versions may add ids */
};

/* Slots of the CORE2 module (NvtxCallbackIdCore2) this plugin fills; slot 0 is unused. */
enum {
  NVTX_CBID_CORE2_DomainRangePushEx = 4,
  NVTX_CBID_CORE2_DomainRangePop = 5,
  NVTX_CBID_CORE2_DomainCreateA = 12,
  NVTX_CBID_CORE2_DomainCreateW = 13,
  NVTX_CBID_CORE2_SIZE = 16,
};

/* A slot holds a function pointer of the slot's own type, stored through
 * this generic one. A table is an array, indexed by slot id, of pointers
 * to the slots; out_size is the number of ids (entry 0 and the entry at
 * out_size are NULL). */
typedef void (*NvtxFunctionPointer)(void);
typedef NvtxFunctionPointer** NvtxFunctionTable;

typedef struct {
  size_t struct_size; /* sizeof this struct */
  /* Returns nonzero and sets *out_table and *out_size for a known module, 0 otherwise. */
  int (*GetModuleFunctionTable)(int module, NvtxFunctionTable* out_table, unsigned int* out_size);
} NvtxExportTableCallbacks;

typedef const void* (*NvtxGetExportTableFunc_t)(uint32_t export_table_id);

/* The tool's entry point: nonzero for success. */
typedef int (*NvtxInitializeInjectionNvtxFunc_t)(NvtxGetExportTableFunc_t get_export_table);

/* A domain handle is opaque; NULL is the default ("global") domain. The
 * tool creates the others (nvtxDomainCreateA). */
struct ts_nvtx_domain;
typedef struct ts_nvtx_domain* nvtxDomainHandle_t;

/* nvtxMessageType_t */
enum {
  NVTX_MESSAGE_UNKNOWN = 0,
  NVTX_MESSAGE_TYPE_ASCII = 1,
  NVTX_MESSAGE_TYPE_UNICODE = 2,    /* const wchar_t* */
  NVTX_MESSAGE_TYPE_REGISTERED = 3, /* a handle from nvtxDomainRegisterString* */
};

/* What push and pop return when no tool tracks them. */
#define NVTX_NO_PUSH_POP_TRACKING ((int)-2)

/* nvtxEventAttributes_v2, the struct of NVTX_VERSION 3: the caller sets
 * version = 3 and size = sizeof (48). */
typedef struct {
  uint16_t version;
  uint16_t size;
  uint32_t category;
  int32_t colorType;
  uint32_t color;
  int32_t payloadType;
  int32_t reserved0;
  union {
    uint64_t ullValue;
    int64_t llValue;
    double dValue;
  } payload;
  int32_t messageType; /* NVTX_MESSAGE_* */
  union {
    const char* ascii;
    const wchar_t* unicode;
    const void* registered;
  } message;
} nvtxEventAttributes_t;

/* Function types of the slots this plugin fills. */
typedef int (*nvtxRangePushA_fn)(const char* message);
typedef int (*nvtxRangePushW_fn)(const wchar_t* message);
typedef int (*nvtxRangePushEx_fn)(const nvtxEventAttributes_t* attr);
typedef int (*nvtxRangePop_fn)(void);
typedef int (*nvtxDomainRangePushEx_fn)(nvtxDomainHandle_t domain, const nvtxEventAttributes_t* attr);
typedef int (*nvtxDomainRangePop_fn)(nvtxDomainHandle_t domain);
typedef nvtxDomainHandle_t (*nvtxDomainCreateA_fn)(const char* name);
typedef nvtxDomainHandle_t (*nvtxDomainCreateW_fn)(const wchar_t* name);

/* The layout on LP64 (x86-64, aarch64). */
_Static_assert(offsetof(nvtxEventAttributes_t, category) == 4, "nvtx category");
_Static_assert(offsetof(nvtxEventAttributes_t, colorType) == 8, "nvtx colorType");
_Static_assert(offsetof(nvtxEventAttributes_t, payloadType) == 16, "nvtx payloadType");
_Static_assert(offsetof(nvtxEventAttributes_t, payload) == 24, "nvtx payload");
_Static_assert(offsetof(nvtxEventAttributes_t, messageType) == 32, "nvtx messageType");
_Static_assert(offsetof(nvtxEventAttributes_t, message) == 40, "nvtx message");
_Static_assert(sizeof(nvtxEventAttributes_t) == 48, "nvtx attributes size");
_Static_assert(offsetof(NvtxExportTableCallbacks, GetModuleFunctionTable) == 8, "nvtx callbacks table");

#endif
