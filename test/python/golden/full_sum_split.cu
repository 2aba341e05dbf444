extern "C" __global__ void lf_reduction_mul_sum(const float* __restrict__ in0, float* __restrict__ out0, float* __restrict__ lf_partials, unsigned int* __restrict__ lf_counters) {
  constexpr int lf_threads = 512;
  __shared__ float lf_smem[32];
  __shared__ bool lf_last;
  for (int lf_item = blockIdx.x; lf_item < (int)32u; lf_item += gridDim.x) {
    const int row = lf_item / (int)32u;
    const int lf_begin = (lf_item % (int)32u) * (int)2048u;
    const int lf_end = lf_begin + (int)2048u < 65536 ? lf_begin + (int)2048u : 65536;
    float a0 = 0;
    LF_UNROLL for (int c = lf_begin + threadIdx.x; c < lf_end; c += lf_threads) {
      const int p1 = row * 65536 + c;
      const float v2 = lf_ld(in0, p1);
      const float v3 = (float)(((float)v2) * ((float)v2));  // aten::mul.Tensor
      a0 = a0 + ((float)v3);
    }
    a0 = lf_block_reduce(a0, lf_sum_op(), lf_smem);
    if (threadIdx.x == 0) {
      lf_last = lf_publish(lf_partials, lf_item, a0, lf_counters + row) == 31u;
    }
    __syncthreads();
    if (lf_last) {
      a0 = 0;
      for (int k = threadIdx.x; k < (int)32u; k += lf_threads) {
        a0 = a0 + lf_ld_published(lf_partials, row * (int)32u + k);
      }
      a0 = lf_block_reduce(a0, lf_sum_op(), lf_smem);
      const float r4 = (float)(a0);
      if (threadIdx.x == 0) {
        lf_st(out0, row, (float)(r4));
      }
    }
    __syncthreads();
  }
}
