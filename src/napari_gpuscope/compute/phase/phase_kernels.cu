// phase_kernels.cu -- the no-grad reconstruction's elementwise passes, fused (torch twins in
// _ops.py beside this file).
//
// Complex arrays are interleaved float32 (re, im) pairs, as torch.view_as_real lays out a
// contiguous complex64 tensor. Shapes: data spectra (B, Z, N) complex, N = Y * X frequencies,
// B >= 1 independent problems (tiles); transfer functions (B, Z, N), or (1, Z, N) shared by
// every problem (read in place, never copied per problem); the per-frequency results (B, N).
// One thread per (b, frequency) walks the Z slices: one read of each input, one write of each
// output, where the twin needs ~10 passes over (B, Z, N).

// phase_normal_equations: Gram entries and right-hand sides of the 2x2 Tikhonov systems,
//   g_aa = sum_z |A|^2, g_pp = sum_z |P|^2, g_ap = sum_z l(A) conj(l(P)),
//   b_a = sum_z l(A) D, b_p = sum_z l(P) D,
// with l(H) = conj(H) when sign = -1 (the least-squares rows) and l(H) = H when sign = +1.
extern "C" __global__ void phase_normal_equations(
    const float* __restrict__ data, const float* __restrict__ tf_a, const float* __restrict__ tf_p,
    float* __restrict__ g_aa, float* __restrict__ g_pp, float* __restrict__ g_ap,
    float* __restrict__ b_a, float* __restrict__ b_p, const float sign, const long long n_z,
    const long long n_freq, const long long tf_batches, const long long n_total) {
    const long long stride = (long long)blockDim.x * gridDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n_total; i += stride) {
        const long long b = i / n_freq;
        const long long k = i - b * n_freq;
        const long long tb = tf_batches == 1 ? 0 : b;  // shared transfer functions
        float saa = 0.0f, spp = 0.0f, sap_re = 0.0f, sap_im = 0.0f;
        float sba_re = 0.0f, sba_im = 0.0f, sbp_re = 0.0f, sbp_im = 0.0f;
        for (long long z = 0; z < n_z; ++z) {
            const long long at = 2 * ((b * n_z + z) * n_freq + k);
            const long long tf_at = 2 * ((tb * n_z + z) * n_freq + k);
            const float ar = tf_a[tf_at], ai = sign * tf_a[tf_at + 1];
            const float pr = tf_p[tf_at], pi = sign * tf_p[tf_at + 1];
            const float dr = data[at], di = data[at + 1];
            saa += ar * ar + ai * ai;
            spp += pr * pr + pi * pi;
            sap_re += ar * pr + ai * pi;  // a * conj(p)
            sap_im += ai * pr - ar * pi;
            sba_re += ar * dr - ai * di;  // a * d
            sba_im += ar * di + ai * dr;
            sbp_re += pr * dr - pi * di;
            sbp_im += pr * di + pi * dr;
        }
        g_aa[i] = saa;
        g_pp[i] = spp;
        g_ap[2 * i] = sap_re;
        g_ap[2 * i + 1] = sap_im;
        b_a[2 * i] = sba_re;
        b_a[2 * i + 1] = sba_im;
        b_p[2 * i] = sbp_re;
        b_p[2 * i + 1] = sbp_im;
    }
}

// phase_tikhonov_solve: absorption and phase spectra of the 2x2 systems
//   a = ((g_pp + reg) b_a - g_ap b_p) / det,  p = ((g_aa + reg) b_p - conj(g_ap) b_a) / det,
//   det = (g_aa + reg)(g_pp + reg) - |g_ap|^2 (>= reg (g_aa + g_pp) + reg^2 > 0 for reg > 0).
extern "C" __global__ void phase_tikhonov_solve(
    const float* __restrict__ g_aa, const float* __restrict__ g_pp,
    const float* __restrict__ g_ap, const float* __restrict__ b_a, const float* __restrict__ b_p,
    float* __restrict__ out_a, float* __restrict__ out_p, const float reg, const long long n) {
    const long long stride = (long long)blockDim.x * gridDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const float a11 = g_aa[i] + reg, a22 = g_pp[i] + reg;
        const float gr = g_ap[2 * i], gi = g_ap[2 * i + 1];
        const float bar = b_a[2 * i], bai = b_a[2 * i + 1];
        const float bpr = b_p[2 * i], bpi = b_p[2 * i + 1];
        const float det = a11 * a22 - (gr * gr + gi * gi);
        // g_ap b_p and conj(g_ap) b_a
        const float gbp_re = gr * bpr - gi * bpi, gbp_im = gr * bpi + gi * bpr;
        const float gba_re = gr * bar + gi * bai, gba_im = gr * bai - gi * bar;
        out_a[2 * i] = (a22 * bar - gbp_re) / det;
        out_a[2 * i + 1] = (a22 * bai - gbp_im) / det;
        out_p[2 * i] = (a11 * bpr - gba_re) / det;
        out_p[2 * i + 1] = (a11 * bpi - gba_im) / det;
    }
}
