extern "C" __global__ void lf_reduction_nativelayernorm(const float* __restrict__ in0, const float* __restrict__ in1, const float* __restrict__ in2, float* __restrict__ out0) {
  constexpr int lf_threads = 64;
  __shared__ double lf_smem[32];
  __shared__ float lf_row[1024];
  for (int row = blockIdx.x; row < 4; row += gridDim.x) {
    const int x0 = (row);
    double a1 = 0;
    LF_UNROLL for (int c = threadIdx.x; c < 64; c += lf_threads) {
      const int p2 = row * 64 + c;
      const float v3 = lf_ld(in0, p2);
      lf_row[c] = ((float)v3);
      a1 = a1 + lf_row[c];
    }
    a1 = lf_block_reduce(a1, lf_sum_op(), lf_smem);
    const double m4 = a1 / (double)64;
    double a5 = 0;
    LF_UNROLL for (int c = threadIdx.x; c < 64; c += lf_threads) {
      const int p6 = row * 64 + c;
      a5 = a5 + (lf_row[c] - m4) * (lf_row[c] - m4);
    }
    a5 = lf_block_reduce(a5, lf_sum_op(), lf_smem);
    const float rstd7 = lf_rsqrt((float)(a5 / (double)64) + (float)(1.0000000000000001e-05));
    const float r8 = (float)(m4);
    const float r9 = (float)(rstd7);
    LF_UNROLL for (int c = threadIdx.x; c < 64; c += lf_threads) {
      const int p10 = row * 64 + c;
      const int x11 = (p10) / 64;
      const int x12 = ((p10)) % 64;
      const int l13 = x12;
      const float v14 = lf_ld(in1, l13);
      const float v15 = lf_ld(in2, l13);
      const float v16 = (float)((((lf_row[c] - (float)m4) * (float)rstd7) * (float)v14) + (float)v15);
      lf_st(out0, p10, (float)(v16));
    }
  }
}
