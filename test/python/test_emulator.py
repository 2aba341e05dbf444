"""The CUDA emulator itself: it runs the CUDA dialect's kernel bodies
unchanged, and it reports what a GPU or compute-sanitizer would catch. The
canaries plant faults in real generated kernels and check each is reported
with the kernel's name and source."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import fusion_graphs
import lazyfuse
from compile_watch import most_compiles_at_once
from conftest import HOST_COMPILER, ON_CUDA

pytestmark = pytest.mark.skipif(
    ON_CUDA or not HOST_COMPILER,
    reason="CUDA emulation runs on the CPU backing device and needs a host C++ compiler",
)
KERNEL_START = 'extern "C" __global__ void '


@pytest.fixture(autouse=True)
def emulated() -> Iterator[None]:
    with lazyfuse.config.kernel_settings_as(emulate_cuda=True, strict=True):
        yield


def emulated_kernel(fn, *inputs: torch.Tensor) -> dict[str, object]:
    lazy = [t.to(lazyfuse.lazy_device()) for t in inputs]
    lazyfuse.mark_step()
    fn(*lazy).cpu()
    (record,) = lazyfuse.debug.last_kernels()
    return record


def body(source: str) -> str:
    return source[source.index(KERNEL_START) :]


def test_debug_reports_emulation() -> None:
    info = lazyfuse.debug.emulation()
    assert info["emulate_cuda"] is True and info["strict"] is True
    assert info["emulated_block"] % 32 == 0


# adam_update leaves other live tensors (gradients, step counts), so the step
# mark_step runs is a larger graph than the one compile_cuda plans.
@pytest.mark.parametrize("graph", sorted(set(fusion_graphs.GRAPHS) - {"adam_update"}))
def test_bodies_match_the_cuda_dialect(graph: str) -> None:
    tensors = fusion_graphs.GRAPHS[graph](lazyfuse.lazy_device())
    # The emulator runs fewer threads per block, and block-per-row loops hold
    # their block size as a constant: compare kernels rendered for it.
    block = int(lazyfuse.debug.emulation()["emulated_block"])
    cuda = lazyfuse.debug.compile_cuda(tensors, arch="sm_90", block_limit=block)
    lazyfuse.mark_step()
    emulated = lazyfuse.debug.last_kernels()
    assert len(cuda) == len(emulated) > 0
    for native, emu in zip(cuda, emulated, strict=True):
        assert str(native["source"]).startswith("// lazyfuse cuda kernel")
        assert str(emu["source"]).startswith("// lazyfuse emulated_cuda kernel")
        assert body(str(native["source"])) == body(str(emu["source"]))


def test_unmodified_kernel_runs_through_the_debug_entry() -> None:
    x = torch.randn(256)
    record = emulated_kernel(lambda a: torch.tanh(a) + a, x)
    out = torch.empty(256)
    lazyfuse.debug.launch_emulated_source(str(record["source"]), str(record["name"]), [x], [out])
    torch.testing.assert_close(out, torch.tanh(x) + x)


@pytest.mark.parametrize(
    "plant,report",
    [
        (
            ("lf_vload<lf_v16>(in0 + base)", "lf_vload<lf_v16>(in0 + base + 4096)"),
            "out-of-bounds 16-byte read",
        ),
        (
            ("lf_vstore(out0 + base,", "lf_vstore(out0 + base + 4096,"),
            "out-of-bounds 16-byte write",
        ),
        (
            ("lf_vload<lf_v16>(in0 + base)", "lf_vload<lf_v16>(in0 + base + 1)"),
            "misaligned 16-byte vector load",
        ),
        (
            ("lf_vstore(out0 + base,", "lf_vstore(out0 + base + 2,"),
            "misaligned 16-byte vector store",
        ),
    ],
    ids=["read", "write", "misaligned-load", "misaligned-store"],
)
def test_canary_memory_faults_are_reported(plant: tuple[str, str], report: str) -> None:
    x = torch.randn(256)
    record = emulated_kernel(lambda a: torch.tanh(a) + a, x)
    source, name = str(record["source"]), str(record["name"])
    assert plant[0] in source
    with pytest.raises(RuntimeError, match=report) as error:
        lazyfuse.debug.launch_emulated_source(
            source.replace(plant[0], plant[1]), name, [x], [torch.empty(256)], grid=2
        )
    assert name in str(error.value) and "source: " in str(error.value)


def test_canary_scalar_index_out_of_bounds() -> None:
    # A transpose folded into the kernel's index arithmetic: scalar loads.
    # (Device data itself is always contiguous.)
    x = torch.randn(64, 48)
    record = emulated_kernel(lambda a: a.t().exp() + 1, x)
    source, name = str(record["source"]), str(record["name"])
    planted = source.replace("lf_ld(in0, ", "lf_ld(in0, 3072 + ", 1)
    assert planted != source
    with pytest.raises(RuntimeError, match="out-of-bounds 4-byte read"):
        lazyfuse.debug.launch_emulated_source(planted, name, [x], [torch.empty(48, 64)])


def test_canary_barrier_not_reached_by_every_thread() -> None:
    x = torch.randn(4, 256)
    record = emulated_kernel(lambda a: torch.softmax(a, -1), x)
    source, name = str(record["source"]), str(record["name"])
    opening = source.index("{", source.index(KERNEL_START)) + 1
    planted = source[:opening] + "\n  if (threadIdx.x == 5) return;" + source[opening:]
    with pytest.raises(RuntimeError, match="not every thread of block 0 reaches"):
        lazyfuse.debug.launch_emulated_source(planted, name, [x], [torch.empty(4, 256)], block=64)


@pytest.fixture
def faulty_kernels() -> Iterator[None]:
    lazyfuse._C._inject_kernel_faults(True)
    try:
        yield
    finally:
        lazyfuse._C._inject_kernel_faults(False)


def test_failed_kernel_falls_back_to_its_aten_steps(
    faulty_kernels: None, capfd: pytest.CaptureFixture[str]
) -> None:
    x = torch.randn(300)
    with lazyfuse.config.kernel_settings_as(strict=False):
        lazy = x.to(lazyfuse.lazy_device())
        lazyfuse.mark_step()
        y = F.silu(lazy) * 3 - lazy
        lazyfuse.mark_step()
        torch.testing.assert_close(y.cpu(), F.silu(x) * 3 - x)
        assert "its ATen steps run instead" in capfd.readouterr().err
        assert lazyfuse.metrics.counter_value("LazyFuseKernelFallbacks") == 1
        assert lazyfuse.metrics.counter_value("LazyFuseKernelLaunches") == 0


def test_failed_kernel_raises_when_strict(faulty_kernels: None) -> None:
    lazy = torch.randn(300).to(lazyfuse.lazy_device())
    lazyfuse.mark_step()
    y = lazy.sigmoid() + 1
    with pytest.raises(
        RuntimeError, match=r"fused kernel lazyfuse::fused\(aten::sigmoid.*injected"
    ):
        lazyfuse.mark_step(wait=True)
    del y


CACHE_PROBE = """
import torch, lazyfuse
x = torch.arange(64.0).to(lazyfuse.lazy_device())
y = (x * 0.5 + 1).cpu()
assert torch.equal(y, torch.arange(64.0) * 0.5 + 1)
c = lazyfuse.metrics.counter_value
print(c("LazyFuseKernelsCompiled"), c("LazyFuseKernelsLoadedFromDisk"))
"""


def probe_cache(cache: Path) -> tuple[int, int]:
    env = dict(os.environ, LAZYFUSE_CACHE_DIR=str(cache), LAZYFUSE_EMULATE_CUDA="1")
    env["LAZYFUSE_DEVICE"] = "cpu"
    out = subprocess.run(
        [sys.executable, "-c", CACHE_PROBE], env=env, capture_output=True, text=True, check=True
    )
    compiled, loaded = out.stdout.split()
    return int(compiled), int(loaded)


@pytest.mark.parametrize("where", ["format", "payload", "last"])
def test_damaged_disk_cache_entry_is_compiled_again(tmp_path: Path, where: str) -> None:
    assert probe_cache(tmp_path) == (1, 0)
    assert probe_cache(tmp_path) == (0, 1)
    (entry,) = (tmp_path / "kernels").glob("*.bin")
    data = bytearray(entry.read_bytes())
    # The last byte belongs to the target name, which the checksum covers too.
    at = {"format": 4, "payload": 30, "last": len(data) - 1}[where]
    data[at] ^= 0x5A
    entry.write_bytes(bytes(data))
    assert probe_cache(tmp_path) == (1, 0)


# Four kernels, two of them the same source (a layer repeated): compiled once.
THREE_KERNELS = """
import torch, lazyfuse
x, w = torch.randn(64, 32), torch.randn(64, 32)
lazy, lazy_w = x.to(lazyfuse.lazy_device()), w.to(lazyfuse.lazy_device())
outs = [(lazy * 2 + 1).sin(), (lazy_w * 2 + 1).sin(), lazy.softmax(-1), lazy.sum(0)]
lazyfuse.mark_step()
for got, want in zip(outs, [(x * 2 + 1).sin(), (w * 2 + 1).sin(), x.softmax(-1), x.sum(0)]):
    torch.testing.assert_close(got.cpu(), want)
print(lazyfuse.metrics.counter_value("LazyFuseKernelsCompiled"))
"""


def test_a_graphs_kernels_compile_side_by_side(tmp_path: Path) -> None:
    # A first step waits for every kernel of its graph: one after the other,
    # that is 14 compiles and 2.5 s for a Transformer step under emulation.
    assert most_compiles_at_once(tmp_path, THREE_KERNELS, threads=2, emulate=True) == (3, 2)
    assert most_compiles_at_once(tmp_path, THREE_KERNELS, threads=1, emulate=True) == (3, 1)
