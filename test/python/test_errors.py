"""Misuse ends in a clear Python exception, and the device stays usable."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings

import pytest
import torch

import lazyfuse


def eager_error(fn, *args) -> str:  # noqa: ANN001
    with pytest.raises(RuntimeError) as info:
        fn(*args)
    return str(info.value).splitlines()[0]


def assert_still_usable(lazy: torch.device, survivor: torch.Tensor, expected: torch.Tensor) -> None:
    lazyfuse.mark_step()
    torch.testing.assert_close(survivor.cpu(), expected)
    fresh = torch.arange(4.0).to(lazy) * 3
    lazyfuse.mark_step()
    torch.testing.assert_close(fresh.cpu(), torch.arange(4.0) * 3)


def test_shape_mismatch_raises_at_the_call_site_with_eagers_message(lazy: torch.device) -> None:
    a, b = torch.randn(2, 3), torch.randn(4, 5)
    survivor = torch.ones(3).to(lazy) + 1
    expected = eager_error(torch.mm, a, b)
    with pytest.raises(RuntimeError) as info:
        torch.mm(a.to(lazy), b.to(lazy))
    assert expected in str(info.value)
    assert_still_usable(lazy, survivor, torch.full((3,), 2.0))


def test_broadcast_mismatch_raises_with_eagers_message(lazy: torch.device) -> None:
    a, b = torch.randn(2, 3), torch.randn(4)
    expected = eager_error(torch.add, a, b)
    with pytest.raises(RuntimeError, match="must match the size"):
        torch.add(a.to(lazy), b.to(lazy))
    assert "must match the size" in expected


def test_dtype_mismatch_raises_with_eagers_message(lazy: torch.device) -> None:
    a, b = torch.randn(2, 3), torch.randn(3, 2, dtype=torch.float64)
    expected = eager_error(torch.mm, a, b)
    with pytest.raises(RuntimeError) as info:
        torch.mm(a.to(lazy), b.to(lazy))
    assert expected in str(info.value)


def test_mixing_lazy_and_cpu_tensors_is_a_clear_error(lazy: torch.device) -> None:
    survivor = torch.ones(3).to(lazy) * 5
    with pytest.raises(RuntimeError, match=r"same device.*lazy:0 and cpu.*aten::add.Tensor"):
        torch.randn(3).to(lazy) + torch.randn(3)
    with pytest.raises(RuntimeError, match=r"same device.*aten::mm"):
        torch.mm(torch.randn(2, 2).to(lazy), torch.randn(2, 2))
    # A CPU scalar tensor mixes freely, as with eager CUDA tensors.
    mixed = torch.ones(3).to(lazy) * torch.tensor(2.0)
    torch.testing.assert_close(mixed.cpu(), torch.full((3,), 2.0))
    assert_still_usable(lazy, survivor, torch.full((3,), 5.0))


def test_in_place_on_a_leaf_that_requires_grad(lazy: torch.device) -> None:
    leaf = torch.randn(3).to(lazy).requires_grad_()
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        leaf.add_(1)
    assert_still_usable(lazy, leaf.detach() * 1, leaf.detach().cpu())


def test_unsupported_op_falls_back_counted_and_warned_once(lazy: torch.device) -> None:
    # histc has no lowering (its bins' shape is fixed, but no rule lowers it).
    x = torch.randn(50)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first = torch.histc(x.to(lazy), bins=4)
        second = torch.histc(x.to(lazy) * 2, bins=4)
    torch.testing.assert_close(first.cpu(), torch.histc(x, bins=4))
    torch.testing.assert_close(second.cpu(), torch.histc(x * 2, bins=4))
    assert lazyfuse.metrics.counter_value("aten::histc") == 2
    messages = [str(w.message) for w in caught if "aten::histc" in str(w.message)]
    assert len(messages) <= 1  # torch's warning filter may already have shown it
    assert "aten::histc" in lazyfuse.metrics.report()


def test_view_that_cannot_fall_back_names_the_op(lazy: torch.device) -> None:
    x = torch.randn(4, 4).to(lazy)
    # Without its functional wrapper a lazy tensor reaches view ops directly.
    raw = torch._from_functional_tensor(x)
    with pytest.raises(RuntimeError, match=r"aten::\w+.*view of its input"):
        torch.ops.aten.as_strided(raw, (2,), (1,))
    assert_still_usable(lazy, x * 1, x.cpu())


def run_python(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=300,
    )


def test_ts_backend_already_initialised_is_refused() -> None:
    result = run_python(
        "import torch._lazy.ts_backend as ts; ts.init()\n"
        "try:\n"
        "    import lazyfuse\n"
        "except RuntimeError as e:\n"
        "    print('REFUSED', e)\n"
    )
    assert "REFUSED" in result.stdout, result.stderr
    assert "torch._lazy.ts_backend" in result.stdout


@pytest.mark.parametrize(
    ("choice", "message"),
    [
        ("tpu", "LAZYFUSE_DEVICE must be 'cpu', 'cuda' or 'cuda:N', got 'tpu'"),
        ("cuda:x", "LAZYFUSE_DEVICE=cuda:x does not name a CUDA device"),
        ("cuda:-1", "LAZYFUSE_DEVICE=cuda:-1 does not name a CUDA device"),
        ("cuda:999", "this machine has"),
    ],
)
def test_bad_backing_device_is_refused(choice: str, message: str) -> None:
    result = run_python("import lazyfuse", LAZYFUSE_DEVICE=choice)
    assert result.returncode != 0
    if message == "this machine has" and not torch.cuda.is_available():
        message = "this torch build or machine has no CUDA device"
    assert message in result.stderr


@pytest.mark.parametrize(
    ("name", "op", "counter"),
    [
        ("nonzero", torch.nonzero, "aten::nonzero"),
        ("masked_select", lambda x: torch.masked_select(x, x > 0), "aten::masked_select"),
        ("unique", torch.unique, "aten::_unique2"),
    ],
)
def test_data_dependent_shapes_sync_and_are_counted(lazy: torch.device, name, op, counter) -> None:
    # Their output shape depends on values, so they run eagerly after a sync,
    # and the sync is counted under the op's name.
    x = torch.tensor([0.0, 1.5, 0.0, -2.0, 3.0])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = op(x.to(lazy))
    assert result.device.type == "lazy"
    torch.testing.assert_close(result.cpu(), op(x))
    assert lazyfuse.metrics.counter_value(counter) == 1


def test_out_of_memory_names_the_op_and_loses_nothing(lazy: torch.device, engine: str) -> None:
    # Fused kernels write `survivor` over its donated input before the huge step
    # fails, so the graph is finished later: it must not redo the step whose
    # result the user has dropped.
    survivor = torch.ones(3).to(lazy) * 4
    # 4 TiB: the allocation fails at once, without touching real memory.
    huge = torch.zeros(1).to(lazy).expand(2**40) * 2
    # The step is an ATen call, or a fused kernel named after the ATen ops it runs.
    with pytest.raises(
        RuntimeError, match=r"lazyfuse: (lazyfuse::fused\()?aten::\w+.*out of memory"
    ) as raised:
        lazyfuse.mark_step(wait=True)
    # The cause stays readable: no C++ backtrace in the middle of the message.
    assert "frame #" not in str(raised.value)
    del huge
    lazyfuse.mark_step()
    torch.testing.assert_close(survivor.cpu(), torch.full((3,), 4.0))
    fresh = torch.arange(3.0).to(lazy) + 1
    lazyfuse.mark_step()
    torch.testing.assert_close(fresh.cpu(), torch.tensor([1.0, 2.0, 3.0]))


LAYOUTS = {
    "to_sparse": (lambda t: t.to_sparse(), "aten::_to_sparse returns a tensor of layout Sparse"),
    "to_sparse_csr": (
        lambda t: t.reshape(1, 3).to_sparse_csr(),
        "aten::_to_sparse_csr returns a tensor of layout SparseCsr",
    ),
    "sparse_coo_tensor": (
        lambda t: torch.sparse_coo_tensor(
            torch.tensor([[0, 1]]), torch.ones(2), (3,), device=t.device
        ),
        "aten::_sparse_coo_tensor_with_dims_and_tensors: Sparse tensors",
    ),
    "sparse_cpu_to_lazy": (lambda t: torch.ones(3).to_sparse().to(t.device), "Sparse tensors"),
    "sparse_mm": (
        lambda t: torch.sparse.mm(torch.ones(2, 3).to_sparse(), t.reshape(3, 1)),
        "aten::addmm: Sparse tensors",
    ),
    "quantize": (
        lambda t: torch.quantize_per_tensor(t, 0.1, 0, torch.qint8),
        "returns a quantized tensor",
    ),
    "nested_to_lazy": (
        lambda t: torch.nested.nested_tensor([torch.ones(2), torch.ones(3)]).to(t.device),
        "aten::_to_copy: Nested tensors",
    ),
}


@pytest.mark.parametrize("case", sorted(LAYOUTS))
def test_sparse_quantized_and_nested_tensors_are_refused_naming_the_op(
    lazy: torch.device, case: str
) -> None:
    make, message = LAYOUTS[case]
    survivor = torch.ones(3).to(lazy) + 1
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # fallback and deprecation warnings
        with pytest.raises(
            RuntimeError, match=f"lazyfuse: .*{message}.*not supported on the lazy device"
        ):
            make(torch.arange(3.0).to(lazy))
    assert_still_usable(lazy, survivor, torch.full((3,), 2.0))


def test_sparse_gradients_are_refused_naming_the_op(lazy: torch.device) -> None:
    weight = torch.randn(5, 3).to(lazy).requires_grad_()
    out = torch.nn.functional.embedding(torch.tensor([1, 2]).to(lazy), weight, sparse=True)
    with pytest.raises(RuntimeError, match="Sparse tensors .* not supported on the lazy device"):
        out.sum().backward()
