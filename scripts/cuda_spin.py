#!/usr/bin/env python3
"""cuda_spin.py SECONDS: keep one GPU busy through the CUDA driver API alone.

Used by gpu-smoke.sh where PyTorch is not installed: it needs only the driver's
libcuda.so.1. It holds 1 GiB of GPU memory and launches a small PTX kernel (compiled by the
driver at load time) in a loop, so the GPU shows real utilisation and the process shows up
in NVML's process list with its memory.
"""
import ctypes
import sys
import time

PTX = b"""
.version 6.0
.target sm_50
.address_size 64

.visible .entry spin(.param .u64 out, .param .u32 n)
{
    .reg .pred %p;
    .reg .b32 %r<5>;
    .reg .b64 %rd<3>;

    ld.param.u64 %rd1, [out];
    ld.param.u32 %r1, [n];
    mov.u32 %r2, 0;
    mov.u32 %r3, 1;
LOOP:
    mad.lo.u32 %r3, %r3, 1664525, 1013904223;
    add.u32 %r2, %r2, 1;
    setp.lt.u32 %p, %r2, %r1;
    @%p bra LOOP;
    cvta.to.global.u64 %rd2, %rd1;
    st.global.u32 [%rd2], %r3;
    ret;
}
"""


def check(what, ret):
    if ret != 0:
        name = ctypes.c_char_p()
        cuda.cuGetErrorName(ret, ctypes.byref(name))
        sys.exit("%s failed: %s (%d)" % (what, name.value.decode() if name.value else "?", ret))


seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 30
cuda = ctypes.CDLL("libcuda.so.1")
check("cuInit", cuda.cuInit(0))
dev = ctypes.c_int()
check("cuDeviceGet", cuda.cuDeviceGet(ctypes.byref(dev), 0))
name = ctypes.create_string_buffer(256)
cuda.cuDeviceGetName(name, 256, dev)
ctx = ctypes.c_void_p()
check("cuCtxCreate", cuda.cuCtxCreate_v2(ctypes.byref(ctx), 0, dev))
held = ctypes.c_uint64()
check("cuMemAlloc (1 GiB)", cuda.cuMemAlloc_v2(ctypes.byref(held), ctypes.c_size_t(1 << 30)))
out = ctypes.c_uint64()
check("cuMemAlloc", cuda.cuMemAlloc_v2(ctypes.byref(out), ctypes.c_size_t(4)))
module = ctypes.c_void_p()
check("cuModuleLoadData", cuda.cuModuleLoadData(ctypes.byref(module), ctypes.c_char_p(PTX)))
func = ctypes.c_void_p()
check("cuModuleGetFunction", cuda.cuModuleGetFunction(ctypes.byref(func), module, b"spin"))

arg_out = ctypes.c_uint64(out.value)
arg_n = ctypes.c_uint32(1 << 20)
params = (ctypes.c_void_p * 2)(ctypes.cast(ctypes.byref(arg_out), ctypes.c_void_p),
                               ctypes.cast(ctypes.byref(arg_n), ctypes.c_void_p))
end = time.time() + seconds
launches = 0
while time.time() < end:
    check("cuLaunchKernel", cuda.cuLaunchKernel(func, 1024, 1, 1, 256, 1, 1, 0, None, params, None))
    check("cuCtxSynchronize", cuda.cuCtxSynchronize())
    launches += 1
print("kernel launches: %d on %s" % (launches, name.value.decode()))
