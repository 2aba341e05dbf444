"""New shapes without new kernels (LAZYFUSE_DYNAMIC): from a kernel's second
graph at another shape on, fused kernels run shape-generic templates, and a
further shape builds no kernel. Values are checked against eager at every
shape, on emulated CUDA kernels and on native CPU kernels."""

from __future__ import annotations

import copy
import os
import random
import subprocess
import sys
from collections.abc import Callable, Iterator

import pytest
import torch
import torch.nn.functional as F

import lazyfuse
from conftest import HOST_COMPILER, NO_FUSED_KERNELS, ON_CUDA

pytestmark = pytest.mark.skipif(not ON_CUDA and not HOST_COMPILER, reason=NO_FUSED_KERNELS)


@pytest.fixture(params=["fused", "cpu"])
def kernels(request: pytest.FixtureRequest) -> Iterator[str]:
    """Fused kernels (a GPU's, else emulated CUDA) and native CPU kernels,
    strict, with no kernel structure seen before the test."""
    if request.param == "cpu" and ON_CUDA:
        pytest.skip("CPU kernels run on the CPU backing device")
    emulate = request.param == "fused" and not ON_CUDA
    lazyfuse.debug.clear_generic_kernels()
    with lazyfuse.config.kernel_settings_as(emulate_cuda=emulate, cpu_kernels=True, strict=True):
        with lazyfuse.config.dynamic_kernels_as("auto"):
            yield request.param
    lazyfuse.debug.clear_generic_kernels()


def kernels_built() -> int:
    """Kernel binaries built or read from the disk cache: a new kernel text."""
    counter = lazyfuse.metrics.counter_value
    return counter("LazyFuseKernelsCompiled") + counter("LazyFuseKernelsLoadedFromDisk")


def generic_renders() -> int:
    return lazyfuse.metrics.counter_value("LazyFuseGenericRenders")


def test_transformer_trained_over_24_lengths_builds_no_kernel_after_the_second_length(
    kernels: str,
) -> None:
    torch.manual_seed(0)
    eager = torch.nn.TransformerEncoderLayer(32, 2, 64, dropout=0.0, batch_first=True)
    lazy = copy.deepcopy(eager).to(lazyfuse.lazy_device())
    # SGD keeps parameters comparable: Adam's normalised steps turn a last-bit
    # difference in a tiny gradient into a step of lr.
    eager_opt = torch.optim.SGD(eager.parameters(), lr=0.05, momentum=0.9)
    lazy_opt = torch.optim.SGD(lazy.parameters(), lr=0.05, momentum=0.9)
    lengths = list(range(8, 32))
    random.Random(1).shuffle(lengths)
    built: list[int] = []
    for length in [lengths[0], *lengths]:  # the first step also makes the momentum
        x = torch.randn(3, length, 32)
        before = kernels_built()
        loss = lazy(x.to(lazyfuse.lazy_device())).square().mean()
        loss.backward()
        lazy_opt.step()
        lazy_opt.zero_grad()
        lazyfuse.mark_step()
        built.append(kernels_built() - before)
        expected = eager(x).square().mean()
        expected.backward()
        eager_opt.step()
        eager_opt.zero_grad()
        torch.testing.assert_close(loss.cpu(), expected.detach(), rtol=1e-5, atol=1e-6)
    for p, q in zip(lazy.parameters(), eager.parameters(), strict=True):
        torch.testing.assert_close(p.cpu(), q.detach(), rtol=1e-4, atol=1e-4)
    # The first length builds its kernels (twice: the first step also makes
    # the momentum), the second their templates. A later length whose rows
    # call for another strategy (a block per row past 32 columns, another
    # block size, a split) runs a template of the strategy it has. At 16 the
    # sequence length equals the head dim, so two views' index arithmetic
    # prints the same; it stays apart (KernelIndex::space), and the kernel
    # keeps its structure.
    later = dict(zip(lengths[2:], built[3:], strict=True))
    assert not any(later.values()), str(later)
    assert generic_renders() > 0


def test_a_batch_of_one_builds_once_like_torch_compiles_size_one_rule(kernels: str) -> None:
    # A dim of size 1 drops out of a kernel's index arithmetic and loops, so
    # the first batch of one builds its own kernels, as torch.compile's
    # automatic dynamic specializes sizes 0 and 1. A second batch of one, and
    # every other batch size, builds nothing.
    torch.manual_seed(0)
    eager = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    lazy = copy.deepcopy(eager).to(lazyfuse.lazy_device())
    eager_opt = torch.optim.SGD(eager.parameters(), lr=0.1, momentum=0.9)
    lazy_opt = torch.optim.SGD(lazy.parameters(), lr=0.1, momentum=0.9)
    built = {}
    for step, batch in enumerate([64, 64, 48, 1, 7, 1, 3, 40]):
        x, y = torch.randn(batch, 16), torch.randint(0, 4, (batch,))
        before = kernels_built()
        loss = F.cross_entropy(lazy(x.to(lazyfuse.lazy_device())), y.to(lazyfuse.lazy_device()))
        loss.backward()
        lazy_opt.step()
        lazy_opt.zero_grad()
        lazyfuse.mark_step()
        built[(step, batch)] = kernels_built() - before
        expected = F.cross_entropy(eager(x), y)
        expected.backward()
        eager_opt.step()
        eager_opt.zero_grad()
        torch.testing.assert_close(loss.cpu(), expected.detach(), rtol=1e-5, atol=1e-6)
    later = {key: count for key, count in built.items() if key[0] >= 3 and key != (3, 1)}
    assert not any(later.values()), str(built)


def kernels_chosen_at_launch() -> int:
    """Kernels rendered and loaded at their launch: ones the graph's batch,
    which builds its kernels side by side before the run, did not foresee."""
    data = lazyfuse.metrics.metric_data("LazyFuseKernelChoice")
    return 0 if data is None else data[0]


def attention_step(x: torch.Tensor) -> list[torch.Tensor]:
    # Multi-head attention splits its projection, a matmul, into q, k and v
    # as views (unflatten, transpose, select): the kernels after it read
    # strided, non-contiguous aliases of an intermediate.
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(x.shape[-1], 2, 48, dropout=0.0)
    layer = layer.to(x.device)
    out = layer(x)
    out.square().mean().backward()
    return [out, *(p.grad for p in layer.parameters())]


def misaligned_views(x: torch.Tensor) -> list[torch.Tensor]:
    # Views a matmul reads stay aliases, and a kernel reading the same view
    # reads the alias: rows of a matmul's result that start 52 bytes in, and
    # a reshape of its transpose, which copies.
    m = x @ x.t()
    rows = m[1:]
    flat = m.t().reshape(-1, 1)
    return [rows @ rows.t(), (rows * 2).sin(), flat @ x[:1, :2], flat.exp()]


@pytest.mark.parametrize("graph", [attention_step, misaligned_views])
def test_a_graphs_first_run_launches_only_kernels_its_batch_built(
    kernels: str, graph: Callable[[torch.Tensor], list[torch.Tensor]]
) -> None:
    # A kernel the batch did not foresee is built at its launch, alone,
    # after the batch: the first step at a new shape then pays a serial
    # compile (130-170 ms a kernel on CPU kernels) for a kernel reading a
    # view of an intermediate.
    x = torch.randn(5, 3, 25) if graph is attention_step else torch.randn(13, 8)
    x = x[..., 1:]  # a parameter whose data starts 4 bytes in
    before = kernels_chosen_at_launch()
    got = graph(x.to(lazyfuse.lazy_device()))
    lazyfuse.mark_step()
    assert kernels_chosen_at_launch() - before == 0
    for lazy, eager in zip(got, graph(x), strict=True):
        torch.testing.assert_close(lazy.cpu(), eager.detach(), rtol=1e-5, atol=1e-5)


def awkward(x: torch.Tensor, w: torch.Tensor) -> list[torch.Tensor]:
    y = torch.softmax(x * w + 1.0, dim=-1)
    z = F.layer_norm(x, x.shape[-1:]) * w
    tail = x[:, 1:]  # a view one element in: its rows start misaligned
    return [y, z, tail.sum(dim=-1), (tail * 2).exp().sum(dim=0), x.sum()]


@pytest.mark.parametrize(
    "rows, columns",
    [
        ((1, 3, 5), (1, 2, 7, 13)),
        ((2, 3), (97, 1031)),
        ((2, 3), (9001, 10007)),  # rows over 32 KiB
    ],
)
def test_generic_kernels_at_awkward_sizes(
    kernels: str, rows: tuple[int, ...], columns: tuple[int, ...]
) -> None:
    device = lazyfuse.lazy_device()
    checked = 0
    for r in rows:
        for c in columns:
            x, w = torch.randn(r, c), torch.randn(c)
            got = awkward(x.to(device), w.to(device))
            lazyfuse.mark_step()
            for g, e in zip(got, awkward(x, w), strict=True):
                # Sums of 10^4 floats: lanes and blocks add in another order.
                torch.testing.assert_close(g.cpu(), e, rtol=1e-4, atol=1e-4)
            checked += 1
    assert checked == len(rows) * len(columns)
    assert generic_renders() > 0


def builds_per_input(
    fn: Callable[[torch.Tensor], torch.Tensor],
    inputs: list[torch.Tensor],
    emulated_block: int,
    atol: float,
) -> list[int]:
    """Runs fn lazily on each input in turn, checked against eager; the
    kernels each one built."""
    built = []
    with lazyfuse.config.kernel_settings_as(emulated_block=emulated_block):
        for x in inputs:
            before = kernels_built()
            got = fn(x.to(lazyfuse.lazy_device())).cpu()
            built.append(kernels_built() - before)
            torch.testing.assert_close(got, fn(x), rtol=1e-5, atol=atol)
    return built


ROW_REDUCTIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "sum": lambda x: (x * 2).sum(-1),
    "amax": lambda x: (x + 1).amax(-1),
    "var": lambda x: x.var(-1),
    "softmax": lambda x: torch.softmax(x * 0.5, -1),
    "log_softmax": lambda x: torch.log_softmax(x, -1),
    "layer_norm": lambda x: F.layer_norm(x, x.shape[-1:]) * 2,
    # Over the middle dim: a thread per row, whose rows split from 64 on.
    "mean over dim 1": lambda x: x.view(8, -1, 128).mean(1),
}


@pytest.mark.parametrize("name", list(ROW_REDUCTIONS))
@pytest.mark.parametrize(
    "lengths",
    [
        # Attention's rows as the sequence grows: a thread per row under 32
        # columns, then a block of 32, then of 64 threads (emulated blocks of
        # up to 256 here), then 16-byte loads; rows over the middle dim split.
        [16, 17, 24, 40, 64, 96, 128],
        # Rows shorter than a block: a block-per-row template's threads past
        # the row's end must not disturb its statistics.
        [5, 6, 2, 3, 13, 31],
    ],
    ids=["growing", "short"],
)
def test_a_new_row_length_runs_a_template_of_another_strategy(
    kernels: str, name: str, lengths: list[int]
) -> None:
    if kernels == "cpu":
        pytest.skip("CPU kernels have one row strategy: a serial loop per row")
    inputs = [torch.randn(8 * n, 128 if "dim 1" in name else n) for n in lengths]
    built = builds_per_input(ROW_REDUCTIONS[name], inputs, emulated_block=256, atol=1e-5)
    # The first two lengths build (or find in the kernel cache) their kernels.
    assert sum(built[2:]) == 0, built


def two_views(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Views of (2, L, 16) and (2, 16, L) read at one index: their index
    arithmetic prints the same where L is 16, and only there."""
    return (a.transpose(1, 2) + b.transpose(1, 2).reshape(a.transpose(1, 2).shape)).sin()


def test_views_whose_index_arithmetic_coincides_at_one_size_keep_their_structure(
    kernels: str,
) -> None:
    inputs = [(torch.randn(2, 16, n), torch.randn(2, n, 16)) for n in [12, 20, 16, 9]]
    built = []
    for a, b in inputs:
        before = kernels_built()
        got = two_views(a.to(lazyfuse.lazy_device()), b.to(lazyfuse.lazy_device())).cpu()
        built.append(kernels_built() - before)
        torch.testing.assert_close(got, two_views(a, b))
    assert sum(built[2:]) == 0, built


FULL_REDUCTIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "mean of squares": lambda x: x.square().mean(),  # a Transformer's loss
    "sum": lambda x: (x * 2).sum(),
    "amin": lambda x: x.amin(),
    "var": lambda x: x.var(),
    "softmax": lambda x: torch.softmax(x.flatten(), 0),
}


@pytest.mark.parametrize("name", list(FULL_REDUCTIONS))
def test_a_full_reduction_runs_its_template_under_a_gpus_block_limit(
    kernels: str, name: str
) -> None:
    """A GPU takes blocks of up to 1024 threads, so a long row's template may
    hold more threads than a shorter row has loads, and a larger row cache.
    Those threads hold their accumulators' identities, and the cache holds the
    row, so the template serves (on an H200, a Transformer's loss built a
    kernel at length 8)."""
    if kernels == "cpu":
        pytest.skip("CPU kernels have one row strategy: a serial loop per row")
    # Rows of 1824, 2688, 2976, 2400 and 768.
    inputs = [torch.randn(3, n, 32) for n in [19, 28, 31, 25, 8]]
    built = builds_per_input(FULL_REDUCTIONS[name], inputs, emulated_block=1024, atol=1e-6)
    assert sum(built[2:]) == 0, built


def test_random_row_lengths_keep_eager_values_across_strategies(kernels: str) -> None:
    """A seeded hunt: each reduction through random row lengths, so that its
    renders ask for, and get, other strategies' templates in every order."""
    if kernels == "cpu":
        pytest.skip("CPU kernels have one row strategy: a serial loop per row")
    rng = random.Random(7)
    device = lazyfuse.lazy_device()
    lengths = [1, 2, 5, 16, 17, 31, 32, 33, 40, 63, 64, 65, 96, 127, 128, 200, 257, 1025]
    served_before = lazyfuse.metrics.counter_value("LazyFuseGenericOtherStrategy")
    with lazyfuse.config.kernel_settings_as(emulated_block=256):
        for name, fn in ROW_REDUCTIONS.items():
            dtype = rng.choice([torch.float32, torch.float64, torch.bfloat16])
            rows = rng.choice([3, 16, 64])  # few rows split, many do not
            middle = "dim 1" in name  # (8, length, 128): keep it small for the emulator
            for length in rng.sample([n for n in lengths if n <= 257 or not middle], 4):
                shape = (8 * length, 128) if middle else (rows, length)
                x = torch.randn(shape, dtype=dtype)
                got = fn(x.to(device)).cpu()
                tol = 2e-2 if dtype == torch.bfloat16 else 1e-4
                torch.testing.assert_close(got, fn(x), rtol=tol, atol=tol, equal_nan=True)
    assert lazyfuse.metrics.counter_value("LazyFuseGenericOtherStrategy") > served_before


def test_a_row_far_longer_than_its_templates_builds_its_own_kernel(kernels: str) -> None:
    if kernels == "cpu":
        pytest.skip("CPU kernels have one row strategy: a serial loop per row")
    device = lazyfuse.lazy_device()
    for length in [16, 17, 4096]:
        x = torch.randn(64, length)
        before = kernels_built()
        got = torch.softmax(x.to(device), -1).cpu()
        torch.testing.assert_close(got, torch.softmax(x, -1), rtol=1e-5, atol=1e-6)
    # Rows of 4096 need a row cache 4 times the template's (and on a GPU 16
    # times its threads): their own strategy compiles.
    assert kernels_built() > before


def run_shapes(fn: Callable[[torch.Tensor], torch.Tensor], sizes: list[int]) -> list[torch.Tensor]:
    out = []
    for n in sizes:
        torch.manual_seed(n)
        x = torch.randn(4, n)
        out.append(fn(x.to(lazyfuse.lazy_device())).cpu())
    return out


def chain(x: torch.Tensor) -> torch.Tensor:
    return (torch.softmax(x * 3, -1) + x.mean(-1, keepdim=True)).sin() / x.shape[-1]


def test_generic_kernels_compute_what_specialized_ones_do_bit_for_bit(kernels: str) -> None:
    if kernels == "cpu":
        pytest.skip(
            "on CPU kernels a reduction's lanes may round otherwise: the host compiler "
            "vectorizes a loop of known length differently"
        )
    # Rows that call for one strategy (a block of 32 threads, no vectors):
    # a template of another strategy reduces in another order.
    sizes = [40, 41, 47, 53, 63]
    with lazyfuse.config.dynamic_kernels_as("0"):
        specialized = run_shapes(chain, sizes)
    lazyfuse.debug.clear_graph_cache()  # the same shapes compile again
    lazyfuse.debug.clear_generic_kernels()
    before = generic_renders()
    generic = run_shapes(chain, sizes)
    assert generic_renders() > before
    for a, b in zip(specialized, generic, strict=True):
        assert torch.equal(a, b)


def test_dynamic_0_builds_kernels_for_every_shape(kernels: str) -> None:
    with lazyfuse.config.dynamic_kernels_as("0"):
        run_shapes(chain, [50, 51, 52])
        assert lazyfuse.debug.generic_kernels() == []


def test_dynamic_1_is_generic_from_the_first_shape(kernels: str) -> None:
    with lazyfuse.config.dynamic_kernels_as("1"):
        for got, n in zip(run_shapes(chain, [53, 54, 55]), [53, 54, 55], strict=True):
            torch.manual_seed(n)
            torch.testing.assert_close(got, chain(torch.randn(4, n)), rtol=1e-5, atol=1e-6)
        made = lazyfuse.debug.generic_kernels()
    assert made and all(record["renders"] >= 1 for record in made)
    assert all(record["changes"] == "" for record in made)  # no second shape needed


def test_auto_keeps_the_first_shape_specialized_and_says_why_it_went_generic(
    kernels: str,
) -> None:
    lazyfuse.debug.clear_compile_log()
    run_shapes(chain, [60])
    assert lazyfuse.debug.generic_kernels() == []
    run_shapes(chain, [70, 80])
    made = lazyfuse.debug.generic_kernels()
    assert made
    assert any("60 -> 70" in str(record["changes"]) for record in made), made
    assert sum(int(record["renders"]) for record in made) >= 2 * len(made)
    # The compile log names the graph whose kernels went generic, and why.
    log = lazyfuse.debug.compile_log()
    assert [len(entry["generic"]) for entry in log] == [0, len(made), 0], log
    notes = [str(note) for note in log[1]["generic"]]
    assert sorted(note.split(":")[0] for note in notes) == sorted(str(r["name"]) for r in made)
    # Softmax's rows of 70 lose the 16-byte loads rows of 60 had: a new strategy.
    assert all("for a new shape (" in note or "for a new strategy" in note for note in notes)
    assert any("for a new shape (" in note and "60 -> 70" in note for note in notes), notes


def run_with_dynamic(mode: str, code: str) -> subprocess.CompletedProcess[str]:
    """Runs `code` in a fresh Python with LAZYFUSE_DYNAMIC=`mode`."""
    return subprocess.run(
        [sys.executable, "-c", code],
        env=dict(os.environ, LAZYFUSE_DYNAMIC=mode),
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_dynamic_mode_is_checked() -> None:
    with pytest.raises(RuntimeError, match="'auto', '0' or '1'"):
        lazyfuse.config.set_dynamic_kernels("yes")  # type: ignore[arg-type]
    assert lazyfuse.config.dynamic_kernels() in ("auto", "0", "1")
    bad = run_with_dynamic("maybe", "import lazyfuse")
    assert bad.returncode != 0
    assert "LAZYFUSE_DYNAMIC is 'maybe'; use auto, 0 or 1" in bad.stderr
    on = run_with_dynamic("1", "import lazyfuse; print(lazyfuse.config.dynamic_kernels())")
    assert on.stdout.strip() == "1", on.stderr


def test_hugging_face_generate_builds_no_kernel_after_the_fourth_token(kernels: str) -> None:
    transformers = pytest.importorskip("transformers", reason="scripts/setup_env.sh installs it")
    torch.manual_seed(0)
    config = transformers.GPT2Config(
        n_layer=2, n_embd=32, n_head=2, vocab_size=100, n_positions=64, eos_token_id=None
    )
    model = transformers.GPT2LMHeadModel(config).eval()
    prompt = torch.tensor([[5, 17, 42, 8]])
    with torch.no_grad():
        expected = model.generate(prompt, max_new_tokens=12, do_sample=False, pad_token_id=0)
    built: list[int] = []

    class Count:
        def put(self, value: torch.Tensor) -> None:
            built.append(kernels_built())

        def end(self) -> None:
            pass

    lazy = model.to(lazyfuse.lazy_device())
    with torch.no_grad():
        got = lazy.generate(
            prompt.to(lazyfuse.lazy_device()),
            max_new_tokens=12,
            do_sample=False,
            pad_token_id=0,
            streamer=Count(),
        )
    assert torch.equal(got.cpu(), expected)
    assert len(built) == 13  # the prompt, then each new token
    # The prompt, the first decode steps (each a new graph) and the first
    # shape of each kernel build kernels; from the fourth new token on, the
    # KV cache grows and nothing is built.
    assert built[4:] == [built[4]] * 9, built
