import pytest
import torch

import convops


def pytest_collection_modifyitems(config, items):
    """Tests marked `cuda` run only where a GPU is visible and convops was built with its CUDA kernels."""
    if torch.cuda.is_available() and convops.has_cuda_kernels():
        return
    reason = "needs a CUDA device and a CUDA build of convops"
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(autouse=True)
def _convops_kernels(request):
    """The tests check convops' own kernels, so CUDA calls take them rather than whatever "auto" would time faster
    (tests/test_path_choice.py covers that policy)."""
    if not convops.has_ops():
        yield
        return
    with convops.forced_path("convops"):
        yield


@pytest.fixture(autouse=True)
def _seed_and_restore_precision_flags():
    """Each test starts from a known seed and PyTorch's default precision flags, and leaves them as it found them."""
    torch.manual_seed(0)
    tf32 = torch.backends.cudnn.allow_tf32
    yield
    torch.backends.cudnn.allow_tf32 = tf32


@pytest.fixture
def without_small_separable_kernel(monkeypatch):
    """Leaves the small-problem fused kernel out of the separable op's dispatch (CONVOPS_SEPARABLE_KERNEL=streaming,
    read each call), for tests of the kernels and paths whose problems it would otherwise take: it takes contiguous
    NCHW problems of a few thousand outputs, stride 2 included."""
    monkeypatch.setenv("CONVOPS_SEPARABLE_KERNEL", "streaming")
