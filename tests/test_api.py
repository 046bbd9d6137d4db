"""Every module's ``__all__`` is true both ways, and the layers hold: ``kernels`` never imports
``qsa_warmup``; only ``qsa_warmup.qsa`` (the QSA kernels' registration as a family) imports
``kernels``; only ``qsa_warmup.triton_compat`` reaches into Triton's internals."""

import ast
import importlib
import inspect
import os
import pkgutil

import pytest

import qsa_warmup
import qsa_warmup.qsa as qsa_registration
import qsa_warmup.triton_compat as triton_compat

from _subproc import ROOT


def _modules():
    names = [
        f"qsa_warmup.{m.name}"
        for m in pkgutil.iter_modules(qsa_warmup.__path__)
        if m.name != "__main__"
    ]
    names += [
        f"qsa_warmup.triton_compat.{m.name}" for m in pkgutil.iter_modules(triton_compat.__path__)
    ]
    names += [f"qsa_warmup.qsa.{m.name}" for m in pkgutil.iter_modules(qsa_registration.__path__)]
    return names + ["kernels.limits"]


@pytest.mark.parametrize("name", _modules())
def test_all_is_true_both_ways(name):
    module = importlib.import_module(name)
    listed = getattr(module, "__all__", None)
    assert listed is not None, f"{name} has no __all__"
    assert [n for n in listed if not hasattr(module, n)] == []
    public = [
        n
        for n, v in vars(module).items()
        if not n.startswith("_")
        and (inspect.isfunction(v) or inspect.isclass(v))
        and v.__module__ == name
    ]
    assert [n for n in public if n not in listed] == []


def _imports(path):
    tree = ast.parse(open(path).read())
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            yield node.module or ""


def _sources(package):
    folder = os.path.join(ROOT, *package.split("/"))
    for base, _, names in os.walk(folder):
        yield from (os.path.join(base, n) for n in names if n.endswith(".py"))


def test_layers():
    for path in _sources("kernels"):
        assert not any(m.startswith("qsa_warmup") for m in _imports(path)), path
    internals = ("triton.runtime", "triton.backends", "triton.compiler", "triton._C")
    for path in _sources("qsa_warmup"):
        if os.sep + "qsa" + os.sep not in path:
            assert not any(m == "kernels" or m.startswith("kernels.") for m in _imports(path)), path
        if os.sep + "triton_compat" + os.sep in path:
            continue
        assert not any(m.startswith(internals) for m in _imports(path)), path


def test_the_shared_tier_does_not_reach_back_into_the_cache():
    # the cache opens the tier; the tier verifies bytes with the file helpers, never the cache
    tree = ast.parse(open(os.path.join(ROOT, "qsa_warmup", "remote.py")).read())
    relative = {
        node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.level
    }
    assert not relative & {"cache", "hook", "engine"}, relative
