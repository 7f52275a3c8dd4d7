// basic_alm.cu -- one BaSiC inexact-ALM iteration (float32) in a few fused passes.
//
// Layout: images, weight, dual and sparse are (P, T, M) with M = m * n pixels per image; the
// per-problem images (flat_hat, flat, dark, dark_before, column, shape) are (P, M); baseline is
// (P, T); rows is (P, T, 2); pixel_sums is (P, K, M) with K = 1 (no darkfield) or 3; totals is
// (P, K); every other array is one value per problem (P,).
//
// active[p] is 1 for a problem still iterating and 0 for a frozen one: every kernel leaves a
// frozen problem's outputs untouched, so problems converge at different iterations without the
// host selecting them (no torch.nonzero, no host sync). basic_status writes the next
// iteration's flags into active_next (the other kernels of this iteration still read active).
//
// The mean of the flatfield is its DCT's DC coefficient: flat_mean = flat_hat[p * M] * dc_scale
// with dc_scale = 1 / sqrt(M) (orthonormal DCT-II), so no kernel needs a reduction over pixels.
//
// Sums over pixels or images are float64 partial sums, each written by one thread in a fixed
// order into `scratch` (a float64 buffer handed over as float*: the dispatch takes float32
// tensors) and summed in a fixed order by a torch reduction (basic_sparse's) or the next
// kernel (basic_dual's): deterministic, no atomics.
//
// Conventions of compute/kernels (no #include, no shared memory, no atomics, grid-stride loops
// over a long long count, 64-bit indices).

__device__ __forceinline__ float basic_shrink_value(float x, float threshold) {
    // sign(x) max(|x| - threshold, 0); NaN stays NaN (as torch.sign(x) * clamp(...)), so a
    // diverged fit stays non-finite and is never reported converged.
    const float excess = fabsf(x) - threshold;
    return (excess > 0.0f || excess != excess) ? copysignf(excess, x) : 0.0f;
}

__device__ __forceinline__ bool basic_is_finite(float x) {
    return fabsf(x) <= 3.402823466e38f;  // false for inf and NaN
}

// ---- flatfield (and darkfield) step in DCT space -------------------------------------------

extern "C" __global__ void basic_shrink(const float* x, const float* y,
                                        const float* __restrict__ threshold,
                                        const float* __restrict__ active, float* out,
                                        const int with_y, const long long n_pixels,
                                        const long long n) {
    // out = shrink(x + y, threshold[p]) (or shrink(x, ...) when with_y == 0); in place allowed
    const long long stride = (long long)blockDim.x * gridDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const long long problem = i / n_pixels;
        if (active[problem] == 0.0f) continue;
        const float value = with_y ? x[i] + y[i] : x[i];
        out[i] = basic_shrink_value(value, threshold[problem]);
    }
}

// ---- sparse step: I_R = shrink(I - S B - D + Y / mu, W / mu), row sums, new baseline --------
//
// Thread (image, lane) handles pixels lane, lane + L, lane + 2L, ... of one image (consecutive
// threads read consecutive pixels) and writes two float64 partials, sum(I - I_R) and the same
// over the pixels where S >= mean(S) (the darkfield's "inner" pixels), lane-major:
// scratch[(lane * P T + image) * 2 + which]. The launcher sums the L lanes with one torch
// reduction (over the leading axis: coalesced, in a fixed order) into the float64 row sums
// that basic_baseline reads.

extern "C" __global__ void basic_sparse(const float* __restrict__ images,
                                        const float* __restrict__ flat,
                                        const float* __restrict__ flat_hat,
                                        const float* __restrict__ baseline,
                                        const float* __restrict__ dark,
                                        const float* __restrict__ dual,
                                        const float* __restrict__ weight,
                                        const float* __restrict__ mu,
                                        const float* __restrict__ active,
                                        float* __restrict__ sparse, float* __restrict__ scratch,
                                        const float dc_scale, const long long n_pixels,
                                        const long long n_images, const long long n_lanes,
                                        const long long n_threads) {
    double* partial = (double*)scratch;
    const long long all_images = n_threads / n_lanes;  // P * T
    const long long stride = (long long)blockDim.x * gridDim.x;
    for (long long k = (long long)blockIdx.x * blockDim.x + threadIdx.x; k < n_threads;
         k += stride) {
        const long long image = k / n_lanes;  // p * T + t
        const long long lane = k % n_lanes;
        const long long problem = image / n_images;
        double rest = 0.0;
        double rest_inner = 0.0;
        if (active[problem] != 0.0f) {
            const float inv_mu = 1.0f / mu[problem];
            const float b = baseline[image];
            const float flat_mean = flat_hat[problem * n_pixels] * dc_scale;
            const float* f = flat + problem * n_pixels;
            const float* d = dark + problem * n_pixels;
            const long long base = image * n_pixels;
            for (long long j = lane; j < n_pixels; j += n_lanes) {
                const long long i = base + j;
                const float value = images[i] - f[j] * b - d[j] + dual[i] * inv_mu;
                const float s = basic_shrink_value(value, weight[i] * inv_mu);
                sparse[i] = s;
                const float r = images[i] - s;
                rest += (double)r;
                if (f[j] >= flat_mean) rest_inner += (double)r;
            }
        }
        // Frozen problems write zeros: the launcher's reduction reads every partial.
        partial[(lane * all_images + image) * 2] = rest;
        partial[(lane * all_images + image) * 2 + 1] = rest_inner;
    }
}

extern "C" __global__ void basic_baseline(const float* __restrict__ row_sums,
                                          const float* __restrict__ active,
                                          float* __restrict__ rows, float* __restrict__ baseline,
                                          const long long n_images, const long long n) {
    // rows = the float64 row sums (scratch, after the partials) as float32;
    // B_t = max(0, rows[t, 0] / mean_t rows[., 0]) (n = P T). Each thread sums its problem's
    // rows itself, in the same order (four interleaved accumulators), so every thread of a
    // problem sees the same total.
    const double* sums = (const double*)row_sums;
    const long long stride = (long long)blockDim.x * gridDim.x;
    for (long long k = (long long)blockIdx.x * blockDim.x + threadIdx.x; k < n; k += stride) {
        const long long problem = k / n_images;
        if (active[problem] == 0.0f) continue;
        const double* row = sums + problem * n_images * 2;
        double t0 = 0.0, t1 = 0.0, t2 = 0.0, t3 = 0.0;
        long long t = 0;
        for (; t + 3 < n_images; t += 4) {
            t0 += row[2 * t];
            t1 += row[2 * t + 2];
            t2 += row[2 * t + 4];
            t3 += row[2 * t + 6];
        }
        for (; t < n_images; ++t) t0 += row[2 * t];
        const double total = (t0 + t1) + (t2 + t3);
        rows[2 * k] = (float)sums[2 * k];
        rows[2 * k + 1] = (float)sums[2 * k + 1];
        const float b = (float)(sums[2 * k] * (double)n_images / total);
        baseline[k] = b < 0.0f ? 0.0f : b;  // NaN stays NaN (as clamp_min)
    }
}

// ---- dual step: Y += mu F, the next flatfield step's column mean, sum F^2 -------------------
//
// F = I - S B - D - I_R. Thread (chunk, problem, pixel) runs over images [t0, t1) of that
// pixel (the image axis split over C chunks, consecutive threads read consecutive pixels) and
// writes float64 partials scratch[(q * C + chunk) * P M + p M + pixel] of
// q = 0: sum(F + Y_new / mu_next), 1: sum F^2, 2 (darkfield): sum over images with B < 1 of
// I - I_R. basic_dual_sums adds the C chunks of each pixel.

extern "C" __global__ void basic_dual(const float* __restrict__ images,
                                      const float* __restrict__ flat,
                                      const float* __restrict__ baseline,
                                      const float* __restrict__ dark,
                                      const float* __restrict__ sparse,
                                      float* __restrict__ dual, const float* __restrict__ mu,
                                      const float* __restrict__ mu_max,
                                      const float* __restrict__ active,
                                      float* __restrict__ scratch, const float rho,
                                      const int with_dark, const long long n_pixels,
                                      const long long n_images, const long long n_chunks,
                                      const long long n_columns) {
    double* partial = (double*)scratch;
    const long long n = n_chunks * n_columns;
    const long long stride = (long long)blockDim.x * gridDim.x;
    for (long long k = (long long)blockIdx.x * blockDim.x + threadIdx.x; k < n; k += stride) {
        const long long chunk = k / n_columns;
        const long long j = k % n_columns;  // p * M + pixel
        const long long problem = j / n_pixels;
        const long long pixel = j % n_pixels;
        if (active[problem] == 0.0f) continue;
        const float step = mu[problem];
        const float next = fminf(step * rho, mu_max[problem]);
        const float inv_next = 1.0f / next;
        const float s = flat[j];
        const float d = dark[j];
        const long long t0 = chunk * n_images / n_chunks;
        const long long t1 = (chunk + 1) * n_images / n_chunks;
        double column_sum = 0.0;
        double square_sum = 0.0;
        double valid_sum = 0.0;
        for (long long t = t0; t < t1; ++t) {
            const long long image = problem * n_images + t;
            const long long i = image * n_pixels + pixel;
            const float b = baseline[image];
            const float rest = images[i] - sparse[i];
            const float residual = images[i] - s * b - d - sparse[i];
            const float updated = dual[i] + step * residual;
            dual[i] = updated;
            column_sum += (double)(residual + updated * inv_next);
            square_sum += (double)(residual * residual);
            if (with_dark && b < 1.0f) valid_sum += (double)rest;
        }
        partial[chunk * n_columns + j] = column_sum;
        partial[(n_chunks + chunk) * n_columns + j] = square_sum;
        if (with_dark) partial[(2 * n_chunks + chunk) * n_columns + j] = valid_sum;
    }
}

extern "C" __global__ void basic_dual_sums(const float* __restrict__ scratch,
                                           const float* __restrict__ flat,
                                           const float* __restrict__ flat_hat,
                                           const float* __restrict__ active,
                                           float* __restrict__ column,
                                           float* __restrict__ pixel_sums, const float dc_scale,
                                           const int with_dark, const long long n_pixels,
                                           const long long n_images, const long long n_chunks,
                                           const long long n_columns) {
    // column = sum(F + Y / mu_next) / T; pixel_sums[p, 0] = sum F^2, and with the darkfield
    // [p, 1] = sum over B < 1 of I - I_R, [p, 2] = 1 where S >= mean(S) (n_columns = P M).
    const double* partial = (const double*)scratch;
    const long long sums = with_dark ? 3 : 1;
    const long long stride = (long long)blockDim.x * gridDim.x;
    for (long long j = (long long)blockIdx.x * blockDim.x + threadIdx.x; j < n_columns;
         j += stride) {
        const long long problem = j / n_pixels;
        const long long pixel = j % n_pixels;
        if (active[problem] == 0.0f) continue;
        double column_sum = 0.0;
        double square_sum = 0.0;
        for (long long c = 0; c < n_chunks; ++c) {
            column_sum += partial[c * n_columns + j];
            square_sum += partial[(n_chunks + c) * n_columns + j];
        }
        column[j] = (float)(column_sum / (double)n_images);
        float* out = pixel_sums + problem * sums * n_pixels + pixel;
        out[0] = (float)square_sum;
        if (with_dark) {
            double valid_sum = 0.0;
            for (long long c = 0; c < n_chunks; ++c)
                valid_sum += partial[(2 * n_chunks + c) * n_columns + j];
            out[n_pixels] = (float)valid_sum;
            out[2 * n_pixels] = flat[j] >= flat_hat[problem * n_pixels] * dc_scale ? 1.0f : 0.0f;
        }
    }
}

// ---- per problem: residual, convergence, mu, and the darkfield's scalars --------------------

extern "C" __global__ void basic_status(
    const float* __restrict__ totals, const float* __restrict__ rows,
    const float* __restrict__ baseline, const float* __restrict__ flat_hat,
    const float* __restrict__ image_norm, const float* __restrict__ offset_max,
    const float* __restrict__ lam_flat, const float* __restrict__ lam_dark,
    float* __restrict__ mu, const float* __restrict__ mu_max, const float* __restrict__ active,
    float* __restrict__ active_next, float* __restrict__ iterations, float* __restrict__ ratio,
    float* __restrict__ thr_flat, float* __restrict__ thr_dark, float* __restrict__ offset,
    float* __restrict__ dark_values, const float rho, const float tol, const float ent_dark,
    const float dc_scale, const int with_dark, const long long n_pixels,
    const long long n_images, const long long n_problems) {
    // One thread per problem. ratio = ||F|| / ||I||; active_next = ratio > tol and finite;
    // mu <- min(rho mu, mu_max); thr_flat = lam_flat / mu (the next flatfield step). With the
    // darkfield: thr_dark = lam_dark / (ent_dark mu) (this iteration's mu) and the MATLAB
    // heuristic's offset D_Z, count of images with B < 1, their mean B and the mean of
    // their mean residual image minus that B times S (dark_values[p] = count, b_mean, center).
    const long long sums = with_dark ? 3 : 1;
    const long long stride = (long long)blockDim.x * gridDim.x;
    for (long long p = (long long)blockIdx.x * blockDim.x + threadIdx.x; p < n_problems;
         p += stride) {
        if (active[p] == 0.0f) {
            active_next[p] = 0.0f;
            continue;
        }
        const float r = sqrtf(totals[p * sums]) / image_norm[p];
        ratio[p] = r;
        iterations[p] += 1.0f;
        const float step = mu[p];
        if (with_dark) {
            thr_dark[p] = lam_dark[p] / (ent_dark * step);
            const double n_in = (double)totals[p * sums + 2];
            const double n_out = (double)n_pixels - n_in;
            const double flat_mean = (double)(flat_hat[p * n_pixels] * dc_scale);
            const float* row = rows + p * n_images * 2;
            const float* b = baseline + p * n_images;
            double total = 0.0;
            for (long long t = 0; t < n_images; ++t) total += (double)row[2 * t];
            const double total_mean = total / ((double)n_images * (double)n_pixels);
            double count = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0, s4 = 0.0;
            for (long long t = 0; t < n_images; ++t) {
                if (!(b[t] < 1.0f)) continue;
                const double all = (double)row[2 * t];
                const double inner = (double)row[2 * t + 1];
                const double mean_in = inner / (n_in > 1.0 ? n_in : 1.0);
                const double mean_out = (all - inner) / (n_out > 1.0 ? n_out : 1.0);
                const double coeff = (mean_in - mean_out) / (total_mean + 1e-6);
                const double bt = (double)b[t];
                count += 1.0;
                s1 += bt * bt;
                s2 += bt;
                s3 += coeff;
                s4 += bt * coeff;
            }
            const double denominator = s2 * s3 - count * s4;
            double z = denominator == 0.0 ? 0.0 : (s1 * s3 - s2 * s4) / denominator;
            z = z < 0.0 ? 0.0 : z;  // NaN stays NaN (as clamp_min and minimum)
            const double limit = (double)offset_max[p] / flat_mean;
            z = (z > limit || limit != limit) ? limit : z;
            const double safe = count > 1.0 ? count : 1.0;
            const double b_mean = s2 / safe;
            offset[p] = count > 0.0 ? (float)z : 0.0f;
            dark_values[p * 3] = (float)count;
            dark_values[p * 3 + 1] = (float)b_mean;
            dark_values[p * 3 + 2] =
                (float)((double)totals[p * sums + 1] / safe / (double)n_pixels - b_mean * flat_mean);
        }
        const float next = fminf(step * rho, mu_max[p]);
        mu[p] = next;
        thr_flat[p] = lam_flat[p] / next;
        active_next[p] = (r > tol && basic_is_finite(r)) ? 1.0f : 0.0f;
    }
}

// ---- darkfield step -------------------------------------------------------------------------

extern "C" __global__ void basic_dark_shape(const float* __restrict__ pixel_sums,
                                            const float* __restrict__ flat,
                                            const float* __restrict__ flat_hat,
                                            const float* __restrict__ offset,
                                            const float* __restrict__ dark_values,
                                            const float* __restrict__ active,
                                            float* __restrict__ shape, const float dc_scale,
                                            const long long n_pixels, const long long n) {
    // shape = mean of I - I_R over images with B < 1, minus b_mean S, centred, minus
    // Z = D_Z (mean(S) - S): what the darkfield's smoothness step shrinks (n = P M)
    const long long stride = (long long)blockDim.x * gridDim.x;
    for (long long j = (long long)blockIdx.x * blockDim.x + threadIdx.x; j < n; j += stride) {
        const long long problem = j / n_pixels;
        const long long pixel = j % n_pixels;
        if (active[problem] == 0.0f) continue;
        const float count = dark_values[problem * 3];
        const float b_mean = dark_values[problem * 3 + 1];
        const float center = dark_values[problem * 3 + 2];
        const float s = flat[j];
        const float z = offset[problem] * (flat_hat[problem * n_pixels] * dc_scale - s);
        const float valid_mean =
            pixel_sums[(problem * 3 + 1) * n_pixels + pixel] / fmaxf(count, 1.0f);
        shape[j] = valid_mean - b_mean * s - center - z;
    }
}

extern "C" __global__ void basic_dark_finish(const float* __restrict__ smooth,
                                             const float* __restrict__ thr_dark,
                                             const float* __restrict__ flat,
                                             const float* __restrict__ flat_hat,
                                             const float* __restrict__ offset,
                                             const float* __restrict__ dark_values,
                                             const float* __restrict__ active,
                                             float* __restrict__ dark,
                                             float* __restrict__ dark_before,
                                             float* __restrict__ column, const float dc_scale,
                                             const long long n_pixels, const long long n) {
    // D_R = shrink(idct(shrink(dct(shape))), thr) + Z (kept when no image has B < 1); the
    // column mean of the next flatfield step sees the change (n = P M)
    const long long stride = (long long)blockDim.x * gridDim.x;
    for (long long j = (long long)blockIdx.x * blockDim.x + threadIdx.x; j < n; j += stride) {
        const long long problem = j / n_pixels;
        if (active[problem] == 0.0f) continue;
        const float old = dark[j];
        float updated = old;
        if (dark_values[problem * 3] > 0.0f) {
            const float z = offset[problem] * (flat_hat[problem * n_pixels] * dc_scale - flat[j]);
            updated = basic_shrink_value(smooth[j], thr_dark[problem]) + z;
        }
        column[j] = column[j] - (updated - old);
        dark_before[j] = old;
        dark[j] = updated;
    }
}
