extern "C" __global__ void lf_reduction_softmax(const float* __restrict__ in0, float* __restrict__ out0) {
  __shared__ float lf_smem[32];
  __shared__ float lf_row[256];
  for (int row = blockIdx.x; row < 8; row += gridDim.x) {
    const int x0 = (row);
    float a1 = -LF_INF;
    LF_UNROLL for (int c = threadIdx.x; c < 256; c += 256) {
      const int p2 = row * 256 + c;
      const float v3 = lf_ld(in0, p2);
      lf_row[c] = ((float)v3);
      a1 = lf_maximum(a1, lf_row[c]);
    }
    a1 = lf_block_reduce(a1, lf_max_op(), lf_smem);
    float a4 = 0;
    LF_UNROLL for (int c = threadIdx.x; c < 256; c += 256) {
      const int p5 = row * 256 + c;
      a4 = a4 + lf_exp(lf_row[c] - a1);
    }
    a4 = lf_block_reduce(a4, lf_sum_op(), lf_smem);
    LF_UNROLL for (int c = threadIdx.x; c < 256; c += 256) {
      const int p6 = row * 256 + c;
      const float v7 = (float)(lf_exp(lf_row[c] - a1) / a4);
      lf_st(out0, p6, (float)(v7));
    }
  }
}
