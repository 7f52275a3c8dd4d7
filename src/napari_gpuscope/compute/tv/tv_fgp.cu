// Fused kernels for total-variation (ROF) denoising by FGP on the dual (Beck & Teboulle 2009).
//
// Layout: a batch of independent problems, shape (batch, n0, ..., n_{D-1}), C order, with
// N = batch * n0 * ... * n_{D-1} elements (the batch is simply the slowest "axis", so it needs no
// index of its own). Dual fields hold D components stored one after the other: component a of
// element i is y[a * N + i]. Unused n's are 1 and unused weights 0.
//
// Differences are weighted forward differences with Neumann boundaries:
//   (grad_a u)_i = s_a * (u_{i+e_a} - u_i) if i_a < n_a - 1, else 0,
// and div is its negative adjoint. One thread per element, grid-stride loops, no shared memory
// and no atomics. Every thread writes only its own index; fields that threads read at their
// neighbours are never written by the same launch (fgp_step reads z and writes z_next, a separate
// buffer), so every kernel is race free. Each kernel has a torch twin in _ops.py beside this file.
//
// Every kernel is a template on the number D of coupled axes (loops unroll, arrays stay in
// registers) and on the index type I: `unsigned int` when every index the launch touches fits
// in 32 bits (GPUs have no integer divide instruction; a 32-bit divide is a few instructions, a
// 64-bit one a long software routine), `long long` otherwise. The extern "C" entry points below
// name both: fgp_step_3d_u32, fgp_step_3d_i64, ... The host chooses (see _ops.py).

#define TV_MAX_DIMS 4

// Clamp that keeps NaN (fminf/fmaxf would replace a NaN by the bound, unlike torch.clamp).
__device__ __forceinline__ float tv_clamp(float x, float lo, float hi) {
    return x < lo ? lo : (x > hi ? hi : x);
}

// The geometry of a launch: sizes, weights and strides of the D coupled axes.
template <int D, class I>
struct TvGrid {
    I n[D];
    I stride[D];
    float s[D];
};

template <int D, class I>
__device__ __forceinline__ TvGrid<D, I> tv_grid(I n0, I n1, I n2, I n3, float s0, float s1,
                                                float s2, float s3) {
    const I n_all[TV_MAX_DIMS] = {n0, n1, n2, n3};
    const float s_all[TV_MAX_DIMS] = {s0, s1, s2, s3};
    TvGrid<D, I> g;
    I acc = 1;
#pragma unroll
    for (int a = D - 1; a >= 0; --a) {
        g.n[a] = n_all[a];
        g.s[a] = s_all[a];
        g.stride[a] = acc;
        acc *= n_all[a];
    }
    return g;
}

// Coordinates of element i along the coupled axes: one division per axis, fastest axis first.
template <int D, class I>
__device__ __forceinline__ void tv_coords(I i, const TvGrid<D, I>& g, I* coord) {
    I q = i;
#pragma unroll
    for (int a = D - 1; a >= 0; --a) {
        const I next = q / g.n[a];
        coord[a] = q - next * g.n[a];
        q = next;
    }
}

// First element of a grid-stride loop and its step, in the launch's index type.
template <class I>
__device__ __forceinline__ I tv_first() {
    return (I)blockIdx.x * (I)blockDim.x + (I)threadIdx.x;
}
template <class I>
__device__ __forceinline__ I tv_step() {
    return (I)blockDim.x * (I)gridDim.x;
}

// u_j = clamp(f_j + (div z)_j, lo, hi) at element j with coordinates c.
template <int D, class I>
__device__ __forceinline__ float tv_primal_at(const float* __restrict__ f,
                                              const float* __restrict__ z, I N, I j, const I* c,
                                              const TvGrid<D, I>& g, float lo, float hi) {
    float div = 0.0f;
#pragma unroll
    for (int a = 0; a < D; ++a) {
        const I k = (I)a * N + j;
        float acc = 0.0f;
        if (c[a] < g.n[a] - 1) acc += z[k];
        if (c[a] > 0) acc -= z[k - g.stride[a]];
        div += g.s[a] * acc;
    }
    return tv_clamp(f[j] + div, lo, hi);
}

// ---- fgp_primal: u = clamp(f + div z, lo, hi) ----------------------------------------------

template <int D, class I>
__device__ __forceinline__ void tv_fgp_primal(const float* __restrict__ f,
                                              const float* __restrict__ z, float* __restrict__ u,
                                              I N, I n0, I n1, I n2, I n3, float s0, float s1,
                                              float s2, float s3, float lo, float hi) {
    const TvGrid<D, I> g = tv_grid<D, I>(n0, n1, n2, n3, s0, s1, s2, s3);
    for (I i = tv_first<I>(); i < N; i += tv_step<I>()) {
        I c[D];
        tv_coords<D, I>(i, g, c);
        u[i] = tv_primal_at<D, I>(f, z, N, i, c, g, lo, hi);
    }
}

// ---- fgp_step: one whole FGP iteration in one pass ------------------------------------------
//
//   u       = clamp(f + div z, lo, hi)                 (computed on the fly, never stored)
//   y_new   = proj_{|.| <= w}(z_i + grad(u)_i * inv_l2)
//   z_next  = y_new + mom * (y_new - y_i)
//   y_i     = y_new
//
// u at i and at its D forward neighbours is recomputed from f and z (which neighbouring threads
// also read, from cache); DRAM sees f and z read once, y read and written once and z_next written
// once: (1 + 4 D) * 4 bytes per element instead of (3 + 5 D) * 4 for a primal and a dual pass.

template <int D, class I>
__device__ __forceinline__ void tv_fgp_step(const float* __restrict__ f,
                                            const float* __restrict__ z, float* __restrict__ y,
                                            float* __restrict__ z_next, I N, I n0, I n1, I n2,
                                            I n3, float s0, float s1, float s2, float s3, float lo,
                                            float hi, float inv_l2, float w, float mom) {
    const TvGrid<D, I> g = tv_grid<D, I>(n0, n1, n2, n3, s0, s1, s2, s3);
    for (I i = tv_first<I>(); i < N; i += tv_step<I>()) {
        I c[D];
        tv_coords<D, I>(i, g, c);
        const float ui = tv_primal_at<D, I>(f, z, N, i, c, g, lo, hi);
        float v[D];
        float norm2 = 0.0f;
#pragma unroll
        for (int a = 0; a < D; ++a) {
            float grad = 0.0f;
            if (c[a] < g.n[a] - 1) {
                I cn[D];
#pragma unroll
                for (int b = 0; b < D; ++b) cn[b] = c[b];
                cn[a] += 1;
                const float un = tv_primal_at<D, I>(f, z, N, i + g.stride[a], cn, g, lo, hi);
                grad = g.s[a] * (un - ui);
            }
            v[a] = z[(I)a * N + i] + grad * inv_l2;
            norm2 += v[a] * v[a];
        }
        const float norm = sqrtf(norm2);
        // Written so that a NaN norm gives a NaN scale (the whole vector becomes NaN), as in the
        // twin, rather than scale 1 (which would keep the finite components).
        const float scale = (norm <= w) ? 1.0f : w / norm;
#pragma unroll
        for (int a = 0; a < D; ++a) {
            const I k = (I)a * N + i;
            const float y_new = v[a] * scale;
            z_next[k] = y_new + mom * (y_new - y[k]);
            y[k] = y_new;
        }
    }
}

// ---- tv_gap_partials: per-thread partial sums of the energy and duality-gap terms ----------
//
// With u = P_C(f + div y) and |y_i| <= w, the per-element terms are
//   primal_i = 0.5 (u_i - f_i)^2 + w |grad u_i|     (sums to the ROF energy P(u))
//   gap_i    = w |grad u_i| - <y_i, grad u_i>        (sums to P(u) - D_C(y) >= 0; each term >= 0)
// Thread t of problem b (t < T, the threads per problem) sums, in float32 and in a fixed order,
// the terms of elements t, t + T, t + 2T, ... of that problem and writes them to
// primal_part[b * T + t] and gap_part[b * T + t]. A thread never spans two problems, neighbouring
// threads read neighbouring elements, and no full-size term field is written; the host sums the
// B * T partials of each problem in float64. Both sums add non-negative terms, so the float32
// partials lose at most ~ceil(M / T) * 6e-8 of their value.

template <int D, class I>
__device__ __forceinline__ void tv_gap_partials(const float* __restrict__ f,
                                                const float* __restrict__ y,
                                                const float* __restrict__ u,
                                                float* __restrict__ primal_part,
                                                float* __restrict__ gap_part, I N, I n0, I n1,
                                                I n2, I n3, float s0, float s1, float s2,
                                                float s3, float w, I per_problem, I threads) {
    const TvGrid<D, I> g = tv_grid<D, I>(n0, n1, n2, n3, s0, s1, s2, s3);
    const I batch = N / per_problem;
    const I total = batch * threads;
    for (I t = tv_first<I>(); t < total; t += tv_step<I>()) {
        const I b = t / threads;
        const I lane = t - b * threads;
        const I base = b * per_problem;
        float primal_sum = 0.0f;
        float gap_sum = 0.0f;
        for (I m = lane; m < per_problem; m += threads) {
            const I i = base + m;
            I c[D];
            tv_coords<D, I>(i, g, c);
            const float ui = u[i];
            float norm2 = 0.0f;
            float dot = 0.0f;
#pragma unroll
            for (int a = 0; a < D; ++a) {
                const float grad = (c[a] < g.n[a] - 1) ? g.s[a] * (u[i + g.stride[a]] - ui) : 0.0f;
                norm2 += grad * grad;
                dot += y[(I)a * N + i] * grad;
            }
            const float tv = sqrtf(norm2);
            const float diff = ui - f[i];
            primal_sum += 0.5f * diff * diff + w * tv;
            gap_sum += w * tv - dot;
        }
        primal_part[t] = primal_sum;
        gap_part[t] = gap_sum;
    }
}

// ---- entry points ---------------------------------------------------------------------------
//
// One per number of coupled axes and index type. Arguments, in order:
//   fgp_primal:      f, z, u, N, n0..n3, s0..s3, lo, hi
//   fgp_step:        f, z, y, z_next, N, n0..n3, s0..s3, lo, hi, inv_l2, w, mom
//   tv_gap_partials: f, y, u, primal_part, gap_part, N, n0..n3, s0..s3, w, per_problem, threads
// with N, n0..n3, per_problem and threads of the index type (unsigned int or long long).

#define TV_PRIMAL_PARAMS(I)                                                                    \
    const float *__restrict__ f, const float *__restrict__ z, float *__restrict__ u, I N, I n0, \
        I n1, I n2, I n3, float s0, float s1, float s2, float s3, float lo, float hi
#define TV_PRIMAL_ARGS f, z, u, N, n0, n1, n2, n3, s0, s1, s2, s3, lo, hi

#define TV_STEP_PARAMS(I)                                                                     \
    const float *__restrict__ f, const float *__restrict__ z, float *__restrict__ y,           \
        float *__restrict__ z_next, I N, I n0, I n1, I n2, I n3, float s0, float s1, float s2, \
        float s3, float lo, float hi, float inv_l2, float w, float mom
#define TV_STEP_ARGS f, z, y, z_next, N, n0, n1, n2, n3, s0, s1, s2, s3, lo, hi, inv_l2, w, mom

#define TV_GAP_PARAMS(I)                                                                       \
    const float *__restrict__ f, const float *__restrict__ y, const float *__restrict__ u,      \
        float *__restrict__ primal_part, float *__restrict__ gap_part, I N, I n0, I n1, I n2,   \
        I n3, float s0, float s1, float s2, float s3, float w, I per_problem, I threads
#define TV_GAP_ARGS \
    f, y, u, primal_part, gap_part, N, n0, n1, n2, n3, s0, s1, s2, s3, w, per_problem, threads

typedef unsigned int tv_u32;
typedef long long tv_i64;

extern "C" __global__ void fgp_primal_1d_u32(TV_PRIMAL_PARAMS(tv_u32)) { tv_fgp_primal<1, tv_u32>(TV_PRIMAL_ARGS); }
extern "C" __global__ void fgp_primal_2d_u32(TV_PRIMAL_PARAMS(tv_u32)) { tv_fgp_primal<2, tv_u32>(TV_PRIMAL_ARGS); }
extern "C" __global__ void fgp_primal_3d_u32(TV_PRIMAL_PARAMS(tv_u32)) { tv_fgp_primal<3, tv_u32>(TV_PRIMAL_ARGS); }
extern "C" __global__ void fgp_primal_4d_u32(TV_PRIMAL_PARAMS(tv_u32)) { tv_fgp_primal<4, tv_u32>(TV_PRIMAL_ARGS); }
extern "C" __global__ void fgp_primal_1d_i64(TV_PRIMAL_PARAMS(tv_i64)) { tv_fgp_primal<1, tv_i64>(TV_PRIMAL_ARGS); }
extern "C" __global__ void fgp_primal_2d_i64(TV_PRIMAL_PARAMS(tv_i64)) { tv_fgp_primal<2, tv_i64>(TV_PRIMAL_ARGS); }
extern "C" __global__ void fgp_primal_3d_i64(TV_PRIMAL_PARAMS(tv_i64)) { tv_fgp_primal<3, tv_i64>(TV_PRIMAL_ARGS); }
extern "C" __global__ void fgp_primal_4d_i64(TV_PRIMAL_PARAMS(tv_i64)) { tv_fgp_primal<4, tv_i64>(TV_PRIMAL_ARGS); }

extern "C" __global__ void fgp_step_1d_u32(TV_STEP_PARAMS(tv_u32)) { tv_fgp_step<1, tv_u32>(TV_STEP_ARGS); }
extern "C" __global__ void fgp_step_2d_u32(TV_STEP_PARAMS(tv_u32)) { tv_fgp_step<2, tv_u32>(TV_STEP_ARGS); }
extern "C" __global__ void fgp_step_3d_u32(TV_STEP_PARAMS(tv_u32)) { tv_fgp_step<3, tv_u32>(TV_STEP_ARGS); }
extern "C" __global__ void fgp_step_4d_u32(TV_STEP_PARAMS(tv_u32)) { tv_fgp_step<4, tv_u32>(TV_STEP_ARGS); }
extern "C" __global__ void fgp_step_1d_i64(TV_STEP_PARAMS(tv_i64)) { tv_fgp_step<1, tv_i64>(TV_STEP_ARGS); }
extern "C" __global__ void fgp_step_2d_i64(TV_STEP_PARAMS(tv_i64)) { tv_fgp_step<2, tv_i64>(TV_STEP_ARGS); }
extern "C" __global__ void fgp_step_3d_i64(TV_STEP_PARAMS(tv_i64)) { tv_fgp_step<3, tv_i64>(TV_STEP_ARGS); }
extern "C" __global__ void fgp_step_4d_i64(TV_STEP_PARAMS(tv_i64)) { tv_fgp_step<4, tv_i64>(TV_STEP_ARGS); }

extern "C" __global__ void tv_gap_partials_1d_u32(TV_GAP_PARAMS(tv_u32)) { tv_gap_partials<1, tv_u32>(TV_GAP_ARGS); }
extern "C" __global__ void tv_gap_partials_2d_u32(TV_GAP_PARAMS(tv_u32)) { tv_gap_partials<2, tv_u32>(TV_GAP_ARGS); }
extern "C" __global__ void tv_gap_partials_3d_u32(TV_GAP_PARAMS(tv_u32)) { tv_gap_partials<3, tv_u32>(TV_GAP_ARGS); }
extern "C" __global__ void tv_gap_partials_4d_u32(TV_GAP_PARAMS(tv_u32)) { tv_gap_partials<4, tv_u32>(TV_GAP_ARGS); }
extern "C" __global__ void tv_gap_partials_1d_i64(TV_GAP_PARAMS(tv_i64)) { tv_gap_partials<1, tv_i64>(TV_GAP_ARGS); }
extern "C" __global__ void tv_gap_partials_2d_i64(TV_GAP_PARAMS(tv_i64)) { tv_gap_partials<2, tv_i64>(TV_GAP_ARGS); }
extern "C" __global__ void tv_gap_partials_3d_i64(TV_GAP_PARAMS(tv_i64)) { tv_gap_partials<3, tv_i64>(TV_GAP_ARGS); }
extern "C" __global__ void tv_gap_partials_4d_i64(TV_GAP_PARAMS(tv_i64)) { tv_gap_partials<4, tv_i64>(TV_GAP_ARGS); }
