package cuda_test

import (
	"errors"
	"fmt"

	"github.com/bam-go/bam/internal/cuda"
	"github.com/bam-go/bam/kernels"
)

// Fill a device array with the test pattern and read it back. Without a GPU
// the first call says why and the caller uses the CPU engine.
func Example() {
	if err := cuda.Available(); err != nil {
		if errors.Is(err, cuda.ErrNoDriver) || errors.Is(err, cuda.ErrNoDevice) {
			fmt.Println("CPU engine:", err)
			return
		}
		panic(err)
	}
	ctx, err := cuda.Primary(0)
	if err != nil {
		panic(err)
	}
	defer ctx.Close()
	ptx, _ := kernels.PTX(kernels.FamilyBasic)
	mod, err := ctx.LoadPTX(ptx) // a JIT failure's log is in err
	if err != nil {
		panic(err)
	}
	defer mod.Unload()
	fill, err := mod.Function(kernels.FillPatternU64)
	if err != nil {
		panic(err)
	}
	const n = 1 << 20
	dev, err := ctx.Alloc(n * 8)
	if err != nil {
		panic(err) // errors.Is(err, cuda.ErrOutOfMemory) when the device is full
	}
	defer dev.Free()
	if err := fill.Launch(cuda.Linear(n, 256, 0), cuda.Ptr(dev.Ptr()), cuda.U64(n), cuda.U64(42)); err != nil {
		panic(err)
	}
	out := make([]uint64, n)
	if err := dev.Read(0, cuda.AsBytes(out)); err != nil { // waits for the kernel
		panic(err)
	}
	fmt.Println(out[7] == kernels.Pattern64(42, 7))
}
