"""out= tensors of another dtype than the op's result, as eager treats them.

Torch's functionalization turns an out= call into its functional op and a
copy into out, which casts. Eager does not: a reduction into an out tensor of
another dtype computes in that dtype (the sum of floats into int32 sums the
truncated elements), and most ops refuse an out dtype they cannot write. So
each call below must give eager's values, or eager's error class with a
message naming the op; and an out= call whose dtype matches stays in the
graph."""

from __future__ import annotations

import warnings
from collections.abc import Callable

import pytest
import torch

import lazyfuse

DEV = lazyfuse.lazy_device()


def _floats() -> torch.Tensor:
    return torch.tensor(
        [[1.7, -2.6, 3.5, 0.4], [-0.9, 2.2, -3.8, 1.1], [0.6, 0.7, -0.2, 2.9]], dtype=torch.float32
    )


def _ints() -> torch.Tensor:
    return torch.tensor([[7, -3, 2, 5], [-8, 4, 1, -6], [3, 3, -1, 9]], dtype=torch.int32)


def _index() -> torch.Tensor:
    return torch.tensor([0, 2])


# (out shape, the call writing out): each runs with every dtype in OUT_DTYPES.
CALLS: dict[str, tuple[tuple[int, ...], Callable[..., object]]] = {
    "sum": ((3,), lambda d, out: torch.sum(_floats().to(d), 1, out=out)),
    "sum of ints": ((3,), lambda d, out: torch.sum(_ints().to(d), 1, out=out)),
    "prod": ((3,), lambda d, out: torch.prod(_floats().to(d), 1, out=out)),
    "mean": ((3,), lambda d, out: torch.mean(_floats().to(d), 1, out=out)),
    "nansum": ((3,), lambda d, out: torch.nansum(_floats().to(d), 1, out=out)),
    "var": ((3,), lambda d, out: torch.var(_floats().to(d), 1, out=out)),
    "std": ((3,), lambda d, out: torch.std(_floats().to(d), 1, out=out)),
    "logsumexp": ((3,), lambda d, out: torch.logsumexp(_floats().to(d), 1, out=out)),
    "cumsum": ((3, 4), lambda d, out: torch.cumsum(_floats().to(d), 1, out=out)),
    "cumprod of ints": ((3, 4), lambda d, out: torch.cumprod(_ints().to(d), 1, out=out)),
    "amax": ((3,), lambda d, out: torch.amax(_floats().to(d), 1, out=out)),
    "argmax": ((3,), lambda d, out: torch.argmax(_floats().to(d), 1, out=out)),
    "any": ((3,), lambda d, out: torch.any(_floats().to(d) > 0, 1, out=out)),
    "add": ((3, 4), lambda d, out: torch.add(_floats().to(d), 1, out=out)),
    "add of ints": ((3, 4), lambda d, out: torch.add(_ints().to(d), 2, out=out)),
    "div of ints": ((3, 4), lambda d, out: torch.div(_ints().to(d), 3, out=out)),
    "floor division of ints": (
        (3, 4),
        lambda d, out: torch.div(_ints().to(d), 3, rounding_mode="floor", out=out),
    ),
    "exp": ((3, 4), lambda d, out: torch.exp(_floats().to(d), out=out)),
    "gt": ((3, 4), lambda d, out: torch.gt(_floats().to(d), 0, out=out)),
    "clamp": ((3, 4), lambda d, out: torch.clamp(_floats().to(d), -1, 1, out=out)),
    "mm": ((3, 3), lambda d, out: torch.mm(_floats().to(d), _floats().t().to(d), out=out)),
    "index_select": (
        (3, 2),
        lambda d, out: torch.index_select(_floats().to(d), 1, _index().to(d), out=out),
    ),
    "cat": ((6, 4), lambda d, out: torch.cat([_floats().to(d), _floats().to(d)], out=out)),
    # No meta kernel tells these result dtypes (a shape that needs the values,
    # or none at all): the lazy call's own results decide.
    "masked_select": (
        (0,),
        lambda d, out: torch.masked_select(_floats().to(d), (_floats() > 0).to(d), out=out),
    ),
    "nonzero": ((0, 2), lambda d, out: torch.nonzero(_floats().to(d) > 0, out=out)),
    "histc": ((4,), lambda d, out: torch.histc(_floats().to(d), 4, out=out)),
    "histogram": (
        (4,),
        lambda d, out: torch.histogram(
            _floats().to(d), 4, out=(out, torch.empty(0, dtype=torch.float32).to(d))
        ),
    ),
    "max values": (
        (3,),
        lambda d, out: torch.max(
            _floats().to(d), 1, out=(out, torch.empty(0, dtype=torch.long).to(d))
        ),
    ),
}
OUT_DTYPES = [torch.int32, torch.float16, torch.float64, torch.bool]


def _call(device: torch.device | str, name: str, dtype: torch.dtype) -> torch.Tensor | Exception:
    shape, call = CALLS[name]
    out = torch.full(shape, 5, dtype=dtype).to(device)
    try:
        call(device, out)
    except Exception as error:  # noqa: BLE001 - compared with eager's
        return error
    return out.cpu()


@pytest.mark.parametrize("dtype", OUT_DTYPES, ids=str)
@pytest.mark.parametrize("name", list(CALLS))
def test_out_of_another_dtype_gives_eager_values_or_error(name: str, dtype: torch.dtype) -> None:
    expected = _call("cpu", name, dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the fallback warning
        got = _call(DEV, name, dtype)
    if isinstance(expected, Exception):
        assert isinstance(got, Exception), f"eager refuses ({expected}); lazy wrote {got}"
        assert type(got) is type(expected)
        assert "aten::" in str(got) and str(expected).splitlines()[0] in str(got)
    else:
        assert isinstance(got, torch.Tensor), f"eager gave {expected}; lazy raised {got}"
        assert got.dtype == expected.dtype and got.shape == expected.shape
        torch.testing.assert_close(got, expected, rtol=0, atol=0)


def test_a_refused_out_keeps_its_value_and_the_process_goes_on() -> None:
    x = _floats().to(DEV)
    out = torch.full((3, 3), 7, dtype=torch.int32).to(DEV)
    with pytest.raises(RuntimeError, match=r"aten::mm\.out: Expected out tensor to have dtype"):
        torch.mm(x, x.t(), out=out)
    assert torch.equal(out.cpu(), torch.full((3, 3), 7, dtype=torch.int32))
    assert torch.equal((x * 2).cpu(), _floats() * 2)


def test_a_reduction_into_a_view_of_another_dtype_writes_the_view() -> None:
    expected = torch.zeros(3, 2, dtype=torch.int32)
    torch.sum(_floats(), 1, out=expected[:, 1])
    buffer = torch.zeros(3, 2, dtype=torch.int32).to(DEV)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.sum(_floats().to(DEV), 1, out=buffer[:, 1])
    assert torch.equal(buffer.cpu(), expected)


def test_a_resized_out_of_another_dtype_takes_eager_shape() -> None:
    expected = torch.empty(0, dtype=torch.float64)
    torch.cumsum(_floats(), 0, out=expected)
    out = torch.empty(0, dtype=torch.float64).to(DEV)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.cumsum(_floats().to(DEV), 0, out=out)
    torch.testing.assert_close(out.cpu(), expected, rtol=0, atol=0)


def test_an_out_of_the_result_dtype_stays_in_the_graph() -> None:
    x = _floats().to(DEV)
    out = torch.empty(3, 4).to(DEV)
    total = torch.empty(3).to(DEV)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a fallback would warn
        torch.add(x, 1, out=out)
        torch.sum(out, 1, out=total)
    assert lazyfuse.metrics.counter_value("aten::add.out") in (None, 0)
    assert lazyfuse.metrics.counter_value("aten::sum.IntList_out") in (None, 0)
    torch.testing.assert_close(total.cpu(), (_floats() + 1).sum(1))


def test_an_out_of_another_dtype_is_counted_as_a_fallback() -> None:
    before = lazyfuse.metrics.counter_value("aten::sum.IntList_out") or 0
    out = torch.empty(3, dtype=torch.int32).to(DEV)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # warned once per op and process
        torch.sum(_floats().to(DEV), 1, out=out)
    assert (lazyfuse.metrics.counter_value("aten::sum.IntList_out") or 0) == before + 1


# out= ops whose path through functionalization loses the write or fails:
# linear's functional variant is a composite, which functionalization would
# run below itself on bare lazy tensors; linalg_matrix_rank's composite
# returns a new tensor instead of writing its out tensor.
SAME_DTYPE_CALLS: dict[str, tuple[tuple[int, ...], torch.dtype, Callable[..., object]]] = {
    "linear, 3-d input": (
        (2, 3, 5),
        torch.float32,
        lambda d, out: torch._C._nn.linear(
            _floats().reshape(2, 3, 2).repeat(1, 1, 2).to(d),
            _floats()[:, :4].repeat(2, 1)[:5].to(d),
            torch.arange(5.0).to(d),
            out=out,
        ),
    ),
    "linear, 2-d input": (
        (3, 3),
        torch.float32,
        lambda d, out: torch._C._nn.linear(_floats().to(d), _floats().to(d), out=out),
    ),
    "matrix_rank": (
        (),
        torch.int64,
        lambda d, out: torch.linalg.matrix_rank(_floats()[:, :3].to(d), out=out),
    ),
    "matrix_rank with tol": (
        (),
        torch.int64,
        lambda d, out: torch.linalg.matrix_rank(_floats()[:, :3].to(d), tol=1e-3, out=out),
    ),
    "matmul": (
        (3, 3),
        torch.float32,
        lambda d, out: torch.matmul(_floats().to(d), _floats().t().to(d), out=out),
    ),
    "upsample": (
        (1, 3, 8, 8),
        torch.float32,
        lambda d, out: torch.ops.aten.upsample_bilinear2d.vec_out(
            _floats()[None, :, None].repeat(1, 1, 4, 1).to(d), None, False, [2.0, 2.0], out=out
        ),
    ),
}


@pytest.mark.parametrize("name", list(SAME_DTYPE_CALLS))
def test_out_of_the_result_dtype_is_written_and_returned(name: str) -> None:
    shape, dtype, call = SAME_DTYPE_CALLS[name]
    expected = torch.zeros(shape, dtype=dtype)
    assert call("cpu", expected) is expected
    out = torch.zeros(shape, dtype=dtype).to(DEV)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # upsample_nearest2d's fallback
        returned = call(DEV, out)
    assert returned is out
    torch.testing.assert_close(out.cpu(), expected)


def test_linear_out_with_inputs_needing_grad_raises_as_eager() -> None:
    weight = torch.randn(3, 4, requires_grad=True)
    with pytest.raises(RuntimeError, match="don't support automatic differentiation") as eager:
        torch._C._nn.linear(_floats(), weight, out=torch.empty(3, 3))
    lazy_weight = weight.detach().to(DEV).requires_grad_()
    with pytest.raises(RuntimeError) as lazy:
        torch._C._nn.linear(_floats().to(DEV), lazy_weight, out=torch.empty(3, 3).to(DEV))
    assert type(lazy.value) is type(eager.value)
    assert "don't support automatic differentiation" in str(lazy.value)


def _batch_norm_arguments(d: torch.device | str) -> list[torch.Tensor]:
    torch.manual_seed(0)
    x = torch.randn(4, 3, 5).to(d)
    return [x, torch.rand(3).to(d), torch.rand(3).to(d), torch.zeros(3).to(d), torch.ones(3).to(d)]


def _native_batch_norm_legit_out(d: torch.device | str) -> list[torch.Tensor]:
    x, weight, bias, mean, var = _batch_norm_arguments(d)
    outs = [torch.empty(4, 3, 5).to(d), torch.empty(3).to(d), torch.empty(3).to(d)]
    returned = torch.ops.aten._native_batch_norm_legit.out(
        x,
        weight,
        bias,
        mean,
        var,
        True,
        0.1,
        1e-5,
        out=outs[0],
        save_mean=outs[1],
        save_invstd=outs[2],
    )
    assert all(r is o for r, o in zip(returned, outs, strict=True))
    return [*outs, mean, var]


def _batch_norm_with_update_out(d: torch.device | str) -> list[torch.Tensor]:
    x, weight, bias, mean, var = _batch_norm_arguments(d)
    outs = [torch.empty(4, 3, 5).to(d), torch.empty(3).to(d), torch.empty(3).to(d)]
    reserve = torch.empty(0, dtype=torch.uint8).to(d)
    returned = torch.ops.aten._batch_norm_with_update.out(
        x,
        weight,
        bias,
        mean,
        var,
        0.1,
        1e-5,
        out=outs[0],
        save_mean=outs[1],
        save_invstd=outs[2],
        reserve=reserve,
    )
    assert all(r is o for r, o in zip(returned, [*outs, reserve], strict=True))
    return [*outs, mean, var]


def _rrelu_with_noise_out(d: torch.device | str) -> list[torch.Tensor]:
    noise = torch.zeros(12).to(d)
    out = torch.empty(12).to(d)
    assert (
        torch.ops.aten.rrelu_with_noise.out(
            _floats().view(-1).to(d) - 4, noise, 0.1, 0.3, False, out=out
        )
        is out
    )
    return [out, noise]


def _amp_update_scale_out(d: torch.device | str) -> list[torch.Tensor]:
    tracker = torch.tensor(1, dtype=torch.int32).to(d)
    out = torch.empty(()).to(d)
    found_inf = torch.tensor(0.0).to(d)
    assert (
        torch.ops.aten._amp_update_scale.out(
            torch.tensor(4.0).to(d), tracker, found_inf, 2.0, 0.5, 2, out=out
        )
        is out
    )
    return [out, tracker]


def _amp_unscale_out(d: torch.device | str) -> list[torch.Tensor]:
    found_inf = torch.tensor(0.0).to(d)
    outs = [torch.empty(2).to(d)]
    grads = [torch.tensor([1.0, float("inf")]).to(d)]
    torch.ops.aten._amp_foreach_non_finite_check_and_unscale.out(
        grads, found_inf, torch.tensor(0.5).to(d), out=outs
    )
    return [*outs, found_inf, *grads]


# out= ops that also write arguments besides their out tensors: torch's
# functionalization writes their functional variants' results into the wrong
# tensors, so they run eagerly.
WRITING_OTHER_ARGUMENTS = {
    "_native_batch_norm_legit.out": _native_batch_norm_legit_out,
    "_batch_norm_with_update.out": _batch_norm_with_update_out,
    "rrelu_with_noise.out": _rrelu_with_noise_out,
    "_amp_update_scale.out": _amp_update_scale_out,
    "_amp_foreach_non_finite_check_and_unscale.out": _amp_unscale_out,
}


@pytest.mark.parametrize("name", list(WRITING_OTHER_ARGUMENTS))
def test_an_out_op_writing_other_arguments_writes_each_as_eager(name: str) -> None:
    call = WRITING_OTHER_ARGUMENTS[name]
    expected = call("cpu")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the eager run's fallback warning
        written = call(DEV)
    for got, want in zip(written, expected, strict=True):
        torch.testing.assert_close(got.cpu(), want)
