#include "textflag.h"

// func findWays8(tagBase unsafe.Pointer, tags, offs []uint64, ways []uintptr, shift uint, lineMax uint64)
//
// For each request i: the set's eight tag words (64 bytes at
// tagBase+ways[i]*8) masked to their tag bits and compared with tags[i],
// four at a time; the lowest matching way wins. See findWays.
TEXT ·findWays8(SB), NOSPLIT, $0-96
	MOVQ tagBase+0(FP), DI
	MOVQ tags_base+8(FP), SI
	MOVQ tags_len+16(FP), R10
	MOVQ offs_base+32(FP), R8
	MOVQ ways_base+56(FP), R9
	MOVQ shift+80(FP), CX
	MOVQ lineMax+88(FP), R11
	MOVQ $0x00000fffffffffff, R12 // TagMask
	MOVQ R12, X3
	VPBROADCASTQ X3, Y3
	XORQ DX, DX

loop:
	CMPQ DX, R10
	JAE  done
	MOVQ (SI)(DX*8), AX           // tags[i]
	CMPQ AX, R12
	JAE  none                     // not a valid tag (TagMask marks empty ways)
	MOVQ (R8)(DX*8), R13          // offs[i]
	CMPQ R13, R11
	JA   none
	MOVQ (R9)(DX*8), BX           // the set's first way
	LEAQ (DI)(BX*8), AX
	VPAND (AX), Y3, Y0
	VPAND 32(AX), Y3, Y1
	VPBROADCASTQ (SI)(DX*8), Y2
	VPCMPEQQ Y2, Y0, Y0
	VPCMPEQQ Y2, Y1, Y1
	VMOVMSKPD Y0, AX
	VMOVMSKPD Y1, R13
	SHLQ $4, R13
	ORQ  R13, AX
	JZ   none
	BSFQ AX, AX
	ADDQ AX, BX                   // the way
	SHLQ CX, BX
	ADDQ (R8)(DX*8), BX           // + offs[i]
	MOVQ BX, (R9)(DX*8)
	INCQ DX
	JMP  loop

none:
	MOVQ $-1, (R9)(DX*8)
	INCQ DX
	JMP  loop

done:
	VZEROUPPER
	RET
