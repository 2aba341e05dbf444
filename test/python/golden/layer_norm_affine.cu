extern "C" __global__ void lf_reduction_nativelayernorm(const float* __restrict__ in0, const float* __restrict__ in1, const float* __restrict__ in2, float* __restrict__ out0) {
  constexpr int lf_threads = 64;
  __shared__ double lf_smem[32];
  __shared__ float lf_row[1024];
  for (int row = blockIdx.x; row < 4; row += gridDim.x) {
    double a0 = 0;
    LF_UNROLL for (int c = threadIdx.x; c < 64; c += lf_threads) {
      const int p1 = row * 64 + c;
      const float v2 = lf_ld(in0, p1);
      lf_row[c] = ((float)v2);
      a0 = a0 + lf_row[c];
    }
    a0 = lf_block_reduce(a0, lf_sum_op(), lf_smem);
    const double m3 = a0 / (double)64;
    double a4 = 0;
    LF_UNROLL for (int c = threadIdx.x; c < 64; c += lf_threads) {
      const int p5 = row * 64 + c;
      a4 = a4 + (lf_row[c] - m3) * (lf_row[c] - m3);
    }
    a4 = lf_block_reduce(a4, lf_sum_op(), lf_smem);
    const float rstd6 = lf_rsqrt((float)(a4 / (double)64) + (float)(1.0000000000000001e-05));
    const float r7 = (float)(m3);
    const float r8 = (float)(rstd6);
    LF_UNROLL for (int c = threadIdx.x; c < 64; c += lf_threads) {
      const int p9 = row * 64 + c;
      const int l10 = c;
      const float v11 = lf_ld(in1, l10);
      const float v12 = lf_ld(in2, l10);
      const float v13 = (float)((((lf_row[c] - (float)m3) * (float)rstd6) * (float)v11) + (float)v12);
      lf_st(out0, p9, (float)(v13));
    }
  }
}
