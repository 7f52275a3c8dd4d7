// host_shim.h -- run napari-gpuscope's CUDA kernels on the CPU, for verification only.
//
// g++ force-includes this header (`-include host_shim.h`) in front of an unchanged `.cu` file.
// It maps the few CUDA features our kernels may use onto plain C++:
//
//   * `__global__`, `__device__`, `__host__`, `__forceinline__`, `__launch_bounds__(...)`;
//   * the built-in index variables `threadIdx`, `blockIdx`, `blockDim`, `gridDim` (thread_local,
//     so launches from different host threads do not interfere);
//   * the CUDA math built-ins that have no standard C++ spelling (`rsqrtf`, `__fdividef`, ...).
//
// It deliberately does NOT provide `__shared__`, `__syncthreads`, atomics or warp intrinsics:
// kernels are one thread per output element, and a kernel that uses those fails to compile here,
// which is how the rule is enforced. Nor does it provide typedefs such as `int64_t`, because NVRTC
// has no standard headers either -- kernels spell `long long`, `unsigned int`, ...
//
// `GPUSCOPE_HOST_LAUNCHER(kernel)` (emitted by the Python HostBackend after the kernel source)
// defines the C entry points the backend calls through ctypes:
//
//   void gpuscope_launch_<kernel>(unsigned grid, unsigned block, void** args, int reverse);
//   const char* gpuscope_signature_<kernel>();
//
// `args` follows the CUDA kernelParams convention: args[i] points to the value of parameter i.
// The launcher runs the "threads" one after another (in reverse order when `reverse` != 0, which
// exposes kernels whose threads read what other threads write). The signature string lists the
// parameter types, e.g. "f32*,f32*,f32*,f32,f32,i64", so the backend can reject arguments whose
// type does not match the C parameter exactly -- a mistake CUDA would not report.
#pragma once

#ifndef __CUDACC__

#include <cmath>
#include <cstddef>
#include <string>
#include <type_traits>
#include <utility>

#define __global__
// `__device__` is empty rather than `inline` so that both `__device__ inline` and
// `__device__ __forceinline__` stay valid C++ (a repeated `inline` is an error).
#define __device__
#define __host__
#define __constant__
#define __forceinline__ inline __attribute__((always_inline))
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)
// `__restrict__` is understood by g++ natively.

struct uint3 {
    unsigned int x, y, z;
};

struct dim3 {
    unsigned int x, y, z;
    constexpr dim3(unsigned int x_ = 1, unsigned int y_ = 1, unsigned int z_ = 1)
        : x(x_), y(y_), z(z_) {}
};

inline thread_local uint3 threadIdx{0, 0, 0};
inline thread_local uint3 blockIdx{0, 0, 0};
inline thread_local dim3 blockDim{1, 1, 1};
inline thread_local dim3 gridDim{1, 1, 1};

// CUDA math built-ins without a standard C/C++ name. The standard ones (sqrtf, fmaxf, fminf,
// fabsf, expf, logf, powf, fmaf, floorf, copysignf, ...) come from <cmath>.
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline double rsqrt(double x) { return 1.0 / std::sqrt(x); }
inline float __fdividef(float a, float b) { return a / b; }
inline float __frcp_rn(float x) { return 1.0f / x; }
inline float __fsqrt_rn(float x) { return std::sqrt(x); }
inline float __saturatef(float x) { return std::fmin(std::fmax(x, 0.0f), 1.0f); }
template <class T>
inline T __ldg(const T* p) { return *p; }

// CUDA's overloaded device min/max for same-typed arguments.
#define GPUSCOPE_HOST_MINMAX(T)                              \
    inline T min(T a, T b) { return b < a ? b : a; }         \
    inline T max(T a, T b) { return a < b ? b : a; }
GPUSCOPE_HOST_MINMAX(int)
GPUSCOPE_HOST_MINMAX(unsigned int)
GPUSCOPE_HOST_MINMAX(long long)
GPUSCOPE_HOST_MINMAX(unsigned long long)
GPUSCOPE_HOST_MINMAX(float)
GPUSCOPE_HOST_MINMAX(double)
#undef GPUSCOPE_HOST_MINMAX

namespace gpuscope_host {

// Short type codes shared with the Python side (numpy dtype names, abbreviated).
template <class T>
struct type_code;  // no definition: an unsupported parameter type is a compile error
template <> struct type_code<float> { static constexpr const char* value = "f32"; };
template <> struct type_code<double> { static constexpr const char* value = "f64"; };
template <> struct type_code<signed char> { static constexpr const char* value = "i8"; };
template <> struct type_code<unsigned char> { static constexpr const char* value = "u8"; };
template <> struct type_code<short> { static constexpr const char* value = "i16"; };
template <> struct type_code<unsigned short> { static constexpr const char* value = "u16"; };
template <> struct type_code<int> { static constexpr const char* value = "i32"; };
template <> struct type_code<unsigned int> { static constexpr const char* value = "u32"; };
template <> struct type_code<long> {
    static constexpr const char* value = sizeof(long) == 8 ? "i64" : "i32";
};
template <> struct type_code<unsigned long> {
    static constexpr const char* value = sizeof(long) == 8 ? "u64" : "u32";
};
template <> struct type_code<long long> { static constexpr const char* value = "i64"; };
template <> struct type_code<unsigned long long> { static constexpr const char* value = "u64"; };
template <> struct type_code<bool> { static constexpr const char* value = "bool"; };

template <class A>
std::string parameter_code() {
    using Bare = std::remove_cv_t<A>;
    if constexpr (std::is_pointer_v<Bare>) {
        return std::string(type_code<std::remove_cv_t<std::remove_pointer_t<Bare>>>::value) + "*";
    } else {
        return type_code<Bare>::value;
    }
}

template <class... A>
const char* signature(void (*)(A...)) {
    static const std::string text = [] {
        std::string joined;
        ((joined += (joined.empty() ? "" : ",") + parameter_code<A>()), ...);
        return joined;
    }();
    return text.c_str();
}

template <class... A, std::size_t... I>
inline void call(void (*kernel)(A...), void** args, std::index_sequence<I...>) {
    kernel(*static_cast<std::remove_cv_t<A>*>(args[I])...);
}

template <class... A>
void launch(void (*kernel)(A...), unsigned grid, unsigned block, void** args, int reverse) {
    gridDim = dim3(grid, 1, 1);
    blockDim = dim3(block, 1, 1);
    const unsigned long long total = static_cast<unsigned long long>(grid) * block;
    for (unsigned long long step = 0; step < total; ++step) {
        const unsigned long long linear = reverse ? total - 1 - step : step;
        blockIdx = uint3{static_cast<unsigned>(linear / block), 0, 0};
        threadIdx = uint3{static_cast<unsigned>(linear % block), 0, 0};
        call(kernel, args, std::index_sequence_for<A...>{});
    }
}

}  // namespace gpuscope_host

#define GPUSCOPE_HOST_LAUNCHER(kernel)                                                      \
    extern "C" void gpuscope_launch_##kernel(unsigned grid, unsigned block, void** args,    \
                                             int reverse) {                                 \
        ::gpuscope_host::launch(&kernel, grid, block, args, reverse);                       \
    }                                                                                       \
    extern "C" const char* gpuscope_signature_##kernel() {                                  \
        return ::gpuscope_host::signature(&kernel);                                         \
    }

#endif  // __CUDACC__
