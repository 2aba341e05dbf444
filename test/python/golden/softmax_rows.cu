extern "C" __global__ void lf_reduction_softmax(const float* __restrict__ in0, float* __restrict__ out0) {
  constexpr int lf_threads = 64;
  __shared__ float lf_smem[32];
  __shared__ float lf_row[1024];
  for (int row = blockIdx.x; row < 8; row += gridDim.x) {
    float a0 = -LF_INF;
    LF_UNROLL for (int lf_cv = threadIdx.x; lf_cv < 64; lf_cv += lf_threads) {
      constexpr int lf_width = 4;
      const int lf_vbase = row * 256 + lf_cv * lf_width;
      union { lf_v16 v; float e[4]; } vi0;
      vi0.v = lf_vload<lf_v16>(in0 + lf_vbase);
      #pragma unroll
      for (int j = 0; j < lf_width; ++j) {
        const int c = lf_cv * lf_width + j;
        const int p1 = row * 256 + c;
        lf_row[c] = ((float)vi0.e[j]);
        a0 = lf_max_combine(a0, lf_row[c]);
      }
    }
    a0 = lf_block_reduce(a0, lf_max_op(), lf_smem);
    float a2 = 0;
    LF_UNROLL for (int lf_cv = threadIdx.x; lf_cv < 64; lf_cv += lf_threads) {
      constexpr int lf_width = 4;
      const int lf_vbase = row * 256 + lf_cv * lf_width;
      #pragma unroll
      for (int j = 0; j < lf_width; ++j) {
        const int c = lf_cv * lf_width + j;
        const int p3 = row * 256 + c;
        a2 = a2 + lf_exp(lf_row[c] - a0);
      }
    }
    a2 = lf_block_reduce(a2, lf_sum_op(), lf_smem);
    LF_UNROLL for (int lf_cv = threadIdx.x; lf_cv < 64; lf_cv += lf_threads) {
      constexpr int lf_width = 4;
      const int lf_vbase = row * 256 + lf_cv * lf_width;
      union { lf_v16 v; float e[4]; } vo0;
      #pragma unroll
      for (int j = 0; j < lf_width; ++j) {
        const int c = lf_cv * lf_width + j;
        const int p4 = row * 256 + c;
        const float v5 = (float)(lf_exp(lf_row[c] - a0) / a2);
        vo0.e[j] = (float)(v5);
      }
      lf_vstore(out0 + lf_vbase, vo0.v);
    }
  }
}
