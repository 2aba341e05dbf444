extern "C" __global__ void lf_reduction_sum(const float* __restrict__ in0, float* __restrict__ out0) {
  for (int row = (int)blockIdx.x * blockDim.x + threadIdx.x; row < 16; row += (int)gridDim.x * blockDim.x) {
    const int x0 = (row);
    float a1 = 0;
    for (int c = 0; c < 64; ++c) {
      const int x2 = (c);
      const int l3 = x2 * 16 + x0;
      const float v4 = lf_ld(in0, l3);
      a1 = a1 + ((float)v4);
    }
    const float r5 = (float)(a1);
    if (true) {
      lf_st(out0, row, (float)(r5));
    }
  }
}
