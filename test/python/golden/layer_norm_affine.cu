extern "C" __global__ void lf_reduction_nativelayernorm(const float* __restrict__ in0, const float* __restrict__ in1, const float* __restrict__ in2, float* __restrict__ out0) {
  __shared__ float lf_smem[32];
  for (int row = blockIdx.x; row < 4; row += gridDim.x) {
    const int x0 = (row);
    float a1 = 0;
    for (int c = threadIdx.x; c < 64; c += blockDim.x) {
      const int p2 = row * 64 + c;
      const float v3 = lf_ld(in0, p2);
      a1 = a1 + ((float)v3);
    }
    a1 = lf_block_reduce(a1, lf_sum_op(), lf_smem);
    const float m4 = a1 / (float)64;
    float a5 = 0;
    for (int c = threadIdx.x; c < 64; c += blockDim.x) {
      const int p6 = row * 64 + c;
      const float v7 = lf_ld(in0, p6);
      a5 = a5 + (((float)v7) - m4) * (((float)v7) - m4);
    }
    a5 = lf_block_reduce(a5, lf_sum_op(), lf_smem);
    const float s8 = lf_rsqrt(a5 / (float)64 + (float)(1.0000000000000001e-05));
    const float r9 = (float)(m4);
    const float r10 = (float)(s8);
    for (int c = threadIdx.x; c < 64; c += blockDim.x) {
      const int p11 = row * 64 + c;
      const float v12 = lf_ld(in0, p11);
      const int x13 = (p11) / 64;
      const int x14 = ((p11)) % 64;
      const int l15 = x14;
      const float v16 = lf_ld(in1, l15);
      const float v17 = lf_ld(in2, l15);
      const float v18 = (float)((((((float)v12) - m4) * s8) * (float)v16) + (float)v17);
      lf_st(out0, p11, (float)(v18));
    }
  }
}
