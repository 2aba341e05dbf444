"""Python threads and the lazy device: one thread traces at a time.

The lazy device records one graph for the process, so a second thread's lazy
op or sync while another thread's step is open raises, naming both threads;
nothing the first thread recorded is lost. Threads taking turns (a lock, a
step each, a worker that ends) run as eager does.
"""

import re
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext

import torch

import lazyfuse

REFUSED = re.compile(r"lazyfuse: (.+) on thread (\d+) was refused: thread (\d+) has a step open")


def _on_thread(fn: Callable[[], object]) -> tuple[object, BaseException | None, int]:
    """Runs fn on a new thread; returns its result, its exception and its ident."""
    box: dict[str, object] = {}

    def run() -> None:
        box["ident"] = threading.get_ident()
        try:
            box["result"] = fn()
        except BaseException as error:  # noqa: BLE001 - handed to the test
            box["error"] = error

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(timeout=120)
    assert not thread.is_alive(), "the thread did not finish"
    error = box.get("error")
    assert error is None or isinstance(error, BaseException)
    return box.get("result"), error, int(box["ident"])  # type: ignore[call-overload]


def _assert_refused(error: BaseException | None, op: str, thread: int, owner: int) -> None:
    assert isinstance(error, RuntimeError), f"expected a refusal, got {error!r}"
    match = REFUSED.search(str(error))
    assert match is not None, str(error)
    assert match.group(1) == op
    assert (int(match.group(2)), int(match.group(3))) == (thread, owner)


def test_an_op_on_a_second_thread_while_a_step_is_open_is_refused_and_nothing_is_lost(
    lazy: torch.device,
) -> None:
    x = torch.randn(4, 5)
    y = torch.randn(4, 5)
    lazy_y = y.to(lazy)
    lazyfuse.mark_step()
    pending = x.to(lazy) * 2  # this thread's step is open

    _, error, ident = _on_thread(lambda: lazy_y + 1)
    _assert_refused(error, "aten::add", ident, threading.get_ident())

    torch.testing.assert_close(pending.cpu(), x * 2)
    # The step has run: the other thread may trace now, and computes right.
    result, error, _ = _on_thread(lambda: (lazy_y + 1).cpu())
    assert error is None
    torch.testing.assert_close(result, y + 1)
    torch.testing.assert_close((pending + lazy_y).cpu(), x * 2 + y)


def test_a_sync_on_a_second_thread_while_a_step_is_open_is_refused(lazy: torch.device) -> None:
    x = torch.randn(3, 3)
    pending = x.to(lazy).sin()

    _, error, ident = _on_thread(lazyfuse.mark_step)
    assert isinstance(error, RuntimeError) and "a sync of the lazy device" in str(error)
    assert f"on thread {ident} was refused: thread {threading.get_ident()}" in str(error)

    torch.testing.assert_close(pending.cpu(), x.sin())


def test_a_read_on_another_thread_of_a_computed_value_is_not_refused(lazy: torch.device) -> None:
    x = torch.randn(6)
    done = (x.to(lazy) * 3).sum()
    lazyfuse.mark_step()
    pending = x.to(lazy) + 1  # a step open on this thread does not stop reads of computed values

    result, error, _ = _on_thread(done.item)
    assert error is None
    assert abs(float(result) - float((x * 3).sum())) < 1e-5  # type: ignore[arg-type]
    torch.testing.assert_close(pending.cpu(), x + 1)


def test_values_a_thread_left_pending_when_it_ended_are_read_by_another(
    lazy: torch.device,
) -> None:
    x = torch.randn(8, 8)
    result, error, _ = _on_thread(lambda: torch.relu(x.to(lazy)) @ x.to(lazy))
    assert error is None and isinstance(result, torch.Tensor)
    torch.testing.assert_close(result.cpu(), torch.relu(x) @ x)


def _make_model_and_data(seed: int) -> tuple[torch.nn.Module, list[tuple[torch.Tensor, ...]]]:
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    data = [(torch.randn(4, 8), torch.randn(4, 1)) for _ in range(6)]
    return model, data


def _train(
    model: torch.nn.Module,
    data: list[tuple[torch.Tensor, ...]],
    device: torch.device,
    step_lock: AbstractContextManager[object] | None = None,
) -> list[torch.Tensor]:
    model = model.to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for x, y in data:
        with step_lock if step_lock is not None else nullcontext():
            optimizer.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x.to(device)), y.to(device))
            loss.backward()
            optimizer.step()
            if device.type == "lazy":
                lazyfuse.mark_step()
    return [p.detach().cpu() for p in model.parameters()]


def _train_on_threads(
    lazy: torch.device, seeds: range, step_lock: AbstractContextManager[object] | None
) -> tuple[dict[int, object], list[list[torch.Tensor]]]:
    setups = [_make_model_and_data(seed) for seed in seeds]
    results: dict[int, object] = {}

    def run(index: int) -> None:
        try:
            results[index] = _train(*setups[index], lazy, step_lock)
        except BaseException as error:  # noqa: BLE001 - checked by the caller
            results[index] = error

    threads = [threading.Thread(target=run, args=(k,)) for k in range(len(setups))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
        assert not thread.is_alive()
    expected = [_train(*_make_model_and_data(seed), torch.device("cpu")) for seed in seeds]
    return results, expected


def test_threads_taking_turns_under_a_lock_train_as_eager(lazy: torch.device) -> None:
    results, expected = _train_on_threads(lazy, range(3), threading.Lock())
    for index, want in enumerate(expected):
        got = results[index]
        assert isinstance(got, list), f"thread {index} failed: {got!r}"
        for a, b in zip(got, want, strict=True):
            torch.testing.assert_close(a, b)


def test_a_step_closure_on_a_background_thread_reads_the_loss(lazy: torch.device) -> None:
    x = torch.randn(5, 3)
    seen: list[float] = []
    finished = threading.Event()
    loss = (x.to(lazy) ** 2).mean()

    def log() -> None:
        seen.append(loss.item())
        finished.set()

    lazyfuse.add_step_closure(log, run_async=True)
    lazyfuse.mark_step()
    pending = x.to(lazy) * 5  # the next step traces while the closure reads
    assert finished.wait(timeout=60)
    assert abs(seen[0] - float((x**2).mean())) < 1e-6
    torch.testing.assert_close(pending.cpu(), x * 5)


def test_one_thread_training_claims_the_device_once_not_per_op(lazy: torch.device) -> None:
    # A claim walks every live tensor; autograd's device thread, which runs
    # every backward op, must not take the device from the training thread.
    model, data = _make_model_and_data(0)
    lazyfuse.metrics.reset()
    _train(model, data, lazy)
    assert lazyfuse.metrics.counter_value("LazyFuseTracingThreadClaims") <= 1


def test_a_refusal_inside_an_aten_composite_leaves_the_op_lazy(lazy: torch.device) -> None:
    # ones_like runs aten's composite on lazy tensors, which falls back to
    # eager for good when the composite fails; a refusal must not count.
    x = torch.randn(2, 3)
    lazy_x = x.to(lazy)
    lazyfuse.mark_step()
    pending = lazy_x * 2

    _, error, ident = _on_thread(lambda: torch.ones_like(lazy_x))
    _assert_refused(error, "aten::fill", ident, threading.get_ident())

    lazyfuse.mark_step()
    torch.testing.assert_close((torch.ones_like(lazy_x) + pending).cpu(), x * 2 + 1)
    assert not any("ones_like" in op for op in lazyfuse.metrics.fallback_counts())
