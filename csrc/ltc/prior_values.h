#pragma once

// The value a tensor held before the graph that updates it in place, so a
// graph that fails can be undone for the tensors it would have updated.
//
// Eager raises at the op that fails, before the steps after it run: a
// training step whose loss fails leaves the weights, the optimizer state and
// the running statistics as they were. A lazy graph holds the whole step, so
// without this every tensor it updates would need the failing step, and
// raise, for the rest of the process: one bad batch would end the training.
//
// Under functionalization each in-place write gives the tensor a new lazy
// tensor, so the link from the new one to the device data the old one held
// is kept here, at each write (NoteWrittenValue). A graph whose failure has
// been raised gives each tensor it updates that needs the failing step its
// prior value back, where none of that graph's steps wrote over it.

#include <ATen/Tensor.h>
#include <torch/csrc/lazy/core/tensor.h>

#include <vector>

namespace lazyfuse {

// `written`, a functional lazy tensor, has just taken a new value; `before`
// is the bare lazy tensor it held until then. Links the new one to the data
// `before` held, or to the value it was itself linked to, when both have the
// same shape and dtype.
void NoteWrittenValue(const at::Tensor& before, const at::Tensor& written);

// The bare lazy tensor a functional tensor holds now, or an undefined tensor.
at::Tensor HeldValue(const at::Tensor& functional);

// The device data `tensor` held before the pending graph that updates it,
// while that data still has its value; nullptr if none.
torch::lazy::BackendDataPtr PriorValue(const torch::lazy::LazyTensor& tensor);

// PriorValue of each of `tensors`, taken together.
std::vector<torch::lazy::BackendDataPtr> PriorValues(
    const std::vector<const torch::lazy::LazyTensor*>& tensors);

// Drops the link of a tensor that has its value.
void ForgetPriorValue(const torch::lazy::LazyTensor& tensor);

// Drops every link: a sync of every live tensor succeeded, so none has a
// pending graph left.
void ForgetAllPriorValues();

}  // namespace lazyfuse
