package nccl

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/trainscope/trainscope/ccl"
	"github.com/trainscope/trainscope/runtime/cuda/dl"
)

// stubNCCL is a libnccl with every symbol the backend binds, whose
// ncclCommInitRankConfig keeps what it was given, with nccl.h's types:
// the 128-byte ncclUniqueId by value, ints, a config pointer.
const stubNCCL = `
#include <stddef.h>
#include <string.h>
typedef struct { char internal[128]; } ncclUniqueId;
typedef struct {
  size_t size; unsigned int magic, version;
  int blocking, cgaClusterSize, minCTAs, maxCTAs; const char* netName;
} ncclConfig_v21700;
typedef int ncclResult_t;
typedef void* ncclComm_t;

static ncclUniqueId seenID;
static int seenRanks, seenRank;
static ncclConfig_v21700 seenConfig;

ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank, ncclConfig_v21700* config) {
  seenID = commId; seenRanks = nranks; seenRank = rank;
  memcpy(&seenConfig, config, config->size < sizeof seenConfig ? config->size : sizeof seenConfig);
  *comm = (ncclComm_t)0x5eed;
  return 7; /* ncclInProgress */
}
void stubSeen(unsigned char id[128], int ints[2], ncclConfig_v21700* config) {
  memcpy(id, seenID.internal, 128); ints[0] = seenRanks; ints[1] = seenRank; *config = seenConfig;
}
ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* state) { *state = comm == (ncclComm_t)0x5eed ? 7 : 3; return 0; }
const char* ncclGetErrorString(ncclResult_t r) { return r == 3 ? "internal error - please report this issue to the NCCL developers" : "?"; }
const char* ncclGetLastError(ncclComm_t comm) { (void)comm; return "stub: proxy thread failed"; }
ncclResult_t ncclGetVersion(int* v) { *v = 22803; return 0; }
ncclResult_t ncclGetUniqueId(ncclUniqueId* id) { memset(id, 1, sizeof *id); return 0; }
ncclResult_t ncclCommFinalize(ncclComm_t c) { (void)c; return 0; }
ncclResult_t ncclCommDestroy(ncclComm_t c) { (void)c; return 0; }
ncclResult_t ncclCommAbort(ncclComm_t c) { (void)c; return 0; }
ncclResult_t ncclGroupStart(void) { return 0; }
ncclResult_t ncclGroupEnd(void) { return 0; }
ncclResult_t ncclAllReduce(void) { return 0; }
ncclResult_t ncclBroadcast(void) { return 0; }
ncclResult_t ncclReduce(void) { return 0; }
ncclResult_t ncclAllGather(void) { return 0; }
ncclResult_t ncclReduceScatter(void) { return 0; }
ncclResult_t ncclSend(void) { return 0; }
ncclResult_t ncclRecv(void) { return 0; }
`

// buildStub compiles src into a shared library, or skips the test where
// no C compiler is found.
func buildStub(t *testing.T, src string) string {
	t.Helper()
	cc := ""
	for _, name := range []string{os.Getenv("CC"), "cc", "gcc", "clang"} {
		if name == "" {
			continue
		}
		if p, err := exec.LookPath(name); err == nil {
			cc = p
			break
		}
	}
	if cc == "" {
		t.Skip("skipped: no C compiler (cc, gcc, clang) to build the stub library")
	}
	dir := t.TempDir()
	c, so := filepath.Join(dir, "stub.c"), filepath.Join(dir, "libncclstub.so")
	if err := os.WriteFile(c, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(cc, "-std=c11", "-O1", "-fPIC", "-shared", "-o", so, c).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", cc, err, out)
	}
	return so
}

// stubAPI builds the stub libnccl and binds the backend's calls to it, or
// skips the test where no C compiler is found.
func stubAPI(t *testing.T) (*dl.Library, *api) {
	t.Helper()
	// Local: the stub's symbols must not stand in for the real libnccl's
	// inside it, in the GPU tests that run later in this process.
	lib, err := dl.OpenLocal(buildStub(t, stubNCCL))
	if err != nil {
		t.Fatal(err)
	}
	a, err := bind(lib)
	if err != nil {
		t.Fatal(err)
	}
	return lib, a
}

// ncclCommInitRankConfig takes ncclUniqueId, 128 bytes, by value: on
// amd64 System V it is passed in memory, on the stack, and the ints and
// pointer after it still take the next registers. The C side receives
// every byte of the id and every other argument in its place.
func TestCommInitRankConfigArguments(t *testing.T) {
	lib, a := stubAPI(t)
	var seen uintptr
	b := dl.NewBinder(lib)
	b.Sym(&seen, "stubSeen")
	if err := b.Err(); err != nil {
		t.Fatal(err)
	}
	var id cUniqueID
	for i := range id.Internal {
		id.Internal[i] = byte(i*7 + 3)
	}
	h := new(uintptr)
	if rc := a.commInitRankConfig(h, 5, id, 3, newConfig(false)); rc != ncclInProgress || *h != 0x5eed {
		t.Fatalf("rc %d, comm %#x: want ncclInProgress and the stub's comm", rc, *h)
	}
	gotID := new([idSize]byte)
	ints := new([2]int32)
	cfg := new(cConfig)
	dl.Call(seen, uintptr(unsafe.Pointer(&gotID[0])), uintptr(unsafe.Pointer(&ints[0])), uintptr(unsafe.Pointer(cfg)))
	if *gotID != id.Internal {
		t.Errorf("the id reached C as % x", gotID[:])
	}
	if ints[0] != 5 || ints[1] != 3 {
		t.Errorf("nranks %d, rank %d reached C; want 5, 3", ints[0], ints[1])
	}
	if *cfg != *newConfig(false) {
		t.Errorf("the config reached C as %+v", *cfg)
	}

	// The communicator's state comes back through an ncclResult_t*; a
	// failure is described with NCCL's words for it and its last error.
	bk := New()
	bk.api = a
	if state, err := bk.asyncState(*h); err != nil || state != ncclInProgress {
		t.Errorf("asyncState = %d, %v; want ncclInProgress", state, err)
	}
	state, err := bk.asyncState(1)
	if err != nil || state != ncclInternalError {
		t.Fatalf("asyncState = %d, %v; want ncclInternalError", state, err)
	}
	err = bk.ncclErr("AllReduce", state, 1, "NCCL rank 0 of 2 on cuda:0")
	if !errors.Is(err, ccl.StatusInternal) {
		t.Errorf("%v: want StatusInternal", err)
	}
	for _, want := range []string{"AllReduce", "NCCL rank 0 of 2 on cuda:0", "ncclInternalError", "internal error - please report", "stub: proxy thread failed"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}

// TestGroupWaitHasOneDeadline: a group whose communicators all stay
// ncclInProgress gives up after the backend's timeout, not after one
// timeout per communicator, and says so for each.
func TestGroupWaitHasOneDeadline(t *testing.T) {
	_, a := stubAPI(t)
	const timeout = time.Second
	b := New(WithTimeout(timeout))
	b.api = a
	comms := make([]*comm, 4)
	for i := range comms {
		comms[i] = &comm{b: b, rank: i, size: len(comms), h: 0x5eed} // the stub's: always ncclInProgress
	}
	start := time.Now()
	errs := b.waitAll("GroupEnd", comms)
	took := time.Since(start)
	if len(errs) != len(comms) {
		t.Fatalf("%d errors for %d stuck communicators: %v", len(errs), len(comms), errs)
	}
	for _, err := range errs {
		if !errors.Is(err, ccl.StatusTimeout) {
			t.Errorf("%v: want StatusTimeout", err)
		}
	}
	// One timeout each would take 4 s; the bound leaves a loaded machine
	// more than a second of slack.
	if took < timeout || took > 2500*time.Millisecond {
		t.Errorf("gave up after %v; want one timeout (%v)", took, timeout)
	}
}
