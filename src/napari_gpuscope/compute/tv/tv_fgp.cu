// Fused kernels for total-variation (ROF) denoising by FGP on the dual (Beck & Teboulle 2009).
//
// Layout: a batch of independent problems, shape (batch, n0, ..., n_{ndim-1}), C order, with
// N = batch * n0 * ... * n_{ndim-1} elements (the batch is simply the slowest "axis", so it
// needs no index of its own). Dual fields hold ndim components stored one after the other:
// component a of element i is y[a * N + i]. Unused n's are 1 and unused weights 0.
//
// Differences are weighted forward differences with Neumann boundaries:
//   (grad_a u)_i = s_a * (u_{i+e_a} - u_i) if i_a < n_a - 1, else 0,
// and div is its negative adjoint. One thread per element, grid-stride loops, no shared memory
// and no atomics: every thread reads neighbours of read-only fields and writes only its own
// index, so in-place updates are race free. Each kernel has a torch twin in
// napari_gpuscope/compute/_tv_ops.py.

#define TV_MAX_DIMS 4

// Largest element count whose coordinates are computed in 32-bit unsigned arithmetic: NVIDIA
// GPUs have no integer divide instruction, and a 64-bit divide is a software routine several
// times longer than a 32-bit one (nvcc only adds a run-time range check before each one).
// Every index below N fits in 32 bits, and so do all n's and strides. Defined here only when
// not predefined, so a test can compile the file with a smaller limit to run the 64-bit path.
#ifndef TV_NARROW_INDEX_LIMIT
#define TV_NARROW_INDEX_LIMIT 0xFFFFFFFFLL
#endif

// Strides of the active axes (the batch is implicit above axis 0).
__device__ __forceinline__ void tv_strides(const long long* n, int ndim, long long* stride) {
    long long acc = 1;
#pragma unroll
    for (int a = TV_MAX_DIMS - 1; a >= 0; --a) {
        if (a < ndim) {
            stride[a] = acc;
            acc *= n[a];
        } else {
            stride[a] = 0;
        }
    }
}

// Whether a launch over N elements may use 32-bit coordinate math. The answer is the same for
// every thread of a launch, so the branch on it never diverges.
__device__ __forceinline__ bool tv_narrow_indices(long long N) {
    return N <= TV_NARROW_INDEX_LIMIT;
}

// Coordinates of element i along the active axes: peel one axis per step, fastest first, so it
// costs one division per axis (instead of a division and a remainder by each axis' stride).
__device__ __forceinline__ void tv_coords(long long i, const long long* n, int ndim, bool narrow,
                                          long long* coord) {
    if (narrow) {
        unsigned int q = (unsigned int)i;
#pragma unroll
        for (int a = TV_MAX_DIMS - 1; a >= 0; --a) {
            if (a < ndim) {
                const unsigned int na = (unsigned int)n[a];
                const unsigned int next = q / na;
                coord[a] = (long long)(q - next * na);
                q = next;
            }
        }
    } else {
        long long q = i;
#pragma unroll
        for (int a = TV_MAX_DIMS - 1; a >= 0; --a) {
            if (a < ndim) {
                const long long next = q / n[a];
                coord[a] = q - next * n[a];
                q = next;
            }
        }
    }
}

// The per-launch geometry every kernel starts from: sizes n, weights s and strides of the active
// axes, and whether coordinates fit 32-bit arithmetic (declares n, s, stride and narrow).
#define TV_GEOMETRY(N, n0, n1, n2, n3, ndim, s0, s1, s2, s3)      \
    const long long n[TV_MAX_DIMS] = {n0, n1, n2, n3};             \
    const float s[TV_MAX_DIMS] = {s0, s1, s2, s3};                 \
    long long stride[TV_MAX_DIMS];                                 \
    tv_strides(n, ndim, stride);                                   \
    const bool narrow = tv_narrow_indices(N)

// Weighted forward difference s * (u[i + e_a] - u[i]) along one axis; 0 on its last index.
__device__ __forceinline__ float tv_forward_diff(const float* u, long long i, float ui,
                                                 long long ia, long long na, long long stride,
                                                 float s) {
    return (ia < na - 1) ? s * (u[i + stride] - ui) : 0.0f;
}

// u_i = clamp(f_i + (div z)_i, lo, hi)
extern "C" __global__ void fgp_primal(const float* f, const float* z, float* u, long long N,
                                      long long n0, long long n1, long long n2, long long n3,
                                      int ndim, float s0, float s1, float s2, float s3,
                                      float lo, float hi) {
    TV_GEOMETRY(N, n0, n1, n2, n3, ndim, s0, s1, s2, s3);
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < N;
         i += (long long)blockDim.x * gridDim.x) {
        long long ia[TV_MAX_DIMS] = {0, 0, 0, 0};
        tv_coords(i, n, ndim, narrow, ia);
        float div = 0.0f;
#pragma unroll
        for (int a = 0; a < TV_MAX_DIMS; ++a) {
            if (a < ndim) {
                const long long k = (long long)a * N + i;
                float acc = 0.0f;
                if (ia[a] < n[a] - 1) acc += z[k];
                if (ia[a] > 0) acc -= z[k - stride[a]];
                div += s[a] * acc;
            }
        }
        u[i] = fminf(fmaxf(f[i] + div, lo), hi);
    }
}

// y_new = proj_{|.|<=w}(z_i + grad(u)_i * inv_l2);  z_i = y_new + mom * (y_new - y_i);  y_i = y_new
extern "C" __global__ void fgp_dual(const float* u, float* z, float* y, long long N,
                                    long long n0, long long n1, long long n2, long long n3,
                                    int ndim, float s0, float s1, float s2, float s3,
                                    float inv_l2, float w, float mom) {
    TV_GEOMETRY(N, n0, n1, n2, n3, ndim, s0, s1, s2, s3);
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < N;
         i += (long long)blockDim.x * gridDim.x) {
        long long ia[TV_MAX_DIMS] = {0, 0, 0, 0};
        tv_coords(i, n, ndim, narrow, ia);
        float v[TV_MAX_DIMS] = {0.0f, 0.0f, 0.0f, 0.0f};
        float norm2 = 0.0f;
        const float ui = u[i];
#pragma unroll
        for (int a = 0; a < TV_MAX_DIMS; ++a) {
            if (a < ndim) {
                const float g = tv_forward_diff(u, i, ui, ia[a], n[a], stride[a], s[a]);
                v[a] = z[(long long)a * N + i] + g * inv_l2;
                norm2 += v[a] * v[a];
            }
        }
        const float norm = sqrtf(norm2);
        const float scale = (norm > w) ? w / norm : 1.0f;
#pragma unroll
        for (int a = 0; a < TV_MAX_DIMS; ++a) {
            if (a < ndim) {
                const long long k = (long long)a * N + i;
                const float y_new = v[a] * scale;
                z[k] = y_new + mom * (y_new - y[k]);
                y[k] = y_new;
            }
        }
    }
}

// With u = P_C(f + div y): primal_i = 0.5 (u_i - f_i)^2 + w |grad u_i|,
// gap_i = w |grad u_i| - <y_i, grad u_i>  (sums to P(u) - D_C(y) >= 0, also with a box C).
extern "C" __global__ void tv_gap_terms(const float* f, const float* y, const float* u,
                                        float* primal, float* gap, long long N,
                                        long long n0, long long n1, long long n2, long long n3,
                                        int ndim, float s0, float s1, float s2, float s3,
                                        float w) {
    TV_GEOMETRY(N, n0, n1, n2, n3, ndim, s0, s1, s2, s3);
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < N;
         i += (long long)blockDim.x * gridDim.x) {
        long long ia[TV_MAX_DIMS] = {0, 0, 0, 0};
        tv_coords(i, n, ndim, narrow, ia);
        float norm2 = 0.0f;
        float dot = 0.0f;
        const float ui = u[i];
#pragma unroll
        for (int a = 0; a < TV_MAX_DIMS; ++a) {
            if (a < ndim) {
                const float g = tv_forward_diff(u, i, ui, ia[a], n[a], stride[a], s[a]);
                norm2 += g * g;
                dot += y[(long long)a * N + i] * g;
            }
        }
        const float tv = sqrtf(norm2);
        const float diff = ui - f[i];
        primal[i] = 0.5f * diff * diff + w * tv;
        gap[i] = w * tv - dot;
    }
}
