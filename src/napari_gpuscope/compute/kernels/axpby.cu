// axpby.cu -- the platform's demo kernel: out = a * x + b * y (float32).
//
// Conventions every kernel in this folder follows (see kernels/__init__.py):
//   * `extern "C" __global__ void name(...)` so NVRTC and the host shim find it by name;
//   * one thread per output element with a grid-stride loop and a `long long` element count,
//     so any size works with a capped 1-D grid;
//   * no #include, no shared memory, no atomics: the file compiles under NVRTC, nvcc and g++
//     with host_shim.h.

extern "C" __global__ void axpby(const float* __restrict__ x, const float* __restrict__ y,
                                 float* __restrict__ out, const float a, const float b,
                                 const long long n) {
    const long long stride = (long long)blockDim.x * gridDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        out[i] = a * x[i] + b * y[i];
    }
}
