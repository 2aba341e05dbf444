"""Indexed writes in place: `cache.index_copy_(2, pos, k)` (HF's static KV
cache), `x[idx] = v`, scatter_, index_add_ and index_fill_. Functionalization
turns each into a functional op that returns a new base; where the run may
overwrite the old base, the step writes its part into it, as eager does,
instead of copying the whole base (test_inplace_scatter.py runs INDEX_WRITES
with the view writes). index_copy ran eagerly before, a graph break per
write. ATen checks an index while it writes, so on the CPU the
indices are checked first: a bad index raises eager's error with the base
untouched. A write that reads its own base (HF's top-p mask) stays
functional: ATen refuses to write a tensor it reads."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

import lazyfuse

SCATTERS = "LazyFuseInPlaceScatters"


pytestmark = pytest.mark.usefixtures("donation_on")


def scatters() -> int:
    return lazyfuse.metrics.counter_value(SCATTERS)


Write = Callable[[torch.Tensor, torch.Tensor, int], None]


def rows(x: torch.Tensor, t: int) -> torch.Tensor:
    return torch.tensor([t % 6, (t + 3) % 6], device=x.device)


INDEX_WRITES: dict[str, Write] = {
    "index_copy": lambda x, v, t: x.index_copy_(0, rows(x, t), v[:2]),
    "index_add": lambda x, v, t: x.index_add_(0, rows(x, t), v[:2], alpha=0.5),
    "index_fill": lambda x, v, t: x.index_fill_(1, rows(x, t) - 6, float(t)),
    "index_fill_tensor": lambda x, v, t: x.index_fill_(0, rows(x, t), v[0, 0]),
    "scatter_src": lambda x, v, t: x.scatter_(0, rows(x, t).view(2, 1).expand(2, 7), v[:2]),
    "scatter_value": lambda x, v, t: x.scatter_(1, rows(x, t).view(1, 2), -1.0),
    "scatter_reduce": lambda x, v, t: x.scatter_(
        0, rows(x, t).view(2, 1).expand(2, 7), v[:2], reduce="multiply"
    ),
    "scatter_add": lambda x, v, t: x.scatter_add_(0, rows(x, t).view(2, 1).expand(2, 7), v[:2]),
    "index_put": lambda x, v, t: x.index_put_((rows(x, t),), v[:2]),
    "index_put_accumulate": lambda x, v, t: x.index_put_(
        (rows(x, t), rows(x, t + 1)), v[0, :2], accumulate=True
    ),
    "setitem_columns": lambda x, v, t: x.__setitem__((slice(None), rows(x, t) - 1), v[:, :2]),
}


def test_a_static_kv_cache_is_written_with_index_copy(engine: str) -> None:
    torch.manual_seed(0)
    keys = [torch.randn(2, 4, 1, 8) for _ in range(6)]
    expected = torch.zeros(2, 4, 6, 8)
    cache = expected.to(lazyfuse.lazy_device())
    before = scatters()
    scores = []
    for t, k in enumerate(keys):
        position = torch.tensor([t])
        expected.index_copy_(2, position, k * 2)
        cache.index_copy_(2, position.to(cache.device), k.to(cache.device) * 2)
        scores.append(cache[:, :, : t + 1].sum(-1))
        lazyfuse.mark_step()
    assert scatters() - before >= len(keys) - 1
    assert torch.equal(cache.cpu(), expected)
    for t, got in enumerate(scores):
        # Each read the cache as it was at its token.
        torch.testing.assert_close(got.cpu(), expected[:, :, : t + 1].sum(-1))


BAD_INDEX: dict[str, tuple[Write, str]] = {
    "index_copy": (
        lambda x, v, t: x.index_copy_(0, torch.tensor([1, 9], device=x.device), v[:2]),
        "index_copy",
    ),
    "index_add": (
        lambda x, v, t: x.index_add_(0, torch.tensor([1, -1], device=x.device), v[:2]),
        "index_add",
    ),
    "scatter": (
        lambda x, v, t: x.scatter_(0, torch.tensor([[1, 6]], device=x.device), 1.0),
        "scatter",
    ),
    "index_put": (
        lambda x, v, t: x.index_put_((torch.tensor([1, 6], device=x.device),), v[:2]),
        "index",
    ),
}


@pytest.mark.parametrize("write", sorted(BAD_INDEX))
def test_an_index_out_of_bounds_raises_eagers_error(engine: str, write: str) -> None:
    torch.manual_seed(0)
    base, values = torch.randn(6, 7), torch.randn(6, 7)
    run, name = BAD_INDEX[write]
    with pytest.raises((IndexError, RuntimeError)) as eager:
        run(base.clone(), values, 0)
    x = base.to(lazyfuse.lazy_device())
    other = torch.zeros(3, device=x.device)
    lazyfuse.mark_step()
    run(x, values.to(x.device), 0)
    other += 1
    with pytest.raises(eager.type, match=name) as lazy:  # the class eager raises
        lazyfuse.mark_step()
        x.cpu()
    assert "out of" in str(lazy.value) or "out of" not in str(eager.value)
    # The failed step wrote nothing over memory the graph reads: it is not
    # lost, and its other results read.
    assert "was lost" not in str(lazy.value)
    del x
    torch.testing.assert_close(other.cpu(), torch.ones(3))
    y = torch.arange(4.0, device=other.device) * 2
    assert torch.equal(y.cpu(), torch.arange(4.0) * 2)


def test_an_index_write_with_a_later_failing_step_is_applied_once(engine: str) -> None:
    x = torch.zeros(6, 4).to(lazyfuse.lazy_device())
    w = torch.ones(3, device=x.device)
    lazyfuse.mark_step()
    x.index_add_(0, torch.tensor([1, 3], device=x.device), torch.ones(2, 4, device=x.device))
    y = w[torch.tensor([5], device=x.device)] * 2
    with pytest.raises(IndexError, match="out of bounds"):
        lazyfuse.mark_step()
        y.cpu()
    del y
    expected = torch.zeros(6, 4)
    expected[[1, 3]] = 1
    assert torch.equal(x.cpu(), expected)


def test_a_held_view_keeps_the_base_out_of_place(engine: str) -> None:
    torch.manual_seed(0)
    expected = torch.randn(6, 7)
    x = expected.to(lazyfuse.lazy_device())
    held, expected_held = x[2], expected[2]
    lazyfuse.mark_step()
    held.cpu()
    index = torch.tensor([0, 4])
    v = torch.randn(2, 7)
    expected.index_copy_(0, index, v)
    x.index_copy_(0, index.to(x.device), v.to(x.device))
    lazyfuse.mark_step()
    assert torch.equal(x.cpu(), expected)
    assert torch.equal(held.cpu(), expected_held)


def permuted(x: torch.Tensor) -> torch.Tensor:
    return torch.tensor([[3, 0, 5, 1, 4, 2, 6]] * 6, device=x.device)


# Writes whose written base is also what they write (or where they read):
# `mask.scatter(1, order, mask)` in HF's top-p sampling. ATen refuses to
# write a tensor it reads, so the step takes its functional call.
SELF_WRITES: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "scatter": lambda x: x.scatter(1, permuted(x), x),
    "scatter_add": lambda x: x.scatter_add(1, permuted(x), x),
    "scatter_reduce": lambda x: x.scatter(1, permuted(x), x, reduce="add"),
    "index_copy": lambda x: x.index_copy(0, permuted(x)[0, :6], x),
    "index_add": lambda x: x.index_add(0, permuted(x)[0, :6], x, alpha=2.0),
    "index_put": lambda x: x.index_put((permuted(x)[0, :6],), x),
    "index_put_accumulate": lambda x: x.index_put((permuted(x)[0, :6],), x, accumulate=True),
    "setitem": lambda x: x.__setitem__(slice(None), x) or x,
    "through_a_detached_alias": lambda x: x.scatter(1, permuted(x), x.detach()),
}


@pytest.mark.parametrize("write", sorted(SELF_WRITES))
def test_a_write_that_reads_its_own_base(engine: str, write: str) -> None:
    torch.manual_seed(0)
    base = torch.randn(6, 7)
    expected = SELF_WRITES[write](base.clone())
    # An intermediate of the graph: the run owns it, and may write over it.
    got = SELF_WRITES[write](base.to(lazyfuse.lazy_device()) * 1)
    assert torch.equal(got.cpu(), expected)


def test_hugging_face_top_p_sampling_masks_as_eager() -> None:
    logits_process = pytest.importorskip(
        "transformers.generation.logits_process", reason="scripts/setup_env.sh installs it"
    )

    torch.manual_seed(0)
    scores = torch.randn(3, 50)
    ids = torch.zeros(3, 1, dtype=torch.long)
    for warper in (logits_process.TopPLogitsWarper(0.8), logits_process.TopKLogitsWarper(5)):
        expected = warper(ids, scores.clone())
        got = warper(ids.to(lazyfuse.lazy_device()), scores.to(lazyfuse.lazy_device()) * 1)
        assert torch.equal(got.cpu(), expected), type(warper).__name__


def test_hugging_face_generate_with_a_static_cache_writes_it_in_place() -> None:
    transformers = pytest.importorskip("transformers", reason="scripts/setup_env.sh installs it")
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=100,
        max_position_embeddings=128,
    )
    model = transformers.LlamaForCausalLM(config).eval()
    prompt = torch.tensor([[5, 17, 42, 8]])
    options = {
        "max_new_tokens": 8,
        "do_sample": False,
        "pad_token_id": 0,
        "cache_implementation": "static",
    }
    with torch.no_grad():
        expected = model.generate(prompt, **options)
    before = scatters()
    fallbacks = lazyfuse.metrics.counter_value("aten::index_copy")
    lazy = model.to(lazyfuse.lazy_device())
    with torch.no_grad():
        got = lazy.generate(prompt.to(lazyfuse.lazy_device()), **options)
    assert torch.equal(got.cpu(), expected)
    # The cache's index_copy_ runs in the graph (it was a graph break per
    # layer per token) and, from the second token on, in place: a key and a
    # value per layer per token.
    assert lazyfuse.metrics.counter_value("aten::index_copy") == fallbacks
    assert scatters() - before >= 2 * config.num_hidden_layers * (options["max_new_tokens"] - 1)
