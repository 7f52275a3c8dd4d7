// esrrf.cu -- the per-frame eSRRF chain (twins in _kernels.py, on top of _ops.py).
//
//   esrrf_half_gradients: Roberts-cross gradients of the raw frames, Catmull-Rom-interpolated
//       onto the half-pixel lattice and normalised to unit length (0 where the gradient is 0):
//       grad (B, 2H+1, 2W+1, 2) = (gx, gy) / |g|. The RGC depends on the gradient's direction
//       only, so the square root and division happen once per lattice sample here instead of
//       once per tap (~300 taps read each sample at M 5).
//   esrrf_rgc: per output pixel and frame, RGC x magnified intensity: out (B, HM, WM).
//   esrrf_rgc_accumulate: the same values folded straight into the running temporal sums of
//       one time point (see _temporal.py): each thread walks the chunk's frames in order and
//       keeps the sums in float64 registers, reading the committed sums once and writing the
//       staged ones once per chunk. No per-frame maps exist.
//
// Separable interpolation comes as "bands": for output index i, band[i*8 + 0..3] are the four
// input indices (as floats, exact) and band[i*8 + 4..7] their weights (0 for dropped taps).
// The tap table lut is (J*J, M*M, 4) float32: for tap (a, b) of sub-pixel phase
// p = (r % M) * M + (c % M), lut[(a*J + b) * M*M + p] = (ux, uy, w, 0), the unit vector from the
// pixel to the tap and its weight (0 for dropped taps). Consecutive phases are adjacent, so the
// 32 threads of a warp (consecutive columns, M phases) read one 16-byte record each from one or
// two cache lines; the loads are const __restrict__ (read-only path): no shared memory, by the
// rules of kernels/__init__.py. Tap (a, b) reads lattice row 2 q_r + (2 s_r + 1) / M + first + a
// and the same for columns (q = r / M, s = r % M); rows and columns below 1 are skipped
// (NanoPyx's v > 0), beyond the lattice clamped to its last sample.
// Conventions of kernels/__init__.py: extern "C", grid-stride loops, no includes.

#define ESRRF_GROUP 4  // frames per pass over the taps: each tap record is loaded once per group
#define ESRRF_TILE_ROWS 8
#define ESRRF_TILE_COLS 32

struct alignas(16) esrrf_tap {
    float ux, uy, w, unused;
};

struct alignas(8) esrrf_vec {
    float x, y;
};

struct esrrf_band {
    int index[4];
    float weight[4];
};

__device__ __forceinline__ esrrf_band esrrf_load_band(const float* __restrict__ band, const int i) {
    esrrf_band out;
    for (int k = 0; k < 4; ++k) {
        out.index[k] = (int)band[i * 8 + k];
        out.weight[k] = band[i * 8 + 4 + k];
    }
    return out;
}

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
    const float* __restrict__ frames, float* __restrict__ grad, const float* __restrict__ row_band,
    const float* __restrict__ col_band, const int rows, const int cols, const long long total) {
    const int lat_rows = 2 * rows + 1;
    const int lat_cols = 2 * cols + 1;
    const long long stride = (long long)blockDim.x * gridDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
        const int nc = (int)(i % lat_cols);
        const int nr = (int)((i / lat_cols) % lat_rows);
        const long long b = i / ((long long)lat_cols * lat_rows);
        const float* frame = frames + b * (long long)rows * cols;
        const esrrf_band rb = esrrf_load_band(row_band, nr);
        const esrrf_band cb = esrrf_load_band(col_band, nc);
        float sum_col = 0.0f;
        float sum_row = 0.0f;
        for (int a = 0; a < 4; ++a) {
            if (rb.weight[a] == 0.0f) continue;
            float part_col = 0.0f;
            float part_row = 0.0f;
            for (int e = 0; e < 4; ++e) {
                if (cb.weight[e] == 0.0f) continue;
                part_col += cb.weight[e] * esrrf_roberts(frame, cols, rb.index[a], cb.index[e], 0);
                part_row += cb.weight[e] * esrrf_roberts(frame, cols, rb.index[a], cb.index[e], 1);
            }
            sum_col += rb.weight[a] * part_col;
            sum_row += rb.weight[a] * part_row;
        }
        // Scaled by the larger component first: squares of tiny or huge gradients would
        // underflow to 0 or overflow to infinity.
        const float scale = fmaxf(fabsf(sum_col), fabsf(sum_row));
        float ux = 0.0f;
        float uy = 0.0f;
        if (scale > 0.0f) {
            const float x = sum_col / scale;
            const float y = sum_row / scale;
            const float norm = sqrtf(x * x + y * y);
            ux = x / norm;
            uy = y / norm;
        }
        grad[2 * i] = ux;
        grad[2 * i + 1] = uy;
    }
}

// One output pixel: where it is, what it reads, found once per thread.
struct esrrf_pixel {
    int r, c;
    int phase;
    int row0, col0;  // lattice row and column of tap (0, 0)
    bool inside;     // outside the zero border band
};

// The 2-D tile mapping of a 1-D launch: thread i covers pixel (r, c) of tiles of 8 x 32 pixels
// (one warp per tile row), so that the threads of a 256-thread block read a compact patch of
// the gradient lattice (it stays in L1) instead of a strip along one output row. Returns
// false for the padding of the last tiles.
__device__ __forceinline__ bool esrrf_locate(const long long i, const int out_rows,
                                             const int out_cols, const int m, const int margin,
                                             const int first_offset, esrrf_pixel* px) {
    const int tiles_across = (out_cols + ESRRF_TILE_COLS - 1) / ESRRF_TILE_COLS;
    const int tile_size = ESRRF_TILE_ROWS * ESRRF_TILE_COLS;
    const long long tile = i / tile_size;
    const int within = (int)(i % tile_size);
    px->r = (int)(tile / tiles_across) * ESRRF_TILE_ROWS + within / ESRRF_TILE_COLS;
    px->c = (int)(tile % tiles_across) * ESRRF_TILE_COLS + within % ESRRF_TILE_COLS;
    if (px->r >= out_rows || px->c >= out_cols) return false;
    const int s_r = px->r % m;
    const int s_c = px->c % m;
    px->phase = s_r * m + s_c;
    px->row0 = 2 * (px->r / m) + (2 * s_r + 1) / m + first_offset;
    px->col0 = 2 * (px->c / m) + (2 * s_c + 1) / m + first_offset;
    px->inside = px->r >= margin && px->c >= margin && px->r < out_rows - margin &&
                 px->c < out_cols - margin;
    return true;
}

// Magnified intensity of one pixel in one frame (the bands' 4 x 4 Catmull-Rom taps).
__device__ __forceinline__ float esrrf_intensity(const float* __restrict__ frame, const int cols,
                                                 const esrrf_band& rb, const esrrf_band& cb) {
    float intensity = 0.0f;
    for (int a = 0; a < 4; ++a) {
        if (rb.weight[a] == 0.0f) continue;
        float part = 0.0f;
        for (int e = 0; e < 4; ++e) {
            if (cb.weight[e] != 0.0f) {
                part += cb.weight[e] * frame[(long long)rb.index[a] * cols + cb.index[e]];
            }
        }
        intensity += rb.weight[a] * part;
    }
    return intensity;
}

// RGC x intensity of one pixel for the N consecutive frames starting at `grad` / `frames`:
// the taps are walked once for all N (each tap record is loaded once per group), with a
// compile-time N so that the per-frame work has no bounds checks; offsets within a frame's
// lattice are 32-bit (one multiply-add per address).
template <int N>
__device__ __forceinline__ void esrrf_values(
    const esrrf_pixel& px, const esrrf_vec* __restrict__ grad, const long long lattice,
    const float* __restrict__ frames, const long long frame_size,
    const esrrf_tap* __restrict__ taps, const int phases, const int taps_per_axis,
    const int lat_rows, const int lat_cols, const int cols, const esrrf_band& rb,
    const esrrf_band& cb, const float sensitivity, const int weighting, float* value) {
    const esrrf_vec* frame_grad[N];
    float num[N];
    for (int f = 0; f < N; ++f) {
        frame_grad[f] = grad + f * lattice;
        num[f] = 0.0f;
    }
    float den = 0.0f;
    const int j = taps_per_axis;
    const int b_first = px.col0 < 1 ? 1 - px.col0 : 0;  // NanoPyx: samples at v <= 0 unused
    for (int a = 0; a < j; ++a) {
        const int nr = px.row0 + a;
        if (nr < 1) continue;
        const int row = (nr < lat_rows - 1 ? nr : lat_rows - 1) * lat_cols;
        const esrrf_tap* tap = taps + ((long long)a * j + b_first) * phases + px.phase;
        for (int b = b_first; b < j; ++b, tap += phases) {
            const esrrf_tap t = *tap;
            const int nc = px.col0 + b;
            const int at = row + (nc < lat_cols - 1 ? nc : lat_cols - 1);
            den += t.w;
#pragma unroll
            for (int f = 0; f < N; ++f) {
                const esrrf_vec g = frame_grad[f][at];
                // Converging (the gradient points back at the pixel): 1 - |sin| of the angle
                // between the gradient and the tap direction, both unit vectors.
                const float term = 1.0f - fabsf(g.y * t.ux - g.x * t.uy);
                const float weight = g.x * t.ux + g.y * t.uy < 0.0f ? t.w : 0.0f;
                num[f] += weight * term;
            }
        }
    }
    for (int f = 0; f < N; ++f) {
        float rgc = den > 0.0f ? num[f] / den : 0.0f;
        // Clamp before the power: rounding can leave rgc a hair below 0, and powf of a
        // negative number at a non-integer sensitivity is NaN.
        if (rgc < 0.0f) rgc = 0.0f;
        if (sensitivity > 1.0f) rgc = powf(rgc, sensitivity);
        if (weighting) rgc *= esrrf_intensity(frames + f * frame_size, cols, rb, cb);
        value[f] = rgc;
    }
}

// The values of frames [t0, t0 + count) of the chunk, count <= ESRRF_GROUP.
__device__ __forceinline__ void esrrf_group(
    const esrrf_pixel& px, const esrrf_vec* __restrict__ grad, const long long lattice,
    const float* __restrict__ frames, const long long frame_size, const int t0, const int count,
    const esrrf_tap* __restrict__ taps, const int phases, const int taps_per_axis,
    const int lat_rows, const int lat_cols, const int cols, const esrrf_band& rb,
    const esrrf_band& cb, const float sensitivity, const int weighting, float* value) {
    const esrrf_vec* g = grad + t0 * lattice;
    const float* fr = frames + t0 * frame_size;
    if (count == 4) {
        esrrf_values<4>(px, g, lattice, fr, frame_size, taps, phases, taps_per_axis, lat_rows,
                        lat_cols, cols, rb, cb, sensitivity, weighting, value);
    } else if (count == 3) {
        esrrf_values<3>(px, g, lattice, fr, frame_size, taps, phases, taps_per_axis, lat_rows,
                        lat_cols, cols, rb, cb, sensitivity, weighting, value);
    } else if (count == 2) {
        esrrf_values<2>(px, g, lattice, fr, frame_size, taps, phases, taps_per_axis, lat_rows,
                        lat_cols, cols, rb, cb, sensitivity, weighting, value);
    } else {
        esrrf_values<1>(px, g, lattice, fr, frame_size, taps, phases, taps_per_axis, lat_rows,
                        lat_cols, cols, rb, cb, sensitivity, weighting, value);
    }
}

extern "C" __global__ void esrrf_rgc(
    const float* __restrict__ grad, const float* __restrict__ frames,
    const float* __restrict__ row_band, const float* __restrict__ col_band,
    const float* __restrict__ lut, float* __restrict__ out, const int batch, const int rows,
    const int cols, const int magnification, const int margin, const int taps_per_axis,
    const int first_offset, const float sensitivity, const int weighting, const long long total) {
    const int m = magnification;
    const int out_rows = rows * m;
    const int out_cols = cols * m;
    const int lat_rows = 2 * rows + 1;
    const int lat_cols = 2 * cols + 1;
    const long long lattice = (long long)lat_rows * lat_cols;
    const long long frame_size = (long long)rows * cols;
    const long long plane = (long long)out_rows * out_cols;
    const esrrf_vec* vectors = reinterpret_cast<const esrrf_vec*>(grad);
    const esrrf_tap* taps = reinterpret_cast<const esrrf_tap*>(lut);
    const long long stride = (long long)blockDim.x * gridDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
        esrrf_pixel px;
        if (!esrrf_locate(i, out_rows, out_cols, m, margin, first_offset, &px)) continue;
        float* target = out + (long long)px.r * out_cols + px.c;
        if (!px.inside) {
            for (int t = 0; t < batch; ++t) target[t * plane] = 0.0f;
            continue;
        }
        const esrrf_band rb = esrrf_load_band(row_band, px.r);
        const esrrf_band cb = esrrf_load_band(col_band, px.c);
        float value[ESRRF_GROUP];
        for (int t0 = 0; t0 < batch; t0 += ESRRF_GROUP) {
            const int count = batch - t0 < ESRRF_GROUP ? batch - t0 : ESRRF_GROUP;
            esrrf_group(px, vectors, lattice, frames, frame_size, t0, count, taps, m * m,
                        taps_per_axis, lat_rows, lat_cols, cols, rb, cb, sensitivity, weighting,
                        value);
            for (int f = 0; f < count; ++f) target[(t0 + f) * plane] = value[f];
        }
    }
}

// statistic: 0 AVG (sums: S1), 1 VAR (S1, S2), 2 TAC2 (S1, L). sums_in/sums_out are float64
// planes handed over as float pointers (the launchers pass float32 views of float64 tensors);
// edges_in/edges_out hold the first and the last frame's value (float32). continuing: the
// committed sums already hold frames (the first frame of this chunk pairs with edges_in[1]).
extern "C" __global__ void esrrf_rgc_accumulate(
    const float* __restrict__ grad, const float* __restrict__ frames,
    const float* __restrict__ row_band, const float* __restrict__ col_band,
    const float* __restrict__ lut, const float* __restrict__ sums_in,
    const float* __restrict__ edges_in, float* __restrict__ sums_out,
    float* __restrict__ edges_out, const int batch, const int rows, const int cols,
    const int magnification, const int margin, const int taps_per_axis, const int first_offset,
    const float sensitivity, const int weighting, const int statistic, const int continuing,
    const long long total) {
    const int m = magnification;
    const int out_rows = rows * m;
    const int out_cols = cols * m;
    const int lat_rows = 2 * rows + 1;
    const int lat_cols = 2 * cols + 1;
    const long long lattice = (long long)lat_rows * lat_cols;
    const long long frame_size = (long long)rows * cols;
    const long long plane = (long long)out_rows * out_cols;
    const esrrf_vec* vectors = reinterpret_cast<const esrrf_vec*>(grad);
    const esrrf_tap* taps = reinterpret_cast<const esrrf_tap*>(lut);
    const double* old_sums = reinterpret_cast<const double*>(sums_in);
    double* new_sums = reinterpret_cast<double*>(sums_out);
    const long long stride = (long long)blockDim.x * gridDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
        esrrf_pixel px;
        if (!esrrf_locate(i, out_rows, out_cols, m, margin, first_offset, &px)) continue;
        const long long p = (long long)px.r * out_cols + px.c;
        double total_sum = old_sums[p];
        double second = statistic > 0 ? old_sums[plane + p] : 0.0;  // S2 or L
        float first = edges_in[p];
        float last = edges_in[plane + p];
        bool started = continuing != 0;
        const esrrf_band rb = esrrf_load_band(row_band, px.r);
        const esrrf_band cb = esrrf_load_band(col_band, px.c);
        float value[ESRRF_GROUP];
        for (int t0 = 0; t0 < batch; t0 += ESRRF_GROUP) {
            const int count = batch - t0 < ESRRF_GROUP ? batch - t0 : ESRRF_GROUP;
            if (px.inside) {
                esrrf_group(px, vectors, lattice, frames, frame_size, t0, count, taps, m * m,
                            taps_per_axis, lat_rows, lat_cols, cols, rb, cb, sensitivity,
                            weighting, value);
            } else {
                for (int f = 0; f < ESRRF_GROUP; ++f) value[f] = 0.0f;
            }
            for (int f = 0; f < count; ++f) {
                const double x = (double)value[f];
                total_sum += x;
                if (statistic == 1) {
                    second += x * x;
                } else if (statistic == 2 && started) {
                    second += (double)last * x;
                }
                if (!started) first = value[f];
                last = value[f];
                started = true;
            }
        }
        new_sums[p] = total_sum;
        if (statistic > 0) new_sums[plane + p] = second;
        edges_out[p] = first;
        edges_out[plane + p] = last;
    }
}
