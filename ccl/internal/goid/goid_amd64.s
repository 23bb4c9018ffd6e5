#include "textflag.h"

// func get() uint64
TEXT ·get(SB), NOSPLIT, $0-8
	MOVQ (TLS), AX
	MOVQ AX, ret+0(FP)
	RET
