import os

# Kernel tests run on the CPU through Triton's interpreter unless a GPU is present.
# This must be set before triton is imported anywhere.
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def device():
    return "cuda" if torch.cuda.is_available() else "cpu"


@pytest.fixture(scope="session")
def tiny_cache(tmp_path_factory):
    """The ``tiny`` preset built once for the whole suite (sm_90, offline); tests take copies
    (``tiny_copy``), so none of them sees another's changes."""
    from _subproc import cli_json

    root = str(tmp_path_factory.mktemp("tiny-cache") / "c")
    cli_json("prebuild", "--preset", "tiny", "--cache-dir", root)
    return root


@pytest.fixture
def tiny_copy(tiny_cache, tmp_path):
    """A path under this test's tmp_path -> a fresh copy of the suite's tiny cache there."""
    import shutil

    def copy(name: str = "c") -> str:
        return shutil.copytree(tiny_cache, str(tmp_path / name))

    return copy
