// basic_alm.cu -- the elementwise passes of one BaSiC ALM iteration (float32), fused.
//
// Layout: images, weight, dual and sparse are (P, T, M) with M = m * n pixels per image;
// flat and dark are (P, M); baseline is (P, T); mu and mu_next are (P,).
// Conventions of compute/kernels (no #include, no shared memory, no atomics, grid-stride loops
// over a long long count): basic_sparse runs one thread per element; basic_dual runs one thread
// per (problem, pixel) and loops over the T images of that pixel, so the sums over images need
// no atomics (consecutive threads read consecutive pixels: coalesced).

extern "C" __global__ void basic_sparse(const float* __restrict__ images,
                                        const float* __restrict__ flat,
                                        const float* __restrict__ baseline,
                                        const float* __restrict__ dark,
                                        const float* __restrict__ dual,
                                        const float* __restrict__ weight,
                                        const float* __restrict__ mu,
                                        float* __restrict__ sparse,
                                        const long long n_pixels, const long long n_images,
                                        const long long n) {
    // sparse = shrink(I - S B - D + Y / mu, W / mu)
    const long long stride = (long long)blockDim.x * gridDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const long long image = i / n_pixels;          // p * T + t
        const long long problem = image / n_images;
        const long long pixel = problem * n_pixels + i % n_pixels;
        const float inv_mu = 1.0f / mu[problem];
        const float value = images[i] - flat[pixel] * baseline[image] - dark[pixel] + dual[i] * inv_mu;
        const float excess = fabsf(value) - weight[i] * inv_mu;
        sparse[i] = excess > 0.0f ? copysignf(excess, value) : 0.0f;
    }
}

extern "C" __global__ void basic_dual(const float* __restrict__ images,
                                      const float* __restrict__ flat,
                                      const float* __restrict__ baseline,
                                      const float* __restrict__ dark,
                                      const float* __restrict__ sparse,
                                      float* __restrict__ dual,
                                      const float* __restrict__ mu,
                                      const float* __restrict__ mu_next,
                                      float* __restrict__ column,
                                      float* __restrict__ square,
                                      const long long n_pixels, const long long n_images,
                                      const long long n_columns) {
    // F = I - S B - D - I_R; Y += mu F; column = mean_T(F + Y / mu_next); square = sum_T F^2
    const long long stride = (long long)blockDim.x * gridDim.x;
    for (long long j = (long long)blockIdx.x * blockDim.x + threadIdx.x; j < n_columns;
         j += stride) {
        const long long problem = j / n_pixels;
        const long long pixel = j % n_pixels;
        const float step = mu[problem];
        const float inv_next = 1.0f / mu_next[problem];
        const float s = flat[j];
        const float d = dark[j];
        double column_sum = 0.0;
        double square_sum = 0.0;
        for (long long t = 0; t < n_images; ++t) {
            const long long image = problem * n_images + t;
            const long long i = image * n_pixels + pixel;
            const float residual = images[i] - s * baseline[image] - d - sparse[i];
            const float updated = dual[i] + step * residual;
            dual[i] = updated;
            column_sum += (double)(residual + updated * inv_next);
            square_sum += (double)residual * (double)residual;
        }
        column[j] = (float)(column_sum / (double)n_images);
        square[j] = (float)square_sum;
    }
}
