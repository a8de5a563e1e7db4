"""A CUDA workload with no framework: allocate GPU memory through the CUDA
driver API (libcuda.so.1, present wherever the NVIDIA driver is), in 256 MiB
chunks up to a target or until CUDA refuses, keep a kernel-free context busy
with memsets, hold, and exit.

usage: python3 cuda_alloc.py TARGET_MIB HOLD_SECONDS [SECONDS_PER_CHUNK]

Prints "pid <pid> allocated <MiB> MiB (<why it stopped>)" once allocation
ends, then "done" when it exits. Run under the environment a gpushare
reservation gives (gpu-check -env-file) to see its limits enforced.
"""
import ctypes
import os
import sys
import time

CHUNK = 256 << 20


def main():
    target_mib, hold = int(sys.argv[1]), float(sys.argv[2])
    pace = float(sys.argv[3]) if len(sys.argv) > 3 else 0.0
    cuda = ctypes.CDLL("libcuda.so.1")

    def check(ret, what):
        if ret != 0:
            name = ctypes.c_char_p()
            cuda.cuGetErrorName(ret, ctypes.byref(name))
            raise RuntimeError("%s: %s" % (what, name.value.decode() if name.value else ret))

    check(cuda.cuInit(0), "cuInit")
    dev = ctypes.c_int()
    check(cuda.cuDeviceGet(ctypes.byref(dev), 0), "cuDeviceGet")
    ctx = ctypes.c_void_p()
    check(cuda.cuCtxCreate_v2(ctypes.byref(ctx), 0, dev), "cuCtxCreate")
    ptrs, total, why = [], 0, "target reached"
    while total < target_mib << 20:
        p = ctypes.c_uint64()
        ret = cuda.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(CHUNK))
        if ret != 0:
            name = ctypes.c_char_p()
            cuda.cuGetErrorName(ret, ctypes.byref(name))
            why = "CUDA refused: " + name.value.decode()
            break
        check(cuda.cuMemsetD8_v2(p, ctypes.c_ubyte(1), ctypes.c_size_t(CHUNK)), "cuMemsetD8")
        ptrs.append(p)
        total += CHUNK
        time.sleep(pace)
    print("pid %d allocated %d MiB (%s)" % (os.getpid(), total >> 20, why), flush=True)
    end = time.time() + hold
    while time.time() < end:
        for p in ptrs[:4]:
            cuda.cuMemsetD8_v2(p, ctypes.c_ubyte(2), ctypes.c_size_t(CHUNK))
        cuda.cuCtxSynchronize()
    print("done", flush=True)


if __name__ == "__main__":
    main()
