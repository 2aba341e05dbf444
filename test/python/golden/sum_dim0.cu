extern "C" __global__ void lf_reduction_sum(const float* __restrict__ in0, float* __restrict__ out0, float* __restrict__ lf_partials, unsigned int* __restrict__ lf_counters) {
  for (int lf_item = (int)blockIdx.x * blockDim.x + threadIdx.x; lf_item < (int)32u; lf_item += (int)gridDim.x * blockDim.x) {
    const int row = lf_item % 16;
    const int lf_begin = (lf_item / 16) * (int)32u;
    const int lf_end = lf_begin + (int)32u < 64 ? lf_begin + (int)32u : 64;
    float a0 = 0;
    for (int c = lf_begin; c < lf_end; ++c) {
      const int l1 = c * 16 + row;
      const float v2 = lf_ld(in0, l1);
      a0 = a0 + ((float)v2);
    }
    const bool lf_last = lf_publish(lf_partials, lf_item, a0, lf_counters + row) == 1u;
    if (lf_last) {
      a0 = 0;
      for (int k = 0; k < (int)2u; ++k) {
        a0 = a0 + lf_ld_published(lf_partials, k * 16 + row);
      }
      const float r3 = (float)(a0);
      if (true) {
        lf_st(out0, row, (float)(r3));
      }
    }
  }
}
