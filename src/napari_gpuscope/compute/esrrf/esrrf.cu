// esrrf.cu -- the per-frame eSRRF chain, one thread per output element (twins in _ops.py).
//
//   esrrf_half_gradients: Roberts-cross gradients of the raw frames, Catmull-Rom-interpolated
//       onto the half-pixel lattice: gcol2/grow2 (B, 2H+1, 2W+1).
//   esrrf_rgc: per output pixel, the magnified intensity (4 x 4 Catmull-Rom taps) and the radial
//       gradient convergence from the per-phase tap table: out (B, HM, WM).
//
// Separable interpolation comes as "bands": for output index i, band[i*8 + 0..3] are the four
// input indices (as floats, exact) and band[i*8 + 4..7] their weights (0 for dropped taps).
// The tap table lut is (M*M, K, 5): row offset, column offset (lattice units), dx, dy, weight;
// counts[p] taps are used for phase p = (r % M) * M + (c % M).
// Conventions of kernels/__init__.py: extern "C", grid-stride loops, no includes.

__device__ __forceinline__ float esrrf_roberts(const float* __restrict__ frame, const int cols,
                                               const int r, const int c, const int which) {
    // NanoPyx's Roberts cross at (r, c): d1 = I[r,c] - I[r0,c0], d2 = I[r0,c] - I[r,c0].
    const int r0 = r > 0 ? r - 1 : 0;
    const int c0 = c > 0 ? c - 1 : 0;
    const float d1 = frame[(long long)r * cols + c] - frame[(long long)r0 * cols + c0];
    const float d2 = frame[(long long)r0 * cols + c] - frame[(long long)r * cols + c0];
    return which == 0 ? d1 + d2 : d1 - d2;
}

extern "C" __global__ void esrrf_half_gradients(
    const float* __restrict__ frames, float* __restrict__ gcol2, float* __restrict__ grow2,
    const float* __restrict__ row_band, const float* __restrict__ col_band, const int rows,
    const int cols, const long long total) {
    const int lat_rows = 2 * rows + 1;
    const int lat_cols = 2 * cols + 1;
    const long long stride = (long long)blockDim.x * gridDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
        const int nc = (int)(i % lat_cols);
        const int nr = (int)((i / lat_cols) % lat_rows);
        const long long b = i / ((long long)lat_cols * lat_rows);
        const float* frame = frames + b * (long long)rows * cols;
        float sum_col = 0.0f;
        float sum_row = 0.0f;
        for (int a = 0; a < 4; ++a) {
            const float wr = row_band[nr * 8 + 4 + a];
            if (wr == 0.0f) continue;
            const int r = (int)row_band[nr * 8 + a];
            float part_col = 0.0f;
            float part_row = 0.0f;
            for (int e = 0; e < 4; ++e) {
                const float wc = col_band[nc * 8 + 4 + e];
                if (wc == 0.0f) continue;
                const int c = (int)col_band[nc * 8 + e];
                part_col += wc * esrrf_roberts(frame, cols, r, c, 0);
                part_row += wc * esrrf_roberts(frame, cols, r, c, 1);
            }
            sum_col += wr * part_col;
            sum_row += wr * part_row;
        }
        gcol2[i] = sum_col;
        grow2[i] = sum_row;
    }
}

extern "C" __global__ void esrrf_rgc(
    const float* __restrict__ gcol2, const float* __restrict__ grow2,
    const float* __restrict__ frames, const float* __restrict__ row_band,
    const float* __restrict__ col_band, const float* __restrict__ lut,
    const float* __restrict__ counts, float* __restrict__ out, const int rows, const int cols,
    const int magnification, const int margin, const int k_max, const float sensitivity,
    const int weighting, const long long total) {
    const int m = magnification;
    const int out_rows = rows * m;
    const int out_cols = cols * m;
    const int lat_rows = 2 * rows + 1;
    const int lat_cols = 2 * cols + 1;
    const long long stride = (long long)blockDim.x * gridDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
        const int c = (int)(i % out_cols);
        const int r = (int)((i / out_cols) % out_rows);
        const long long b = i / ((long long)out_cols * out_rows);
        if (r < margin || c < margin || r >= out_rows - margin || c >= out_cols - margin) {
            out[i] = 0.0f;
            continue;
        }
        const int phase = (r % m) * m + (c % m);
        const int q_r = r / m;
        const int q_c = c / m;
        const float* gx_frame = gcol2 + b * (long long)lat_rows * lat_cols;
        const float* gy_frame = grow2 + b * (long long)lat_rows * lat_cols;
        const float* taps = lut + (long long)phase * k_max * 5;
        const int count = (int)counts[phase];
        float num = 0.0f;
        float den = 0.0f;
        for (int k = 0; k < count; ++k) {
            const int nr = 2 * q_r + (int)taps[k * 5 + 0];
            const int nc = 2 * q_c + (int)taps[k * 5 + 1];
            if (nr < 1 || nc < 1) continue;  // NanoPyx: samples at v <= 0 are not used
            const int lr = nr < lat_rows - 1 ? nr : lat_rows - 1;
            const int lc = nc < lat_cols - 1 ? nc : lat_cols - 1;
            const float dx = taps[k * 5 + 2];
            const float dy = taps[k * 5 + 3];
            const float w = taps[k * 5 + 4];
            const float gx = gx_frame[(long long)lr * lat_cols + lc];
            const float gy = gy_frame[(long long)lr * lat_cols + lc];
            den += w;
            const float magnitude = sqrtf(gx * gx + gy * gy);
            if (gx * dx + gy * dy < 0.0f && magnitude > 0.0f) {
                const float d = sqrtf(dx * dx + dy * dy);
                num += w * (1.0f - fabsf(gy * dx - gx * dy) / (magnitude * d));
            }
        }
        float rgc = den > 0.0f ? num / den : 0.0f;
        // Clamp before the power: rounding of 1 - |cross| / (|g| d) can leave rgc a hair below
        // 0, and powf of a negative number at a non-integer sensitivity is NaN.
        if (rgc < 0.0f) rgc = 0.0f;
        if (sensitivity > 1.0f) rgc = powf(rgc, sensitivity);
        if (weighting) {
            const float* frame = frames + b * (long long)rows * cols;
            float intensity = 0.0f;
            for (int a = 0; a < 4; ++a) {
                const float wr = row_band[r * 8 + 4 + a];
                if (wr == 0.0f) continue;
                const int ir = (int)row_band[r * 8 + a];
                float part = 0.0f;
                for (int e = 0; e < 4; ++e) {
                    const float wc = col_band[c * 8 + 4 + e];
                    if (wc != 0.0f) part += wc * frame[(long long)ir * cols + (int)col_band[c * 8 + e]];
                }
                intensity += wr * part;
            }
            rgc *= intensity;
        }
        out[i] = rgc;
    }
}
