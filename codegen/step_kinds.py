"""How each lazy op runs as a step of a Program: its kind for the fusion
planner (from ATen's tags), the aten op its step calls, and how the step
reads its inputs. Read by both generators, gen_lazyfuse.py's IR nodes and
kernel_definitions.py's kernels."""

from __future__ import annotations

import os

import torchgen
from torchgen.gen import get_grouped_native_functions, parse_native_yaml
from torchgen.model import NativeFunction, NativeFunctionsGroup

ATEN_PATH = os.path.join(os.path.dirname(torchgen.__file__), "packaged", "ATen")

# Step kinds come from ATen's own tags; this table covers untagged ops whose
# kind the fusion planner should still know.
KIND_OVERRIDES = {
    "fill.Scalar": "kPointwise",
    "zero": "kPointwise",
    "mse_loss": "kReduction",
    "mse_loss_backward": "kPointwise",
}


def load_native_functions() -> list[NativeFunction]:
    native = os.path.join(ATEN_PATH, "native")
    parsed = parse_native_yaml(
        os.path.join(native, "native_functions.yaml"), os.path.join(native, "tags.yaml")
    )
    return parsed.native_functions


def load_tags(functions: list[NativeFunction]) -> dict[str, set[str]]:
    return {str(f.func.name): set(f.tags) for f in functions}


TAGS: dict[str, set[str]] = {}


def load_out_variants(functions: list[NativeFunction]) -> dict[str, str]:
    """By functional op, the at::_ops name of its structured out= variant,
    for ops with one result and no generator. A structured pointwise kernel
    is one TensorIterator loop, which may write its result over an input of
    the same layout: element i is read before it is written. Unstructured
    out= kernels may be several passes (mse_loss_backward's subtracts, then
    multiplies by an input), so they are left out."""
    variants = {}
    for group in get_grouped_native_functions(functions):
        if not isinstance(group, NativeFunctionsGroup) or group.out is None:
            continue
        func = group.functional.func
        generator = any("Generator" in str(a.type) for a in func.arguments.flat_all)
        if group.structured and len(func.returns) == 1 and not generator:
            variants[str(func.name)] = group.out.func.name.unambiguous_name()
    return variants


OUT_VARIANTS: dict[str, str] = {}

# Ops that write a constant over their input's shape and read none of its
# values, by their in-place variant. Their out= variants are generated as the
# functional op plus a copy, which would allocate all the same.
CONSTANT_FILLS = {"zero": "zero_", "fill.Scalar": "fill__Scalar"}


def step_kind(op_name: str) -> str:
    if op_name in KIND_OVERRIDES:
        return KIND_OVERRIDES[op_name]
    tags = TAGS.get(op_name, set())
    if "view_copy" in tags:
        return "kView"
    if "pointwise" in tags:
        return "kPointwise"
    if "reduction" in tags:
        return "kReduction"
    return "kOpaque"


# View ops whose *_copy variant (all functionalization leaves in the IR) runs
# as the view itself: buffers of a Program are never written in place, so an
# alias is as good as a copy, and copying each transposed weight cost more
# than the matmul. view_copy runs as reshape, which copies only when strides
# leave no choice; as_strided and dtype views keep their copy.
ALIAS_VIEWS = {
    "alias",
    "detach",
    "diagonal",
    "expand",
    "permute",
    "select",
    "slice",
    "split",
    "squeeze",
    "t",
    "transpose",
    "unbind",
    "unfold",
    "unsqueeze",
}


# Ops whose step calls a lazyfuse function with the at::_ops signature: its
# own loop where ATen's is slow on the backing device, or ATen's call on its
# input laid out as the lazy tensor says it is.
OWN_STEPS = {
    "max_pool2d_with_indices": "lazyfuse::MaxPool2dWithIndicesStep",  # ops/max_pool_step.h
    "as_strided_copy": "lazyfuse::AsStridedCopyStep",  # ops/storage_view_steps.h
    "as_strided_scatter": "lazyfuse::AsStridedScatterStep",
    # ops/batch_norm_step.h
    "_native_batch_norm_legit_functional": "lazyfuse::BatchNormTrainingStep",
}
# Own steps that may write results into inputs the run owns: they take the
# step's KernelArgs first.
OWN_STEPS_WRITING_INPUTS = {"_native_batch_norm_legit_functional"}

# Scatters into a view of their first operand, by the view they write: with
# the base's memory the run's to overwrite, `base[...] = src` writes its part
# as in eager, instead of a copy of the whole base (a KV cache's, every token).
SCATTER_VIEWS = {
    "slice_scatter": "slice_Tensor",
    "select_scatter": "select_int",
    "diagonal_scatter": "diagonal",
    "as_strided_scatter": "as_strided",
}

# Writes of a part of their first operand along `dim` at `index`, as
# functionalization's functional form of an in-place op: where the run owns
# the base, ATen's in-place op (the value) writes the part into it instead
# of copying all of it (ops/partial_writes.h). index_fill reads negative
# indices from the end; the others raise on them.
PARTIAL_WRITES = {
    "index_copy": "index_copy_",
    "index_add": "index_add_",
    "index_fill.int_Scalar": "index_fill__int_Scalar",
    "index_fill.int_Tensor": "index_fill__int_Tensor",
    "scatter.src": "scatter__src",
    "scatter.value": "scatter__value",
    "scatter.reduce": "scatter__reduce",
    "scatter.value_reduce": "scatter__value_reduce",
    "scatter_add": "scatter_add_",
}

# Own steps whose loop is lazyfuse's only while fused kernels are on
# (LAZYFUSE_CPU_KERNELS=0 bisects with ATen's call). The choice is made when
# the graph is lowered and travels with its step as a last argument: a graph
# still queued on the CPU stream runs as it was compiled, whatever the
# settings are by the time it runs.
OWN_LOOPS_WITH_FUSED_KERNELS = {"max_pool2d_with_indices"}


def executed_op(op_name: str, unambiguous: str) -> str:
    """The at::_ops entry a step calls: the view instead of its copy where safe."""
    base, _, overload = op_name.partition(".")
    if step_kind(op_name) != "kView" or not base.endswith("_copy"):
        return unambiguous
    view = base[: -len("_copy")]
    if view == "view" and not overload:
        return "reshape"
    if view in ALIAS_VIEWS and (view + (f".{overload}" if overload else "")) in TAGS:
        return f"{view}_{overload}" if overload else view
    return unambiguous


# Eager's det and slogdet factor A.mT where A is contiguous, and their
# derivatives ask A.is_contiguous() again to read that LU the right way round.
# A lazy A always says it is; a step given a strided view of it factored A,
# and the gradient came out transposed.
LAYOUT_READ_BY_DERIVATIVE = {"_linalg_det", "_linalg_slogdet"}


def reads_contiguous(op_name: str) -> bool:
    """An ATen backward step takes its tensors contiguous (KernelArgs::
    ReadContiguous): its kernel may read what its forward made as laid out
    contiguously, where a lazy clone() that ensured it records nothing. So
    does a forward whose derivative asks its input's layout."""
    base = op_name.partition(".")[0]
    if base in LAYOUT_READ_BY_DERIVATIVE:
        return True
    return "_backward" in base and step_kind(op_name) == "kOpaque"
