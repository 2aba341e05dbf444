#pragma once

// The step that runs max_pool2d_with_indices. ATen's CPU loop branches on
// each comparison, and on real data about half its branches go the other
// way: 29-39 ns an output on one core of this machine, 50x a copy of the
// same bytes, so LeNet-5's two pools took longer than both its forward
// convolutions. On the CPU, a contiguous float or double input takes a
// loop without branches, with ATen's values and indices (the first
// largest element of a window, or its last NaN). Everything else (CUDA,
// other dtypes, a graph lowered with fused kernels off) is ATen's call.

#include <ATen/Tensor.h>
#include <c10/util/ArrayRef.h>

#include <tuple>

namespace lazyfuse {

std::tuple<at::Tensor, at::Tensor> MaxPool2dWithIndicesStep(const at::Tensor& self,
                                                            c10::IntArrayRef kernel_size,
                                                            c10::IntArrayRef stride,
                                                            c10::IntArrayRef padding,
                                                            c10::IntArrayRef dilation,
                                                            bool ceil_mode,
                                                            bool own_loop);

}  // namespace lazyfuse
