package nccl

import (
	"github.com/trainscope/trainscope/runtime/cuda/dl"
)

// api holds the libnccl entry points.
type api struct {
	lib *dl.Library

	getVersion, getUniqueID              uintptr
	commFinalize, commDestroy, commAbort uintptr
	commGetAsyncError                    uintptr
	getErrorString, getLastError         uintptr
	groupStart, groupEnd                 uintptr
	allReduce, broadcast, reduce         uintptr
	allGather, reduceScatter             uintptr
	send, recv                           uintptr

	// ncclCommInitRankConfig takes the 128-byte ncclUniqueId by value,
	// which only purego.RegisterFunc can pass portably.
	commInitRankConfig func(comm *uintptr, nranks int32, id cUniqueID, rank int32, config *cConfig) int32
}

// cUniqueID is ncclUniqueId: 128 opaque bytes.
type cUniqueID struct {
	Internal [idSize]byte
}

// cConfig is ncclConfig_t as NCCL 2.17 laid it out; NCCL reads its size
// and version fields and fills everything newer with defaults.
type cConfig struct {
	Size           uint64
	Magic          uint32
	Version        uint32
	Blocking       int32
	CgaClusterSize int32
	MinCTAs        int32
	MaxCTAs        int32
	NetName        uintptr
}

const (
	configMagic   = 0xcafebeef
	configVersion = 21700 // NCCL_VERSION(2,17,0)
	configUndef   = -2147483648
)

func newConfig(blocking bool) *cConfig {
	b := int32(0)
	if blocking {
		b = 1
	}
	return &cConfig{Size: 40, Magic: configMagic, Version: configVersion, Blocking: b,
		CgaClusterSize: configUndef, MinCTAs: configUndef, MaxCTAs: configUndef}
}

func bind(lib *dl.Library) (*api, error) {
	a := &api{lib: lib}
	b := dl.NewBinder(lib)
	b.Sym(&a.getVersion, "ncclGetVersion")
	b.Sym(&a.getUniqueID, "ncclGetUniqueId")
	b.Func(&a.commInitRankConfig, "ncclCommInitRankConfig")
	b.Sym(&a.commFinalize, "ncclCommFinalize")
	b.Sym(&a.commDestroy, "ncclCommDestroy")
	b.Sym(&a.commAbort, "ncclCommAbort")
	b.Sym(&a.commGetAsyncError, "ncclCommGetAsyncError")
	b.Sym(&a.getErrorString, "ncclGetErrorString")
	b.Sym(&a.getLastError, "ncclGetLastError")
	b.Sym(&a.groupStart, "ncclGroupStart")
	b.Sym(&a.groupEnd, "ncclGroupEnd")
	b.Sym(&a.allReduce, "ncclAllReduce")
	b.Sym(&a.broadcast, "ncclBroadcast")
	b.Sym(&a.reduce, "ncclReduce")
	b.Sym(&a.allGather, "ncclAllGather")
	b.Sym(&a.reduceScatter, "ncclReduceScatter")
	b.Sym(&a.send, "ncclSend")
	b.Sym(&a.recv, "ncclRecv")
	if err := b.Err(); err != nil {
		return nil, err
	}
	return a, nil
}
