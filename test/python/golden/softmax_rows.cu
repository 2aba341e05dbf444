extern "C" __global__ void lf_reduction_softmax(const float* __restrict__ in0, float* __restrict__ out0) {
  __shared__ float lf_smem[32];
  for (int row = blockIdx.x; row < 8; row += gridDim.x) {
    const int x0 = (row);
    float a1 = -LF_INF;
    for (int c = threadIdx.x; c < 256; c += blockDim.x) {
      const int p2 = row * 256 + c;
      const float v3 = lf_ld(in0, p2);
      a1 = lf_maximum(a1, ((float)v3));
    }
    a1 = lf_block_reduce(a1, lf_max_op(), lf_smem);
    float a4 = 0;
    for (int c = threadIdx.x; c < 256; c += blockDim.x) {
      const int p5 = row * 256 + c;
      const float v6 = lf_ld(in0, p5);
      a4 = a4 + lf_exp(((float)v6) - a1);
    }
    a4 = lf_block_reduce(a4, lf_sum_op(), lf_smem);
    for (int c = threadIdx.x; c < 256; c += blockDim.x) {
      const int p7 = row * 256 + c;
      const float v8 = lf_ld(in0, p7);
      const float v9 = (float)(lf_exp(((float)v8) - a1) / a4);
      lf_st(out0, p7, (float)(v9));
    }
  }
}
