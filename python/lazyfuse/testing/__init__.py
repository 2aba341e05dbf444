"""Parity tests of your own models against eager PyTorch.

    import lazyfuse.testing

    def test_my_model_matches_eager():
        model = MyModel().eval()
        lazyfuse.testing.assert_matches_eager(model, torch.randn(2, 16))

``assert_matches_eager`` compares outputs and gradients of one call;
``assert_trains_like_eager`` compares a few training steps and fails on a
recompile after warm-up. Installing lazyfuse also installs a pytest plugin
(the top-level module ``pytest_lazyfuse``): fixtures ``lazy_device`` and
``lazyfuse_metrics``, the marker ``lazyfuse_no_fallback``, the option
``--lazyfuse-emulate`` and an end-of-run summary.
"""

from lazyfuse.testing.parity import (
    TOLERANCES,
    assert_matches_eager,
    assert_trains_like_eager,
    default_loss,
    tolerance,
)

__all__ = [
    "TOLERANCES",
    "assert_matches_eager",
    "assert_trains_like_eager",
    "default_loss",
    "tolerance",
]
