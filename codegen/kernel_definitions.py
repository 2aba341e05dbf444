"""The lazy kernels' definitions (LazyNativeFunctions_<k>.cpp): torchgen's,
with lazyfuse's device checks, scalar operands, argument checks, shape
functions, and the checks a reused node runs again for new Scalar values."""

from __future__ import annotations

import re
from dataclasses import dataclass

from step_kinds import step_kind
from torchgen.api.lazy import LazyArgument, LazyIrSchema, tensorListValueT
from torchgen.api.types import BaseCType, DispatcherSignature, NativeSignature
from torchgen.dest.lazy_ir import (
    ComputeShapeSignature,
    GenLazyNativeFuncDefinition,
    gen_fallback_code,
)
from torchgen.model import BackendMetadata, NativeFunction

# Filled by gen_lazyfuse.main from the headers: the kernels with a
# check_arguments_<kernel> (ops/argument_checks.h) and with lazyfuse's own
# compute_shape_<kernel> (ops/shape_inference.h).
ARGUMENT_CHECKS: set[str] = set()
SHAPE_OVERRIDES: set[str] = set()


def is_tensor_list(arg: LazyArgument) -> bool:
    # torchgen tells a TensorList value from a Tensor value by object identity.
    return isinstance(arg.lazy_type, BaseCType) and arg.lazy_type.type is tensorListValueT


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
        built from the same operands and attributes, already checked, or is
        checked again by build_ir_node when its Scalar values changed."""
        code = COPY_ON_META.sub(_view_on_meta, super().shape_inference(func, schema))
        metadata = self.backend_index.get_kernel(func)
        if metadata is not None and metadata.kernel in SHAPE_OVERRIDES:
            code = code.replace(
                f"torch::lazy::compute_shape_{metadata.kernel}(",
                f"lazyfuse::compute_shape_{metadata.kernel}(",
                1,
            )
        check_call = self.argument_check_call(func)
        return code if check_call is None else f"{check_call};\n{code}"

    def argument_check_call(self, func: NativeFunction) -> str | None:
        metadata = self.backend_index.get_kernel(func)
        if metadata is None or metadata.kernel not in ARGUMENT_CHECKS:
            return None
        shape_call = ComputeShapeSignature(
            metadata.kernel, func, symint=metadata.supports_symint()
        ).shape_call
        return shape_call.replace("torch::lazy::compute_shape_", "lazyfuse::check_arguments_", 1)

    def build_ir_node(self, func: NativeFunction, schema: LazyIrSchema) -> str:
        """A reused node was checked, and its shape function (a meta kernel)
        run, for its Scalar operands' values then: a Scalar is an operand
        whose value IR reuse does not compare. New values run them again:
        clamp(min=2**31) of an int32 after clamp(min=3), leaky_relu_backward's
        refusal of a negative slope, pow's of a negative integer exponent.
        Ops whose shape functions read only a Scalar's type rerun their
        argument check alone."""
        code = super().build_ir_node(func, schema)
        scalars = scalar_operand_names(schema)
        if not scalars:
            return code
        if str(func.func.name.name.base) not in SHAPES_READ_SCALAR_TYPES_ONLY:
            checks = self.shape_inference(func, schema)
        elif (check_call := self.argument_check_call(func)) is not None:
            checks = f"{check_call};"
        else:
            return code
        reuse = "        if (!node) {"
        cache = "            CacheNode(node);\n"
        if reuse not in code or cache not in code:
            raise RuntimeError(f"{func.func.name}: torchgen's IR-building code changed shape")
        checked = "static_cast<const lazyfuse::LazyFuseNode&>(*node)"
        values = "{" + ", ".join(scalars) + "}"
        recheck = (
            f"        if (node && !{checked}.CheckedWithScalars({values})) {{\n"
            f"          {{\n{checks}\n          }}\n"
            f"          {checked}.KeepCheckedScalars({values});\n"
            "        }\n"
        )
        keep = f"{cache}            {checked}.KeepCheckedScalars({values});\n"
        return code.replace(reuse, recheck + reuse, 1).replace(cache, keep, 1)

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
