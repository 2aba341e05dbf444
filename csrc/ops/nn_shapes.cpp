// Shapes of nn ops with no shape function in torch, or a wrong one
// (convolution_backward's, replaced in the lazyfuse namespace): 3-d max pooling and
// unpooling, the reflection and replication paddings ATen does not
// structure, PReLU's kernels, glu's forward-AD kernels, the margin losses, 3-d grid sampling, pixel
// and channel shuffles, and im2col/col2im (F.unfold and F.fold). Each runs its meta kernel on meta
// stand-ins of its inputs, so shapes, dtypes and argument errors are eager's; a backward with no
// meta kernel returns its input's shape, as ATen's do.

#include <ATen/ExpandUtils.h>
#include <ATen/Functions.h>

#include "ops/meta_tensors.h"
#include "ops/shape_inference.h"

namespace torch::lazy {
namespace {

using lazyfuse::OnMeta;

Shape ShapeOf(const at::Tensor& tensor) {
  return Shape(tensor.scalar_type(), tensor.sizes().vec());
}

std::vector<Shape> ShapesOf(const std::tuple<at::Tensor, at::Tensor>& tensors) {
  return {ShapeOf(std::get<0>(tensors)), ShapeOf(std::get<1>(tensors))};
}

}  // namespace

std::vector<Shape> compute_shape_max_pool3d_with_indices(const at::Tensor& self,
                                                         at::IntArrayRef kernel_size,
                                                         at::IntArrayRef stride,
                                                         at::IntArrayRef padding,
                                                         at::IntArrayRef dilation,
                                                         bool ceil_mode) {
  return ShapesOf(
      at::max_pool3d_with_indices(OnMeta(self), kernel_size, stride, padding, dilation, ceil_mode));
}

std::vector<Shape> compute_shape_max_pool3d_with_indices_backward(const at::Tensor& grad_output,
                                                                  const at::Tensor& self,
                                                                  at::IntArrayRef kernel_size,
                                                                  at::IntArrayRef stride,
                                                                  at::IntArrayRef padding,
                                                                  at::IntArrayRef dilation,
                                                                  bool ceil_mode,
                                                                  const at::Tensor& indices) {
  return {ShapeOf(at::max_pool3d_with_indices_backward(OnMeta(grad_output),
                                                       OnMeta(self),
                                                       kernel_size,
                                                       stride,
                                                       padding,
                                                       dilation,
                                                       ceil_mode,
                                                       OnMeta(indices)))};
}

std::vector<Shape> compute_shape_reflection_pad2d(const at::Tensor& self, at::IntArrayRef padding) {
  return {ShapeOf(at::reflection_pad2d(OnMeta(self), padding))};
}

std::vector<Shape> compute_shape_reflection_pad2d_backward(const at::Tensor& grad_output,
                                                           const at::Tensor& self,
                                                           at::IntArrayRef padding) {
  return {ShapeOf(at::reflection_pad2d_backward(OnMeta(grad_output), OnMeta(self), padding))};
}

std::vector<Shape> compute_shape_replication_pad2d_backward(const at::Tensor& grad_output,
                                                            const at::Tensor& self,
                                                            at::IntArrayRef padding) {
  return {ShapeOf(at::replication_pad2d_backward(OnMeta(grad_output), OnMeta(self), padding))};
}

std::vector<Shape> compute_shape_replication_pad3d_backward(const at::Tensor& grad_output,
                                                            const at::Tensor& self,
                                                            at::IntArrayRef padding) {
  return {ShapeOf(at::replication_pad3d_backward(OnMeta(grad_output), OnMeta(self), padding))};
}

std::vector<Shape> compute_shape__prelu_kernel(const at::Tensor& self, const at::Tensor& weight) {
  return {ShapeOf(at::_prelu_kernel(OnMeta(self), OnMeta(weight)))};
}

std::vector<Shape> compute_shape__prelu_kernel_backward(const at::Tensor& grad_output,
                                                        const at::Tensor& self,
                                                        const at::Tensor& weight) {
  return ShapesOf(at::_prelu_kernel_backward(OnMeta(grad_output), OnMeta(self), OnMeta(weight)));
}

std::vector<Shape> compute_shape_multi_margin_loss(const at::Tensor& self,
                                                   const at::Tensor& target,
                                                   const at::Scalar& p,
                                                   const at::Scalar& margin,
                                                   const std::optional<at::Tensor>& weight,
                                                   int64_t reduction) {
  const Shape shape = ShapeOf(
      at::multi_margin_loss(OnMeta(self), OnMeta(target), p, margin, OnMeta(weight), reduction));
  // The meta kernel gives [1] for a 0-dim target unreduced; eager's kernels
  // give a 0-dim loss.
  if (reduction == at::Reduction::None && target.dim() == 0) {
    return {Shape(shape.scalar_type(), {})};
  }
  return {shape};
}

std::vector<Shape> compute_shape_multi_margin_loss_backward(
    const at::Tensor& /*grad_output*/,
    const at::Tensor& self,
    const at::Tensor& /*target*/,
    const at::Scalar& /*p*/,
    const at::Scalar& /*margin*/,
    const std::optional<at::Tensor>& /*weight*/,
    int64_t /*reduction*/) {
  return {ShapeOf(self)};
}

std::vector<Shape> compute_shape_multilabel_margin_loss_forward(const at::Tensor& self,
                                                                const at::Tensor& target,
                                                                int64_t reduction) {
  std::vector<Shape> shapes =
      ShapesOf(at::multilabel_margin_loss_forward(OnMeta(self), OnMeta(target), reduction));
  // The meta kernel gives a 1-d input's unreduced loss one dimension; ATen's
  // kernels give it none.
  if (self.dim() <= 1) {
    shapes[0] = Shape(self.scalar_type(), {});
  }
  return shapes;
}

std::vector<Shape> compute_shape_multilabel_margin_loss_backward(const at::Tensor& /*grad_output*/,
                                                                 const at::Tensor& self,
                                                                 const at::Tensor& /*target*/,
                                                                 int64_t /*reduction*/,
                                                                 const at::Tensor& /*is_target*/) {
  return {ShapeOf(self)};
}

// glu's forward-AD kernels have no meta kernel; ATen's CPU and CUDA ones
// make their result like glu's output, and like grad_x for the backward.
std::vector<Shape> compute_shape_glu_jvp(const at::Tensor& glu,
                                         const at::Tensor& /*x*/,
                                         const at::Tensor& /*dx*/,
                                         int64_t /*dim*/) {
  return {ShapeOf(glu)};
}

std::vector<Shape> compute_shape_glu_backward_jvp(const at::Tensor& grad_x,
                                                  const at::Tensor& /*grad_glu*/,
                                                  const at::Tensor& /*x*/,
                                                  const at::Tensor& /*dgrad_glu*/,
                                                  const at::Tensor& /*dx*/,
                                                  int64_t /*dim*/) {
  return {ShapeOf(grad_x)};
}

std::vector<Shape> compute_shape_soft_margin_loss(const at::Tensor& self,
                                                  const at::Tensor& target,
                                                  int64_t reduction) {
  return {ShapeOf(at::soft_margin_loss(OnMeta(self), OnMeta(target), reduction))};
}

std::vector<Shape> compute_shape_soft_margin_loss_backward(const at::Tensor& grad_output,
                                                           const at::Tensor& self,
                                                           const at::Tensor& target,
                                                           int64_t reduction) {
  return {ShapeOf(
      at::soft_margin_loss_backward(OnMeta(grad_output), OnMeta(self), OnMeta(target), reduction))};
}

std::vector<Shape> compute_shape_grid_sampler_3d(const at::Tensor& input,
                                                 const at::Tensor& grid,
                                                 int64_t interpolation_mode,
                                                 int64_t padding_mode,
                                                 bool align_corners) {
  return {ShapeOf(at::grid_sampler_3d(
      OnMeta(input), OnMeta(grid), interpolation_mode, padding_mode, align_corners))};
}

std::vector<Shape> compute_shape_grid_sampler_3d_backward(const at::Tensor& grad_output,
                                                          const at::Tensor& input,
                                                          const at::Tensor& grid,
                                                          int64_t interpolation_mode,
                                                          int64_t padding_mode,
                                                          bool align_corners,
                                                          std::array<bool, 2> output_mask) {
  return ShapesOf(at::grid_sampler_3d_backward(OnMeta(grad_output),
                                               OnMeta(input),
                                               OnMeta(grid),
                                               interpolation_mode,
                                               padding_mode,
                                               align_corners,
                                               output_mask));
}

std::vector<Shape> compute_shape_max_unpool2d(const at::Tensor& self,
                                              const at::Tensor& indices,
                                              at::IntArrayRef output_size) {
  return {ShapeOf(at::max_unpool2d(OnMeta(self), OnMeta(indices), output_size))};
}

std::vector<Shape> compute_shape_max_unpool3d(const at::Tensor& self,
                                              const at::Tensor& indices,
                                              at::IntArrayRef output_size,
                                              at::IntArrayRef stride,
                                              at::IntArrayRef padding) {
  return {ShapeOf(at::max_unpool3d(OnMeta(self), OnMeta(indices), output_size, stride, padding))};
}

std::vector<Shape> compute_shape_pixel_shuffle(const at::Tensor& self, int64_t upscale_factor) {
  return {ShapeOf(at::pixel_shuffle(OnMeta(self), upscale_factor))};
}

std::vector<Shape> compute_shape_pixel_unshuffle(const at::Tensor& self, int64_t downscale_factor) {
  return {ShapeOf(at::pixel_unshuffle(OnMeta(self), downscale_factor))};
}

std::vector<Shape> compute_shape_channel_shuffle(const at::Tensor& self, int64_t groups) {
  return {ShapeOf(at::channel_shuffle(OnMeta(self), groups))};
}

std::vector<Shape> compute_shape_im2col(const at::Tensor& self,
                                        at::IntArrayRef kernel_size,
                                        at::IntArrayRef dilation,
                                        at::IntArrayRef padding,
                                        at::IntArrayRef stride) {
  return {ShapeOf(at::im2col(OnMeta(self), kernel_size, dilation, padding, stride))};
}

std::vector<Shape> compute_shape_col2im(const at::Tensor& self,
                                        at::IntArrayRef output_size,
                                        at::IntArrayRef kernel_size,
                                        at::IntArrayRef dilation,
                                        at::IntArrayRef padding,
                                        at::IntArrayRef stride) {
  return {ShapeOf(at::col2im(OnMeta(self), output_size, kernel_size, dilation, padding, stride))};
}

}  // namespace torch::lazy

namespace lazyfuse {

std::vector<torch::lazy::Shape> compute_shape_native_dropout_backward(const at::Tensor& grad_output,
                                                                      const at::Tensor& mask,
                                                                      double scale) {
  // grad_output * mask * scale: an integer gradient times the float scale
  // gives the default dtype, where torch's shape function keeps the integer.
  return {torch::lazy::Shape(at::result_type(grad_output, scale),
                             at::infer_size(grad_output.sizes(), mask.sizes()))};
}

std::vector<torch::lazy::Shape> compute_shape_convolution_backward(
    const at::Tensor& grad_output,
    const at::Tensor& input,
    const at::Tensor& weight,
    at::OptionalIntArrayRef bias_sizes,
    at::IntArrayRef /*stride*/,
    at::IntArrayRef /*padding*/,
    at::IntArrayRef /*dilation*/,
    bool /*transposed*/,
    at::IntArrayRef /*output_padding*/,
    int64_t /*groups*/,
    std::array<bool, 3> /*output_mask*/) {
  // Without bias_sizes ATen sums grad_output over every dimension but the
  // channels' for the bias gradient.
  const std::vector<int64_t> bias =
      bias_sizes.has_value() ? bias_sizes->vec() : std::vector<int64_t>{grad_output.size(1)};
  return {torch::lazy::Shape(input.scalar_type(), input.sizes().vec()),
          torch::lazy::Shape(weight.scalar_type(), weight.sizes().vec()),
          torch::lazy::Shape(grad_output.scalar_type(), bias)};
}

}  // namespace lazyfuse
