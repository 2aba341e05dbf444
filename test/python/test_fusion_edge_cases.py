"""Fused-kernel bugs found from outside, one test per class, each run with
ATen steps only and with fused kernels (emulated on a CPU):

- a merge of groups never changes a group's domain, and every value a merged
  group may store fits the shape it runs over (empty reductions with an
  epilogue crashed the code generator or reduced elements that do not exist);
- the emulator takes empty outputs;
- index width covers every index a kernel computes, stored or not;
- Python numbers and 0-dim tensors promote as in eager (wrapped numbers), and
  are rounded to a half or bfloat16 operand's dtype where eager rounds them;
- which zero a tie of +0 and -0 gives;
- ops whose value depends on the element's index (select_backward).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F

import lazyfuse


def run(fn: Callable[[torch.device], list[torch.Tensor]]) -> list[torch.Tensor]:
    out = fn(lazyfuse.lazy_device())
    lazyfuse.mark_step()
    return [t.cpu() for t in out]


def assert_same(fn: Callable[[torch.device], list[torch.Tensor]], exact: bool = True) -> None:
    """Lazy against eager on the backing device: fused kernels follow that
    device's eager where CPU and CUDA eager differ."""
    expected = [t.cpu() for t in fn(lazyfuse.config.backing_device())]
    got = run(fn)
    for g, e in zip(got, expected, strict=True):
        assert g.dtype == e.dtype and g.shape == e.shape
        if exact:
            assert (
                torch.equal(g, e)
                or torch.equal(g.isnan(), e.isnan())
                and torch.equal(g.nan_to_num(), e.nan_to_num())
            ), (g, e)
        else:
            torch.testing.assert_close(g, e, equal_nan=True)


# ---- merges keep domains: empty reductions with an epilogue ----

EMPTY_REDUCTIONS: dict[str, Callable[[torch.device], list[torch.Tensor]]] = {
    # rank shrinks: the code generator wrote past an empty vector (SIGSEGV)
    "full_sum_of_empty": lambda d: [
        torch.tensor(1.5).to(d).expand(()) + torch.zeros(0, device=d).sum()
    ],
    # same rank: the kernel reduced one element that does not exist
    "keepdim_sum_of_empty": lambda d: [
        torch.tensor(1.5).to(d).expand(1, 3)
        + torch.tensor(1.5).to(d).expand(0, 3).sum(0, keepdim=True)
    ],
    "mean_of_empty_rows": lambda d: [
        torch.ones(2, 1, device=d) * 2 + torch.ones(2, 0, device=d).sum(1, True)
    ],
    "empty_layer_norm": lambda d: list(
        torch.native_layer_norm(torch.ones(3, 0, device=d) * 2, [0], None, None, 1e-5)
    ),
    "var_of_empty_rows": lambda d: [torch.var(torch.ones(3, 0, device=d) + 1, 1)],
}


@pytest.mark.parametrize("case", sorted(EMPTY_REDUCTIONS))
def test_empty_reduction_with_an_epilogue(engine: str, case: str) -> None:
    assert_same(EMPTY_REDUCTIONS[case])


def test_backward_through_a_copy_into_an_empty_slice(engine: str) -> None:
    def grad(device: torch.device) -> list[torch.Tensor]:
        w = torch.ones(1, 1, device=device, requires_grad=True)
        t = torch.zeros(1, 1, device=device)
        t[1:].copy_(w)  # an empty slice
        ((t * 4).sum() + w.sum()).backward()
        return [w.grad]

    assert_same(grad)


def test_backward_through_a_copy_into_an_inner_empty_slice(engine: str) -> None:
    def grad(device: torch.device) -> list[torch.Tensor]:
        torch.manual_seed(0)
        v2 = torch.randn(2, 0, 5).to(device).requires_grad_()
        v3 = torch.zeros(2, 4, 5, device=device)
        v3[:, 1:-3, :].copy_(v2)
        (v3.sum() + v2.sum()).backward()
        return [v2.grad, v3.detach()]

    assert_same(grad)


MERGES: dict[str, Callable[[torch.device], list[torch.Tensor]]] = {
    # a group stored at a domain its values do not broadcast to read and
    # wrote out of bounds
    "pointwise_groups": lambda d: (lambda p, q, r: [(p * 2).view(2, 3) + (r + q * 3), q * 3])(
        *(
            torch.arange(n, dtype=torch.float32).reshape(s).to(d)
            for n, s in ((6, (3, 2)), (2, (2, 1)), (6, (2, 3)))
        )
    ),
    "into_a_reduction_epilogue": lambda d: (
        lambda x, q, r: [(r + q * 3).view(3, 2) + x.sum(2), q * 3]
    )(
        *(
            torch.arange(n, dtype=torch.float32).reshape(s).to(d)
            for n, s in ((30, (3, 2, 5)), (2, (2, 1)), (6, (2, 3)))
        )
    ),
    # the check that a merge keeps domains must not refuse this one
    "reshaped_and_broadcast": lambda d: (lambda p, q: [(p * 2).view(2, 2) + q * 3])(
        torch.arange(4.0).to(d), torch.tensor([[1.0], [2.0]]).to(d)
    ),
}


@pytest.mark.parametrize("case", sorted(MERGES))
def test_merged_groups_store_their_values_where_they_fit(engine: str, case: str) -> None:
    assert_same(MERGES[case], exact=False)


# ---- empty outputs under emulation ----


def test_a_kernel_with_an_empty_output(engine: str) -> None:
    def fn(device: torch.device) -> list[torch.Tensor]:
        a = torch.arange(12.0).reshape(3, 4).to(device)
        b = a[:, 2:2] * 2
        return [b, b.sum(1)]

    assert_same(fn)


# ---- index width ----


def test_a_slice_of_a_never_stored_value_past_2_to_the_31(engine: str) -> None:
    """(u * v) has 2^31 + 2^16 elements; its slice reads past 2^31. Fused
    kernels never store it; the ATen steps do, as bytes (2 GiB). Each slice
    reads a product of its own: a value two kernels read is stored."""
    n, m = 1 << 16, (1 << 15) + 1
    torch.manual_seed(0)
    u = torch.randint(-3, 4, (n, 1), dtype=torch.int8)
    v = torch.randint(-3, 4, (m,), dtype=torch.int8)
    start = (1 << 31) + 5
    index = torch.arange(start, start + 4096)
    expected = u[index // m, 0] * v[index % m]
    d = lazyfuse.lazy_device()
    y = (u.to(d) * v.to(d)).view(-1)[start : start + 4] + 0
    z = (u.to(d) * v.to(d)).view(-1)[start : start + 4096].to(torch.float32).sum()
    with lazyfuse.metrics.track_memory() as reading:
        lazyfuse.mark_step()
    assert torch.equal(y.cpu(), expected[:4])
    assert z.item() == expected.float().sum().item()
    if engine != "aten":
        assert reading.peak_bytes < 2**20, reading.describe()


@pytest.mark.xfail(
    strict=True,
    reason="a pointwise value two kernels read is stored whole, even where each reads a "
    "slice of it: the planner never recomputes a cheap producer in its readers",
)
def test_a_product_two_kernels_slice_is_not_stored_whole(engine: str) -> None:
    if engine == "aten":
        pytest.skip("ATen steps store every value by design")
    u = torch.randint(-3, 4, (2048, 1), dtype=torch.int8)
    v = torch.randint(-3, 4, (2048,), dtype=torch.int8)
    flat = (u.to(lazyfuse.lazy_device()) * v.to(lazyfuse.lazy_device())).view(-1)
    y = flat[5:9] + 0
    z = flat[100:4196].to(torch.float32).sum()
    del flat
    with lazyfuse.metrics.track_memory() as reading:
        lazyfuse.mark_step()
    expected = (u * v).view(-1)
    assert torch.equal(y.cpu(), expected[5:9])
    assert z.item() == expected[100:4196].float().sum().item()
    assert reading.peak_bytes < 2**20, reading.describe()


def test_float_broadcast_past_2_to_the_31_in_a_fused_kernel(engine: str) -> None:
    if engine == "aten":
        pytest.skip("the ATen steps would store the 2^32-element float product (16 GiB)")
    n = 1 << 16
    torch.manual_seed(0)
    u, v = torch.randn(n, 1), torch.randn(n)
    start = (1 << 31) + 5
    index = torch.arange(start, start + 4096)
    expected = u[index // n, 0] * v[index % n]
    d = lazyfuse.lazy_device()
    y = (u.to(d) * v.to(d)).view(-1)[start : start + 4] + 0.0
    z = (u.to(d) * v.to(d)).view(-1)[start : start + 4096].sum()
    lazyfuse.mark_step()
    torch.testing.assert_close(y.cpu(), expected[:4])
    torch.testing.assert_close(z.cpu(), expected.sum(), rtol=1e-5, atol=1e-4)


# ---- scalars: promotion and rounding ----

HALF_VALUES = [0.09998, 0.1, 0.5, 0.8999, 0.9, 1.1015625, 1.1, 2.1]
SCALAR_CASES: dict[str, Callable[[torch.device], list[torch.Tensor]]] = {
    "half_eq_number": lambda d: [torch.tensor(HALF_VALUES, dtype=torch.half).to(d) == 0.1],
    "half_lt_number": lambda d: [torch.tensor(HALF_VALUES, dtype=torch.half).to(d) < 0.9],
    "bf16_le_number": lambda d: [torch.tensor(HALF_VALUES, dtype=torch.bfloat16).to(d) <= 1.1],
    "half_ge_float_tensor": lambda d: [
        torch.tensor(HALF_VALUES, dtype=torch.half).to(d) >= torch.tensor(0.9).to(d)
    ],
    "half_ne_cpu_float64": lambda d: [
        torch.tensor(HALF_VALUES, dtype=torch.half).to(d) != torch.tensor(0.1, dtype=torch.float64)
    ],
    "int64_gt_large_number": lambda d: [
        torch.tensor([1_700_000_000_001, 1_699_999_999_999]).to(d) > 1.7e12
    ],
    "int32_eq_number": lambda d: [torch.tensor([16777217], dtype=torch.int32).to(d) == 16777216.0],
    "int64_gt_float64_tensor": lambda d: [
        torch.tensor([1_700_000_000_001]).to(d) > torch.tensor(1.7e12, dtype=torch.float64)
    ],
    "int_plus_number": lambda d: [torch.tensor([3, 1_700_000_000_001]).to(d) + 2.5],
    "uint8_lt_number": lambda d: [torch.tensor([0, 7, 200], dtype=torch.uint8).to(d) < 7.5],
    "bool_plus_int": lambda d: [torch.tensor([True, False]).to(d) + 3],
    # an int tensor meeting a half one is cast to half first: 2049 is 2048
    "half_plus_int_tensor": lambda d: [
        torch.tensor([0.5, 1.0, 0.5], dtype=torch.half).to(d)
        + torch.tensor([2049, 4097, -2049], dtype=torch.int32).to(d)
    ],
    "half_where_int_tensor": lambda d: [
        torch.where(
            torch.tensor([True, False]).to(d),
            torch.tensor([0.5, 1.5], dtype=torch.half).to(d),
            torch.tensor([3, 2049], dtype=torch.int32).to(d),
        )
    ],
    # CPU eager rounds an added number to half (2^53 is inf there); CUDA
    # eager adds it at full precision
    "half_plus_huge_number": lambda d: [
        torch.tensor([1.0, float("inf"), -1.0], dtype=torch.half).to(d) - 2.0**53
    ],
    "bf16_minus_number": lambda d: [torch.tensor(HALF_VALUES, dtype=torch.bfloat16).to(d) - 1.1],
    "half_times_number": lambda d: [torch.tensor(HALF_VALUES, dtype=torch.half).to(d) * 0.1],
}


@pytest.mark.parametrize("case", sorted(SCALAR_CASES))
def test_numbers_promote_and_round_as_in_eager(engine: str, case: str) -> None:
    assert_same(SCALAR_CASES[case])


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32], ids=str)
def test_pow_roots_at_infinities_and_signed_zeros(engine: str, dtype: torch.dtype) -> None:
    """CPU eager's half pow(x, 0.5) is pow() (inf at -inf), CUDA's a root."""
    x = torch.tensor([-float("inf"), -0.0, 0.0, 4.0, float("inf"), float("nan")], dtype=dtype)
    assert_same(lambda d: [x.to(d).pow(0.5), x.to(d).pow(-0.5)])


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_pow_rounds_its_exponent_to_the_base_dtype(engine: str, dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    x = (torch.rand(4096) * 3).to(dtype)
    assert_same(lambda d: [x.to(d).pow(2.1), x.to(d).pow(0.3)])


# ---- ops whose value depends on the element's index ----

SPECIALS = torch.tensor([1.5, float("nan"), float("inf"), -float("inf"), -0.0, 0.0, 2.0, -3.0])


def _select_grad(g: torch.Tensor, dim: int, index: int) -> torch.Tensor:
    sizes = list(g.shape)
    sizes.insert(dim, 3)
    return torch.ops.aten.select_backward(g * 2, sizes, dim, index)


INDEX_OPS: dict[str, Callable[[torch.device], list[torch.Tensor]]] = {
    # NaN and inf in the gradient stay where it was selected, zeros elsewhere
    "select_backward_dim0": lambda d: [_select_grad(SPECIALS.to(d).view(2, 4), 0, 1) + 1],
    "select_backward_negative_index": lambda d: [_select_grad(SPECIALS.to(d).view(2, 4), 0, -1)],
    "select_backward_half": lambda d: [_select_grad(SPECIALS.to(d).half().view(4, 2), 0, 2)],
    # other dims stay an ATen call, and meet fused work either side
    "select_backward_dim1": lambda d: [_select_grad(SPECIALS.to(d).view(2, 4), 1, 0).sin()],
    "three_selects_summed": lambda d: [
        sum(_select_grad(SPECIALS.to(d).view(2, 4) * k, 0, k) for k in range(3))
    ],
    "isneginf_isposinf": lambda d: [
        torch.isneginf(SPECIALS.to(d) * 2),
        torch.isposinf(SPECIALS.to(d).half() - 1),
        torch.isneginf(torch.arange(-3, 3, device=d)),
    ],
}


@pytest.mark.parametrize("case", sorted(INDEX_OPS))
def test_ops_that_read_the_elements_index(engine: str, case: str) -> None:
    assert_same(INDEX_OPS[case])


# ---- signed zeros ----

ZEROS = torch.tensor([-0.0, 0.0, -0.0, 0.0])
OTHER = torch.tensor([0.0, -0.0, -0.0, 0.0])
SIGNED_ZERO_OPS: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "relu": lambda a, b: torch.relu(a),
    "maximum": torch.maximum,
    "minimum": torch.minimum,
    "clamp_min": lambda a, b: a.clamp(min=0.0),
    "clamp_max": lambda a, b: a.clamp(max=0.0),
    "hardtanh": lambda a, b: F.hardtanh(a, 0.0, 1.0),
    "amax_pairs": lambda a, b: torch.stack([a, b]).amax(0),
    "amin_pairs": lambda a, b: torch.stack([a, b]).amin(0),
    "amax_row": lambda a, b: a.amax().reshape(1),
    "amax_row_pos_first": lambda a, b: torch.stack([b[:2], a[:2]], 1).amax(1),
}


@pytest.mark.parametrize("op", sorted(SIGNED_ZERO_OPS))
def test_which_zero_a_tie_gives(engine: str, op: str) -> None:
    """Eager on the CPU (which the emulated kernels follow) keeps the first of
    two equal zeros; on a GPU, CUDA eager's maximum and relu are fmaxf, and
    its amax and amin keep the later one (seen on an H200)."""
    fn = SIGNED_ZERO_OPS[op]
    device = lazyfuse.config.backing_device()
    expected = fn(ZEROS.to(device), OTHER.to(device)).cpu()
    got = run(lambda d: [fn(ZEROS.to(d), OTHER.to(d))])[0]
    assert torch.signbit(got).tolist() == torch.signbit(expected).tolist()
