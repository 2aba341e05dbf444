"""Generates lazyfuse's lazy-op stubs with torchgen's gen_lazy_tensor.

Runs inside the CMake build. Outputs go to the build tree only:
  LazyIr.h, LazyNonNativeIr.h      IR node classes, each with a Lower() that
                                   emits one ATen step into a lazyfuse Program
  LazyNativeFunctions.h            the kernel class declaration
  LazyNativeFunctions_<k>.cpp      the lazy kernels, split in shards so that a
                                   2-core build compiles them in parallel
  RegisterLazy.cpp                 RegisterLazyFuseLazyNativeFunctions()
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torchgen
import torchgen.gen_lazy_tensor as gen_lazy_tensor
from torchgen.api.lazy import LazyArgument, LazyIrSchema, isValueType, tensorListValueT
from torchgen.api.types import BaseCType, DispatcherSignature, NativeSignature, OptionalCType
from torchgen.dest.lazy_ir import (
    ComputeShapeSignature,
    GenLazyIR,
    GenLazyNativeFuncDefinition,
    gen_fallback_code,
)
from torchgen.gen import get_grouped_native_functions, parse_native_yaml
from torchgen.model import BackendMetadata, NativeFunction, NativeFunctionsGroup

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


def is_tensor_list(arg: LazyArgument) -> bool:
    # torchgen tells a TensorList value from a Tensor value by object identity.
    return isinstance(arg.lazy_type, BaseCType) and arg.lazy_type.type is tensorListValueT


def dispatcher_arg(type_str: str, expr: str) -> str:
    """Converts a stored node attribute into what at::_ops::<op>::call takes."""
    bool_array = re.fullmatch(r"bool\[(\d+)\]", type_str)
    if bool_array:
        return f"lazyfuse::ToBoolArray<{bool_array.group(1)}>({expr})"
    base = re.sub(r"\[\d*\]", "[]", type_str)
    if base == "SymInt[]":
        return f"c10::fromIntArrayRefSlow({expr})"
    if base == "SymInt":
        return f"c10::SymInt({expr})"
    if base == "SymInt?":
        return f"({expr} ? std::make_optional(c10::SymInt(*{expr})) : std::nullopt)"
    if base == "SymInt[]?":
        return (
            f"({expr} ? at::OptionalSymIntArrayRef(c10::fromIntArrayRefSlow(*{expr}))"
            " : at::OptionalSymIntArrayRef())"
        )
    if base == "int[]?":
        return f"({expr} ? at::OptionalIntArrayRef(*{expr}) : at::OptionalIntArrayRef())"
    if base == "str?":
        return f"({expr} ? std::make_optional<c10::string_view>(*{expr}) : std::nullopt)"
    return expr


def _is_scalar(cpp_type: str) -> bool:
    """at::Scalar or an optional one (not at::ScalarType)."""
    return re.search(r"\bat::Scalar>?$", cpp_type) is not None


@dataclass(frozen=True)
class GenLazyFuseIR(GenLazyIR):
    """IR nodes whose Lower() emits one ATen step into the lazyfuse Program."""

    def lowering_function(self, schema: LazyIrSchema) -> str:
        signature = "void Lower(lazyfuse::LazyFuseLoweringContext& ctx) const override"
        if schema.properties.LowerDeclOnly:
            return f"{signature};"
        if not schema.properties.Lower:
            return ""
        op_name = str(schema.func.name)
        captures: list[str] = []
        reads: list[str] = []
        call_args: list[str] = []
        # Named attributes the fusion planner and kernel codegen read.
        attrs: list[str] = []
        for arg in schema.filtered_args():
            local = f"a_{arg.name}"
            if arg.is_generator:
                call_args.append("std::nullopt")
                continue
            if isValueType(arg.lazy_type, schema.properties):
                if arg.is_symint_or_list:
                    raise RuntimeError(f"{op_name}: symbolic ints are not supported")
                optional = isinstance(arg.lazy_type, OptionalCType)
                if optional:
                    captures.append(f"const bool has_{local} = has_{arg.name};")
                    attrs.append(f'{{"has_{arg.name}", c10::IValue(has_{local})}}')
                if arg.is_wrapped_scalar:
                    read = f"args.optional_scalar(has_{local})" if optional else "args.scalar()"
                elif optional:
                    read = f"args.optional_tensor(has_{local})"
                elif is_tensor_list(arg):
                    read = "args.tensor_list()"
                else:
                    read = "args.tensor()"
                reads.append(f"auto {local} = {read};")
                call_args.append(local)
            else:
                captures.append(f"const auto {local} = this->{arg.name};")
                call_args.append(dispatcher_arg(str(arg.orig_type), local))
                attrs.append(f'{{"{arg.name}", lazyfuse::ToAttr({local})}}')
        if reads_contiguous(op_name):
            reads.insert(0, "args.ReadContiguous();")
        aten_op = executed_op(op_name, schema.func.name.unambiguous_name())
        into_call = None
        pointwise = step_kind(op_name) == "kPointwise"
        if pointwise and op_name in OUT_VARIANTS:
            into_call = f"{OUT_VARIANTS[op_name]}::call({', '.join(call_args + ['lf_into'])})"
        elif pointwise and op_name in CONSTANT_FILLS:
            into_call = f"{CONSTANT_FILLS[op_name]}::call({', '.join(['lf_into'] + call_args[1:])})"
        if aten_op in ("detach", "alias"):
            # The input itself when nothing else reads it (KernelArgs::PassInput).
            reads.append(
                "if (at::Tensor lf_same = args.PassInput(0); lf_same.defined()) {\n"
                "        return {lf_same};\n"
                "      }"
            )
        if into_call:
            # Written over an input the run no longer needs, as eager's
            # in-place optimizer updates are (KernelArgs::TakeInputFor).
            captures.append("const at::ScalarType lf_dtype = this->shape(0).scalar_type();")
            captures.append("const std::vector<int64_t> lf_sizes = this->shape(0).sizes().vec();")
            reads.append(
                "if (at::Tensor lf_into = args.TakeInputFor(lf_dtype, lf_sizes); "
                "lf_into.defined()) {\n"
                f"        at::_ops::{into_call};\n"
                "        return {lf_into};\n"
                "      }"
            )
        if op_name in SCATTER_VIEWS:
            view_args = ["lf_base", *call_args[2:]]  # the scatter's, without src
            reads.append(
                "if (at::Tensor lf_base = args.InputToWriteInto(0); lf_base.defined()) {\n"
                f"        at::Tensor lf_view = at::_ops::{SCATTER_VIEWS[op_name]}::call("
                f"{', '.join(view_args)});\n"
                f"        if (args.ScatterInto(0, lf_view, {call_args[1]})) {{\n"
                "          return {lf_base};\n"
                "        }\n"
                "      }"
            )
        if op_name in PARTIAL_WRITES:
            wraps = "true" if op_name.startswith("index_fill") else "false"
            reads.append(
                "if (at::Tensor lf_base = lazyfuse::BaseToWriteAlong("
                f"args, {call_args[1]}, {call_args[2]}, /*negative_wraps=*/{wraps}); "
                "lf_base.defined()) {\n"
                f"        at::_ops::{PARTIAL_WRITES[op_name]}::call("
                f"{', '.join(['lf_base', *call_args[1:]])});\n"
                "        return {lf_base};\n"
                "      }"
            )
        runs = OWN_STEPS.get(op_name, f"at::_ops::{aten_op}::call")
        run_args = ["args", *call_args] if op_name in OWN_STEPS_WRITING_INPUTS else list(call_args)
        if op_name in OWN_LOOPS_WITH_FUSED_KERNELS:
            captures.append("const bool lf_own_loop = lazyfuse::FusedKernelsEnabled();")
            run_args.append("lf_own_loop")
        capture_block = "\n    ".join(captures)
        read_block = "\n      ".join(reads)
        return f"""{signature} {{
    {capture_block}
    ctx.EmitStep(this, lazyfuse::StepKind::{step_kind(op_name)},
        [=](lazyfuse::KernelArgs& args) -> std::vector<at::Tensor> {{
      {read_block}
      return lazyfuse::AsTensorList({runs}({", ".join(run_args)}));
    }}, {{{", ".join(attrs)}}}, "{schema.func.name.overload_name}");
  }}"""

    def node_base_ctor_call(self, schema: LazyIrSchema) -> str:
        # torchgen hashes only the scalar attributes, so clamp(x, min=t) and
        # clamp(x, max=t) hashed alike and shared a compiled graph. Which
        # optional operands are present is part of the node's identity.
        # An at::Scalar attribute is hashed by lazyfuse: torch::lazy::Hash of
        # a complex Scalar calls itself until the stack overflows.
        call = super().node_base_ctor_call(schema)
        head, sep, tail = call.rpartition("torch::lazy::MHash(")
        attributes = schema.filtered_args(values=False, scalars=True)
        torchgen_hashed = ", ".join(a.name for a in attributes)
        if not sep or not tail.startswith(torchgen_hashed + ")"):
            raise RuntimeError(f"{schema.name}: unexpected node constructor {call}")
        present = [
            f"{a.name}.has_value()"
            for a in schema.filtered_args(values=True, scalars=False)
            if isinstance(a.lazy_type, OptionalCType)
        ]
        hashed = [
            f"lazyfuse::ScalarHash({a.name})" if _is_scalar(a.lazy_type.cpp_type()) else a.name
            for a in attributes
        ]
        rest = tail[len(torchgen_hashed) :]
        return f"{head}{sep}{', '.join(present + hashed)}{rest}"

    def can_be_reused_function(self, schema: LazyIrSchema, node_ctor_args: str) -> str:
        checks = []
        values = schema.filtered_args(values=True, scalars=False)
        for arg in values:
            if isinstance(arg.lazy_type, OptionalCType):
                # Absent optionals take no operand slot, so presence must match
                # before positions can be compared.
                checks.append(f"this->has_{arg.name} == {arg.name}.has_value()")
                checks.append(f"(!{arg.name} || lazyfuse::SameOperand(operand(i++), *{arg.name}))")
            else:
                checks.append(f"lazyfuse::SameOperand(operand(i++), {arg.name})")
        for arg in schema.filtered_args(values=False, scalars=True):
            if arg.lazy_type.cpp_type() == "at::Scalar":
                checks.append(f"lazyfuse::SameScalar(this->{arg.name}, {arg.name})")
            else:
                checks.append(f"this->{arg.name} == {arg.name}")
        body = " &&\n        ".join(checks) if checks else "true"
        return f"""bool CanBeReused({node_ctor_args}) const {{
    [[maybe_unused]] size_t i = 0;
    return ({body});
  }}"""


SCALAR_FROM_CODEGEN = re.compile(
    r"torch::lazy::LazyGraphExecutor::Get\(\)->\s*GetIrValueForScalarFromCodegen\("
)
# torchgen reads an optional tensor operand with TryGetLtcTensor, which
# drops a 0-dim CPU tensor (scalar_operands.h).
OPTIONAL_TENSOR = re.compile(r"torch::lazy::TryGetLtcTensor\((\w+)\.value_or\(at::Tensor\(\)\)\)")


# A *_copy op's shape call on meta tensors, as torchgen writes it.
COPY_ON_META = re.compile(
    r"at::compositeexplicitautogradnonfunctional::(\w+?)_copy(_symint)?\(self_meta(, )?"
)
# The views whose Tensor method takes the *_copy op's arguments, in order.
VIEW_METHODS = {
    "as_strided",
    "diagonal",
    "expand",
    "narrow",
    "permute",
    "select",
    "slice",
    "squeeze",
    "t",
    "transpose",
    "unfold",
    "unsqueeze",
    "view",
}


def _view_on_meta(match: re.Match[str]) -> str:
    view, symint = match.group(1), match.group(2) or ""
    if view not in VIEW_METHODS:
        return match.group(0)
    return f"self_meta.{view}{symint}("


@dataclass(frozen=True)
class GenLazyFuseNativeFuncDefinition(GenLazyNativeFuncDefinition):
    """Adds a device check so a CPU tensor mixed into a lazy op is a clear error."""

    def lazy_tensor_decls(self, func: NativeFunction, schema: LazyIrSchema) -> str:
        op = f"aten::{func.func.name}"
        checks = []
        for arg in schema.filtered_args(values=False, scalars=True):
            if arg.is_generator:
                # Graphs run later and draw from the default generator, which
                # torch.manual_seed seeds; a private generator cannot follow.
                checks.append(
                    f'TORCH_CHECK(!{arg.name}.has_value(), "lazyfuse: {op}: a torch.Generator '
                    'is not supported on the lazy device; seed with torch.manual_seed");'
                )
        for arg in schema.filtered_args(values=True, scalars=False):
            if arg.is_wrapped_scalar or arg.is_symint_or_list:
                continue
            # One overload set covers tensors, optional tensors and lists.
            checks.append(f'lazyfuse::CheckOnLazyDevice("{op}", "{arg.name}", {arg.name});')
        tensors = schema.filtered_args(values=True, scalars=False)
        if step_kind(str(func.func.name)) == "kView" and tensors:
            # Note [Inference mode and functionalization] (ops/inference_mode.h)
            checks.append(f"lazyfuse::NormalViewGuard normal_view({tensors[0].name});")
        decls = super().lazy_tensor_decls(func, schema)
        # Scalar operands take lazyfuse's path (lazyfuse_scalar_operands.h);
        # a torch whose torchgen spells these differently keeps LTC's.
        decls = SCALAR_FROM_CODEGEN.sub("lazyfuse::ScalarIrValue(", decls)
        decls = decls.replace(
            "torch::lazy::GetLtcTensorOrCreateForWrappedNumber(",
            "lazyfuse::GetLtcTensorOrWrapNumber(",
        )
        decls = OPTIONAL_TENSOR.sub(
            r"lazyfuse::OptionalLtcTensorOrWrapNumber(\1, *common_device)", decls
        )
        check_call = self.argument_check_call(func)
        if check_call is not None and takes_scalar_operands(schema):
            checks.append(f"{check_call};")
        return "\n        ".join(checks + [self.dtype_probe(func, schema), decls])

    def force_eager_fallback(
        self,
        func: NativeFunction,
        schema: LazyIrSchema,
        metadata: BackendMetadata,
        sig: DispatcherSignature | NativeSignature,
    ) -> str:
        """torch._lazy.config.set_force_fallback("aten::sub") runs that op
        eagerly, LTC's way to bisect a wrong result. torchgen's own version
        calls the TorchScript backend's fallback; this one calls lazyfuse's."""
        code = gen_fallback_code(schema, sig, overload_name=func.func.name.overload_name)
        code = code.replace("force_eager_fallback(", "lazyfuse::ForcedEagerFallback(")
        return code.replace("&ltc_eager_fallback", "&lazyfuse::LazyFuseEagerFallback")

    def shape_inference(self, func: NativeFunction, schema: LazyIrSchema) -> str:
        """torchgen shapes a *_copy op by running its composite kernel on meta
        tensors: the view, then a clone, whose empty_like has its meta kernel
        in Python (torch/_meta_registrations.py), some 10 us a call. Every IR
        node the trace cannot reuse (a new shape's every view) paid it. The
        view alone gives the same sizes and dtype, and the same errors.

        An op with a check_arguments_<kernel> in ops/argument_checks.h runs it
        first: its shape function or meta kernel lets through arguments that
        eager's kernel refuses. Only a new node pays for it; a reused one was
        built from the same operands and attributes, already checked. Not so
        for an op with Scalar operands: a scalar is an operand whose value a
        reused node does not compare (2**31 reuses clamp(min=3)'s node), so
        lazy_tensor_decls checks those before the reuse."""
        code = COPY_ON_META.sub(_view_on_meta, super().shape_inference(func, schema))
        metadata = self.backend_index.get_kernel(func)
        if metadata is not None and metadata.kernel in SHAPE_OVERRIDES:
            code = code.replace(
                f"torch::lazy::compute_shape_{metadata.kernel}(",
                f"lazyfuse::compute_shape_{metadata.kernel}(",
                1,
            )
        check_call = self.argument_check_call(func)
        if check_call is None or takes_scalar_operands(schema):
            return code
        return f"{check_call};\n{code}"

    def argument_check_call(self, func: NativeFunction) -> str | None:
        metadata = self.backend_index.get_kernel(func)
        if metadata is None or metadata.kernel not in ARGUMENT_CHECKS:
            return None
        shape_call = ComputeShapeSignature(
            metadata.kernel, func, symint=metadata.supports_symint()
        ).shape_call
        return shape_call.replace("torch::lazy::compute_shape_", "lazyfuse::check_arguments_", 1)

    def build_ir_node(self, func: NativeFunction, schema: LazyIrSchema) -> str:
        """A reused node was built, and its shape function (a meta kernel)
        run, for its Scalar operands' values then: leaky_relu_backward's
        refusal of a negative slope, pow's of a negative integer exponent,
        softshrink's of a negative lambda. New values run it again."""
        code = super().build_ir_node(func, schema)
        scalars = scalar_operand_names(schema)
        if not scalars or str(func.func.name.name.base) in SHAPES_READ_SCALAR_TYPES_ONLY:
            return code
        values = "{" + ", ".join(scalars) + "}"
        reuse = "        if (!node) {"
        if reuse not in code:
            raise RuntimeError(f"{func.func.name}: torchgen's IR-building code changed shape")
        recheck = (
            f"        if (node && !static_cast<const lazyfuse::LazyFuseNode&>(*node)"
            f".CheckedWithScalars({values})) {{\n"
            f"          {{\n{self.shape_inference(func, schema)}\n          }}\n"
            f"          static_cast<const lazyfuse::LazyFuseNode&>(*node)"
            f".KeepCheckedScalars({values});\n"
            "        }\n"
        )
        keep = (
            "            CacheNode(node);\n"
            f"            static_cast<const lazyfuse::LazyFuseNode&>(*node)"
            f".KeepCheckedScalars({values});\n"
        )
        if "            CacheNode(node);\n" not in code:
            raise RuntimeError(f"{func.func.name}: torchgen's IR-building code changed shape")
        return code.replace(reuse, recheck + reuse, 1).replace(
            "            CacheNode(node);\n", keep, 1
        )

    def dtype_probe(self, func: NativeFunction, schema: LazyIrSchema) -> str:
        """Meta kernels of opaque ops (mm, conv, ...) do not check dtypes; eager
        kernels do. When tensor dtypes differ, run the eager CPU kernel on
        uninitialised stand-ins so its own error surfaces at the call site."""
        if step_kind(str(func.func.name)) in ("kPointwise", "kView"):
            return ""
        tensors = [
            a.name
            for a in schema.filtered_args(values=True, scalars=False)
            if not a.is_wrapped_scalar and not is_tensor_list(a)
        ]
        if len(tensors) < 2:
            return ""
        call_args = []
        for arg in schema.filtered_args():
            is_tensor = arg.name in tensors
            call_args.append(f"lazyfuse::CpuStandIn({arg.name})" if is_tensor else arg.name)
        return (
            f"if (lazyfuse::HasMixedDtypes({{{', '.join(tensors)}}})) {{\n"
            f"          (void)at::{func.func.name.name}({', '.join(call_args)});\n"
            "        }"
        )


# Ops whose shape function reads only the type of a Scalar operand, which IR
# reuse compares, never its value; an optimizer step changes theirs each step
# (addcdiv_'s -step_size, add_'s -lr), and a new value reruns nothing.
SHAPES_READ_SCALAR_TYPES_ONLY = {
    "add",
    "sub",
    "rsub",
    "addcdiv",
    "addcmul",
    "lerp",
    "clamp",
    "clamp_min",
    "clamp_max",
    "eq",
    "ne",
    "lt",
    "le",
    "gt",
    "ge",
    "fill",
    "addmm",
    "addmv",
    "addbmm",
    "baddbmm",
}


def scalar_operand_names(schema: LazyIrSchema) -> list[str]:
    """The at::Scalar arguments that become IR operands of the node."""
    return [
        arg.name
        for arg in schema.filtered_args(values=True, scalars=False)
        if str(arg.orig_type) in ("Scalar", "Scalar?")
    ]


def takes_scalar_operands(schema: LazyIrSchema) -> bool:
    return bool(scalar_operand_names(schema))


def without_parameter_names(decl: str) -> str:
    """A declaration with its parameter names dropped. torchgen checks our
    header line by line, but torch renames parameters between releases
    (_cdist_backward's `grad` became `grad_output`) and C++ does not care:
    the generated stubs pass arguments by position."""
    if "(" not in decl:
        return decl
    head, params = decl.split("(", 1)
    out: list[str] = []
    depth = 0
    token = ""
    for char in params:
        if char == "<":
            depth += 1
        elif char == ">":
            depth -= 1
        if char.isalnum() or char == "_":
            token += char
            continue
        if depth == 0 and char in ",)":
            token = ""  # the name of the parameter that ends here
        out.append(token + char)
        token = ""
    return head + "(" + "".join(out) + token


def validate_with_torch_header(extra_hdr: str) -> Callable[[str, list[str]], None]:
    """torchgen reads a single header for compute_shape_* declarations; ours
    only adds to torch's, so validate against both texts joined, comparing
    declarations without their parameter names."""
    original = gen_lazy_tensor.validate_shape_inference_header
    torch_hdr = (
        Path(sys.modules["torch"].__file__).parent
        / "include"
        / ("torch/csrc/lazy/core/shape_inference.h")
    )

    def validate(_hdr: str, expected: list[str]) -> None:
        text = torch_hdr.read_text() + "\n" + Path(extra_hdr).read_text()
        declared = {without_parameter_names(line) for line in text.split("\n")}
        missing = [decl for decl in expected if without_parameter_names(decl) not in declared]
        if not missing:
            return
        with tempfile.NamedTemporaryFile("w", suffix=".h", delete=False) as joined:
            joined.write(text)
        try:
            original(joined.name, missing)
        except Exception as error:
            raise RuntimeError(str(error).replace(joined.name, extra_hdr)) from None
        finally:
            os.unlink(joined.name)

    return validate


# The kernels with a check_arguments_<kernel> declared (main() fills it).
ARGUMENT_CHECKS: set[str] = set()
ARGUMENT_CHECK_DECL = re.compile(r"^void check_arguments_(\w+)\(", re.MULTILINE)

# The kernels whose torch::lazy::compute_shape_<kernel> is replaced by
# lazyfuse::compute_shape_<kernel>, declared in ops/shape_inference.h's
# lazyfuse namespace: torch's is wrong for arguments eager accepts.
SHAPE_OVERRIDES: set[str] = set()
SHAPE_OVERRIDE_DECL = re.compile(
    r"^std::vector<torch::lazy::Shape> compute_shape_(\w+)\(", re.MULTILINE
)


def shape_overrides(header_text: str) -> set[str]:
    """The compute_shape_* functions declared in the header's lazyfuse
    namespace."""
    start = header_text.find("namespace lazyfuse {")
    if start < 0:
        return set()
    end = header_text.find("}  // namespace lazyfuse", start)
    return set(SHAPE_OVERRIDE_DECL.findall(header_text[start : end if end >= 0 else None]))


DEFINITION_START = re.compile(r"^    \S.*\bLazyNativeFunctions::\w+\(")


def split_native_functions(path: Path, shards: int) -> None:
    """Splits LazyNativeFunctions.cpp into shards that share its prologue."""
    lines = path.read_text().splitlines(keepends=True)
    starts = [i for i, line in enumerate(lines) if DEFINITION_START.match(line)]
    if not starts:
        raise RuntimeError(f"no kernel definitions found in {path}")
    prologue = "".join(lines[: starts[0]])
    epilogue_at = max(i for i, line in enumerate(lines) if line.startswith("} // namespace"))
    epilogue = "".join(lines[epilogue_at:])
    bounds = starts + [epilogue_at]
    bodies = ["".join(lines[bounds[k] : bounds[k + 1]]) for k in range(len(starts))]
    per_shard = -(-len(bodies) // shards)
    for k in range(shards):
        chunk = bodies[k * per_shard : (k + 1) * per_shard]
        out = path.with_name(f"LazyNativeFunctions_{k}.cpp")
        out.write_text(prologue + "".join(chunk) + epilogue)
    path.unlink()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--yaml", required=True)
    parser.add_argument("--output-dir", required=True)
    parser.add_argument("--shape-inference-hdr", required=True)
    parser.add_argument("--argument-checks-hdr", required=True)
    parser.add_argument("--shards", type=int, default=4)
    options = parser.parse_args()
    ARGUMENT_CHECKS.update(
        ARGUMENT_CHECK_DECL.findall(Path(options.argument_checks_hdr).read_text())
    )
    SHAPE_OVERRIDES.update(shape_overrides(Path(options.shape_inference_hdr).read_text()))

    import torch  # noqa: F401  (validate_with_torch_header finds torch's header)

    functions = load_native_functions()
    TAGS.update(load_tags(functions))
    OUT_VARIANTS.update(load_out_variants(functions))
    gen_lazy_tensor.validate_shape_inference_header = validate_with_torch_header(
        options.shape_inference_hdr
    )
    os.makedirs(options.output_dir, exist_ok=True)
    gen_lazy_tensor.run_gen_lazy_tensor(
        aten_path=ATEN_PATH,
        source_yaml=options.yaml,
        output_dir=options.output_dir,
        dry_run=False,
        impl_path=None,
        node_base="lazyfuse::LazyFuseNode",
        node_base_hdr="ops/codegen_prelude.h",
        tensor_class="torch::lazy::LazyTensor",
        tensor_class_hdr="torch/csrc/lazy/core/tensor.h",
        shape_inference_hdr="ops/shape_inference.h",
        lazy_ir_generator=GenLazyFuseIR,
        native_func_definition_generator=GenLazyFuseNativeFuncDefinition,
        backend_name="LazyFuse",
    )
    output_dir = Path(options.output_dir)
    split_native_functions(output_dir / "LazyNativeFunctions.cpp", options.shards)
    # torchgen leaves unchanged files untouched; bump every output so the
    # build sees them newer than their inputs and does not rerun this step.
    for path in output_dir.iterdir():
        path.touch()


if __name__ == "__main__":
    main()
