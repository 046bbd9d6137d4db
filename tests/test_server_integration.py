"""Living inside a server: strict mode composes with other libraries' Triton hooks (installed
before warmup and after it), and the vLLM plugin, loaded as vLLM loads it."""

import json
import shutil

import pytest

from _subproc import child_env, last_json, python

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def built(tiny_cache, tmp_path_factory):
    """This module's copy of the suite's tiny cache; tests that damage it work on copies."""
    return shutil.copytree(tiny_cache, str(tmp_path_factory.mktemp("cache") / "c"))


def copy_of(src, tmp_path, name="copy"):
    dst = str(tmp_path / name)
    shutil.copytree(src, dst)
    return dst


CHAIN = """
import json, logging
logging.basicConfig(level=logging.WARNING)
import torch, triton, triton.language as tl
from triton import knobs
import qsa_warmup, kernels
from kernels import TensorMeta as M
from qsa_warmup import triton_compat as tc
from qsa_warmup.errors import StrictModeError

seen = []

def chaining(tag, previous):
    # what vLLM's JIT monitor and other libraries do: record, then ask the hook before them
    def hook(**kw):
        seen.append([tag, kw["fn"].name])
        return bool(previous and previous(**kw))
    return hook

def listening(tag, previous):
    def listener(**kw):
        seen.append([tag, kw["metadata"]["name"]])
        if previous:
            previous(**kw)
    return listener

knobs.runtime.jit_cache_hook = chaining("before", None)
knobs.runtime.jit_post_compile_hook = chaining("post", None)
knobs.compilation.listener = listening("listener", None)
qsa_warmup.warmup("tiny", cache_dir={a!r}, target="sm_90", strict={mode!r})
knobs.runtime.jit_cache_hook = chaining("after", knobs.runtime.jit_cache_hook)
qsa_warmup.warmup("tiny", cache_dir={b!r}, target="sm_90", strict={mode!r})  # a second warmup

@triton.jit
def other_library_kernel(x, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(x + offs, tl.load(x + offs, mask=offs < n), mask=offs < n)

outcome = {{}}
with tc.active_driver(tc.parse_target("sm_90")):
    before_theirs = len(seen)
    other_library_kernel.warmup(torch.float32, 8, BLOCK=16, grid=(1,))
    outcome["theirs"] = seen[before_theirs:]
    unplanned = kernels.ragged_topk_launch(M((2, 3000), torch.float32), M((2,), torch.int32), 16,
                                           M((2, 16), torch.int32))
    before_ours = len(seen)
    try:
        unplanned.warmup()
        outcome["ours"] = "compiled"
    except StrictModeError as exc:
        outcome["ours"] = "raised " + str(exc.closest)
    outcome["ours_seen"] = seen[before_ours:]
print(json.dumps(outcome))
"""


@pytest.mark.parametrize("mode", ["error", "warn"])
def test_strict_mode_chains_onto_hooks_installed_before_and_after(built, tmp_path, mode):
    a, b = copy_of(built, tmp_path, "a"), copy_of(built, tmp_path, "b")
    script = tmp_path / "chain.py"  # Triton reads a kernel's source from its file
    script.write_text(CHAIN.format(a=a, b=b, mode=mode))
    p = python(f"import runpy; runpy.run_path({str(script)!r}, run_name='__main__')")
    out = last_json(p)
    # another library's kernel: every hook and listener sees it, strict mode lets it compile
    assert [tag for tag, _ in out["theirs"]] == ["after", "before", "listener", "post"], out
    # ours, unplanned: the other hooks still see the request; strict mode acts on it
    assert [tag for tag, _ in out["ours_seen"]][:2] == ["after", "before"], out
    if mode == "error":
        assert out["ours"] == "raised topk.single.b1024.w4", out
        assert len(out["ours_seen"]) == 2  # nothing compiled
    else:
        assert out["ours"] == "compiled"
        assert [tag for tag, _ in out["ours_seen"]] == ["after", "before", "listener", "post"]
        assert p.stderr.count("JIT compile after warmup") == 1


def test_restoring_triton_leaves_a_later_hook_in_place(built, tmp_path):
    p = python(f"""
        import json
        from triton import knobs
        import qsa_warmup
        from qsa_warmup import triton_compat as tc
        qsa_warmup.warmup("tiny", cache_dir={copy_of(built, tmp_path)!r}, target="sm_90",
                          strict="error")
        ours = knobs.runtime.jit_cache_hook
        def later(**kw):
            return ours(**kw)
        knobs.runtime.jit_cache_hook = later
        tc.restore()
        print(json.dumps({{"kept": knobs.runtime.jit_cache_hook is later}}))
    """)
    assert last_json(p) == {"kept": True}


PLUGIN = """
import importlib.metadata as md, json, logging, sys
logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
{prelude}
(ep,) = [e for e in md.entry_points(group="vllm.general_plugins") if e.name == "qsa_warmup"]
register = ep.load()  # what vllm.plugins.load_general_plugins does, in every process
register()
register()  # loaded twice in one process: still one warmup
{after}
print(json.dumps({{"vllm_imported": "vllm" in sys.modules, "calls": CALLS}}))
"""

# stands in for the GPU: the warmup the plugin starts is recorded (the real one needs a device)
RECORD = """
import qsa_warmup, qsa_warmup.hook as hook
CALLS = []
tiny = qsa_warmup.load_config(preset="tiny")
hook.warmup = lambda config, **kw: CALLS.append([config == tiny, kw])
"""


def plugin(tmp_path, prelude="", after="", **env):
    env = child_env(QSA_WARMUP_CACHE_DIR=str(tmp_path / "c"), **env)
    return python(PLUGIN.format(prelude=RECORD + prelude, after=after), env=env)


def test_vllm_plugin_in_a_process_without_a_device_returns_at_once(tmp_path):
    p = plugin(tmp_path, QSA_WARMUP_CONFIG="tiny")
    out = last_json(p)
    assert out == {"vllm_imported": False, "calls": []}
    assert "no CUDA device" in p.stderr


def test_vllm_plugin_defers_warmup_until_the_worker_sets_its_device(tmp_path):
    # an API server or engine core never sets a device: nothing happens there; a worker sets
    # its device after loading plugins: warmup runs then, on that device, once
    fake_gpu = """
import torch
torch.cuda.is_available = lambda: True
torch.cuda.is_initialized = lambda: False
torch.cuda.set_device = lambda device: None
"""
    after = "import torch; torch.cuda.set_device(3); torch.cuda.set_device(3)"
    p = plugin(tmp_path, prelude=fake_gpu, after=after, QSA_WARMUP_CONFIG="tiny")
    assert last_json(p)["calls"] == [[True, {"device": 3}]]
    assert "deferred" in p.stderr
    p = plugin(tmp_path, prelude=fake_gpu, QSA_WARMUP_CONFIG="tiny")
    assert last_json(p)["calls"] == []


def test_vllm_plugin_in_a_process_that_owns_a_device_warms_at_once(tmp_path):
    owner = """
import torch
torch.cuda.is_available = lambda: True
torch.cuda.is_initialized = lambda: True
torch.cuda.current_device = lambda: 1
"""
    p = plugin(tmp_path, prelude=owner, QSA_WARMUP_CONFIG="tiny")
    assert last_json(p)["calls"] == [[True, {"device": 1}]]


def test_vllm_plugin_without_a_deployment_or_with_a_bad_one(tmp_path):
    owner = "import torch; torch.cuda.is_available = lambda: True\n"
    owner += "torch.cuda.is_initialized = lambda: True; torch.cuda.current_device = lambda: 0"
    p = plugin(tmp_path, prelude=owner)
    assert last_json(p)["calls"] == [] and "QSA_WARMUP_CONFIG is not set" in p.stderr
    env = child_env(QSA_WARMUP_CONFIG="no-such-preset", QSA_WARMUP_CACHE_DIR=str(tmp_path))
    p = python(PLUGIN.format(prelude=owner, after=""), env=env, check=False)
    assert p.returncode != 0 and "QSA_WARMUP_CONFIG" in p.stderr


def test_vllm_plugin_imports_nothing_of_vllm(tmp_path):
    p = python(
        """
        import json, sys
        import qsa_warmup.vllm_plugin
        heavy = [m for m in ("vllm", "torch", "triton") if m in sys.modules]
        print(json.dumps(heavy))
        """
    )
    assert json.loads(p.stdout.strip().splitlines()[-1]) == []


@pytest.mark.gpu
def test_vllm_plugin_warms_a_worker_on_the_gpu(tmp_path):
    # the real thing: entry point loaded, device set as vLLM's worker sets it, a planned launch
    # after it compiles nothing under strict mode error
    p = python(
        """
        import importlib.metadata as md, json, torch
        (ep,) = [e for e in md.entry_points(group="vllm.general_plugins")
                 if e.name == "qsa_warmup"]
        ep.load()()
        torch.cuda.set_device(0)
        from qsa_warmup import hook
        (report,) = hook._warmed.values()
        print(json.dumps({"planned": report.planned, "loaded": report.loaded,
                           "device": report.device, "strict": report.strict}))
        """,
        env=child_env(
            QSA_WARMUP_CONFIG="tiny", QSA_WARMUP_CACHE_DIR=str(tmp_path), QSA_WARMUP_STRICT="error"
        ),
    )
    out = last_json(p)
    assert out == {"planned": 5, "loaded": 5, "device": 0, "strict": "error"}


def test_a_device_index_outside_the_visible_devices_is_one_clear_error(monkeypatch):
    # simulated: a process that sees 2 GPUs of a host, through CUDA_VISIBLE_DEVICES
    import torch

    from qsa_warmup.errors import ConfigError
    from qsa_warmup.hook import _checked_device

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5")
    assert _checked_device(1) == 1
    for bad in (2, -1, "1", True):
        with pytest.raises(ConfigError) as err:
            _checked_device(bad)
        assert err.value.field == "device"
        assert "sees 2 (CUDA_VISIBLE_DEVICES=4,5)" in str(err.value) and "0..1" in str(err.value)


@pytest.mark.gpu
def test_warmup_on_a_device_this_process_does_not_see(tmp_path):
    import torch

    p = python(
        f"""
        import qsa_warmup
        qsa_warmup.warmup("tiny", cache_dir={str(tmp_path)!r}, device={torch.cuda.device_count()})
        """,
        check=False,
    )
    assert p.returncode != 0 and "is not a CUDA device index of this process" in p.stderr
