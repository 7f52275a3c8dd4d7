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

// phase_regularization_components: the automatic regularization's per-frequency pass
// (_regularization_ops.py). For each 2x2 Gram matrix G = [[g_aa, g_ap], [conj(g_ap), g_pp]]
// its eigenvalues s_1 >= s_2 and the data's power along each eigenvector, c_k = |v_k^H b|^2 / s_k,
// in float64 (the inputs are float32; the small eigenvalue is det / s_1, which keeps its
// relative precision where mean - radius would cancel). Component k of frequency i writes
//   slots[k n + i]              (i % spread) n_bins + its histogram bin, the bin being
//                               floor((log10 s - low) per_decade) clamped to [0, n_bins)
//   weights[(r 2 + k) n + i]    r = 0: kept (1 or 0), 1: s, 2: c, 3: c s
// where kept means s > floor_ratio (largest[0] + largest[1]), the largest g_aa and g_pp added
// in float64 (>= every eigenvalue; a direction the fit does not resolve counts as zero: bin 0,
// no weight; read on the device, so the pass needs no read-back). The
// `spread` copies of the histogram that the slots address keep the atomic adds that sum them
// (torch's index_add_) off a few hundred hot addresses. One thread per frequency, one read of
// each input, where the twin takes ~165 torch operations per pass (expected to be launch-bound
// on a GPU; not profiled).
extern "C" __global__ void phase_regularization_components(
    const float* __restrict__ g_aa, const float* __restrict__ g_pp,
    const float* __restrict__ g_ap, const float* __restrict__ b_a, const float* __restrict__ b_p,
    const float* __restrict__ largest, float* __restrict__ slots, float* __restrict__ weights,
    const double floor_ratio, const double low, const double per_decade, const long long n_bins,
    const long long spread, const long long n) {
    const long long stride = (long long)blockDim.x * gridDim.x;
    const double floor_s = floor_ratio * ((double)largest[0] + (double)largest[1]);
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const double a = g_aa[i], p = g_pp[i];
        const double cr = g_ap[2 * i], ci = g_ap[2 * i + 1];
        const double bar = b_a[2 * i], bai = b_a[2 * i + 1];
        const double bpr = b_p[2 * i], bpi = b_p[2 * i + 1];
        const double cc = cr * cr + ci * ci;
        const double half = (a - p) / 2;
        const double radius = sqrt(half * half + cc);
        const double s1 = (a + p) / 2 + radius;
        const double s2 = fmax(a * p - cc, 0.0) / fmax(s1, 1e-300);
        // The eigenvector of s1 from the better-conditioned row of (G - s1 I) v = 0.
        double v1r, v1i, v2r, v2i;
        if (a >= p) {
            v1r = s1 - p; v1i = 0.0; v2r = cr; v2i = -ci;  // (s1 - p, conj(g_ap))
        } else {
            v1r = cr; v1i = ci; v2r = s1 - a; v2i = 0.0;   // (g_ap, s1 - a)
        }
        const double norm = sqrt(v1r * v1r + v1i * v1i + v2r * v2r + v2i * v2i);
        if (norm <= 0.0) {  // G = s I: any basis
            v1r = 1.0; v1i = 0.0; v2r = 0.0; v2i = 0.0;
        } else {
            v1r /= norm; v1i /= norm; v2r /= norm; v2i /= norm;
        }
        // v1^H b = conj(v1) b_a + conj(v2) b_p; v2^H b with v2' = (-conj(v12), conj(v11)):
        // -v12 b_a + v11 b_p.
        const double u1r = (v1r * bar + v1i * bai) + (v2r * bpr + v2i * bpi);
        const double u1i = (v1r * bai - v1i * bar) + (v2r * bpi - v2i * bpr);
        const double u2r = -(v2r * bar - v2i * bai) + (v1r * bpr - v1i * bpi);
        const double u2i = -(v2r * bai + v2i * bar) + (v1r * bpi + v1i * bpr);
        const double s_k[2] = {s1, s2};
        const double q_k[2] = {u1r * u1r + u1i * u1i, u2r * u2r + u2i * u2i};
        const long long copy = (i % spread) * n_bins;
        for (int k = 0; k < 2; ++k) {
            const bool kept = s_k[k] > floor_s;
            const double s = kept ? s_k[k] : 0.0;
            const double c = kept ? q_k[k] / fmax(s_k[k], 1e-300) : 0.0;
            // clamped before the conversion: an infinite s has no integer
            const double at = (log10(fmax(s, 1e-300)) - low) * per_decade;
            const long long bin = (long long)fmin(fmax(at, 0.0), (double)(n_bins - 1));
            slots[k * n + i] = (float)(copy + bin);
            weights[(0 * 2 + k) * n + i] = kept ? 1.0f : 0.0f;
            weights[(1 * 2 + k) * n + i] = (float)s;
            weights[(2 * 2 + k) * n + i] = (float)c;
            weights[(3 * 2 + k) * n + i] = (float)(c * s);
        }
    }
}
