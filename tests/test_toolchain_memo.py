"""What the warm start keeps from redoing what Triton redoes in every fresh process: the memo of
triton_key, the ptxas version, the C-module platform key and the libcuda folders (equal to
Triton's own values, read back without the work they stand for, recomputed when what they were
taken of changes), and one load per distinct C launcher module."""

import os

from _subproc import child_env, last_json, python

INSTALL = """
import json, os, subprocess, sys
import triton.runtime.build as build
import triton.runtime.cache as rc
from triton.backends.nvidia import compiler as nvc
from triton.backends.nvidia import driver as nvd
from qsa_warmup import triton_compat as tc
memo_dir = {memo!r}
original = {{"triton_key": rc.triton_key, "ptxas": nvc.get_ptxas_version,
            "platform_key": build.platform_key}}
"""


def test_memoized_values_equal_tritons_and_are_read_back_without_the_work(tmp_path):
    memo = str(tmp_path / "memo")
    first = last_json(
        python(
            INSTALL.format(memo=memo)
            + """
tc.install_memoized_toolchain_identity(memo_dir)
print(json.dumps({
    "key": rc.triton_key() == original["triton_key"](),
    "ptxas": nvc.get_ptxas_version(90) == original["ptxas"](90),
    "platform": build.platform_key() == original["platform_key"](),
    "value": build.platform_key()}))
"""
        )
    )
    assert first["key"] and first["ptxas"] and first["platform"], first
    assert {n.split("-")[0] for n in os.listdir(memo)} >= {"triton_key", "ptxas90", "platform_key"}
    # a second process gets the same values with every subprocess and the libtriton hash forbidden
    second = last_json(
        python(
            INSTALL.format(memo=memo)
            + """
def forbidden(*a, **k):
    raise AssertionError("recomputed instead of read from the memo")
subprocess.check_output = subprocess.run = forbidden
rc.triton_key = forbidden
tc.install_memoized_toolchain_identity(memo_dir)
print(json.dumps({"value": build.platform_key(), "ptxas": nvc.get_ptxas_version(90),
                  "key": len(rc.triton_key())}))
"""
        )
    )
    assert second["value"] == first["value"] and second["key"] > 0


def test_libcuda_folders_are_memoized_and_rechecked(tmp_path):
    memo, libs = str(tmp_path / "memo"), tmp_path / "cuda-libs"
    libs.mkdir()
    (libs / "libcuda.so.1").write_bytes(b"")
    code = (
        INSTALL.format(memo=memo)
        + """
calls = []
def lookup():  # stands for Triton's `ldconfig -p` lookup
    calls.append(1)
    return [{libs!r}]
nvd.libcuda_dirs = lookup
tc.install_memoized_toolchain_identity(memo_dir)
print(json.dumps({{"dirs": nvd.libcuda_dirs(), "lookups": len(calls)}}))
""".format(libs=str(libs))
    )
    assert last_json(python(code)) == {"dirs": [str(libs)], "lookups": 1}
    assert last_json(python(code)) == {"dirs": [str(libs)], "lookups": 0}  # read back
    env = child_env(LD_LIBRARY_PATH=str(tmp_path))
    assert last_json(python(code, env=env))["lookups"] == 1  # Triton's fallback path changed
    (libs / "libcuda.so.1").unlink()
    assert last_json(python(code))["lookups"] == 1  # the memoized folder lost libcuda: look again


def test_stat_identity_follows_the_files(tmp_path):
    out = last_json(
        python(f"""
import json, os
from qsa_warmup.triton_compat.toolchain import stat_identity
path = {str(tmp_path / "f")!r}
open(path, "w").write("a")
first = stat_identity([path])
same = stat_identity([path])
os.utime(path, ns=(1, 1))
touched = stat_identity([path])
print(json.dumps([first == same, first != touched, stat_identity([path], "x") != touched]))
""")
    )
    assert out == [True, True, True]


def test_each_distinct_launcher_module_is_loaded_once():
    out = last_json(
        python("""
import json
from triton.backends.nvidia import driver as nvd
from qsa_warmup import triton_compat as tc
loads = []
def load(src, name, library_dirs=None, include_dirs=None, libraries=None, ccflags=None):
    loads.append(src)
    return object()
nvd.compile_module_from_src = load
tc.share_launcher_modules()
tc.share_launcher_modules()  # idempotent: still one layer
a = nvd.compile_module_from_src(src="A", name="__triton_launcher", library_dirs=["x"])
again = nvd.compile_module_from_src(src="A", name="__triton_launcher", library_dirs=["x"])
b = nvd.compile_module_from_src(src="B", name="__triton_launcher", library_dirs=["x"])
other_dirs = nvd.compile_module_from_src(src="A", name="__triton_launcher", library_dirs=["y"])
distinct = len({id(a), id(b), id(other_dirs)})
print(json.dumps({"loads": loads, "same": a is again, "distinct": distinct}))
""")
    )
    assert out == {"loads": ["A", "B", "A"], "same": True, "distinct": 3}


def test_launcher_sources_are_made_once_per_distinct_arguments():
    out = last_json(
        python("""
import json
from triton.backends.nvidia import driver as nvd
from qsa_warmup import triton_compat as tc
made = []
def make(constants, signature, tensordesc_meta):
    made.append(repr(constants))
    return f"src {constants} {signature}"
nvd.make_launcher = make
nvd.compile_module_from_src = lambda **kw: object()
tc.share_launcher_modules()
a = nvd.make_launcher({(2,): 1}, {0: "*fp32"}, None)
again = nvd.make_launcher({(2,): 1}, {0: "*fp32"}, None)
# True equals 1 in Python, but is not the same constant
flag = nvd.make_launcher({(2,): True}, {0: "*fp32"}, None)
print(json.dumps({"made": made, "same": a == again}))
""")
    )
    assert out == {"made": ["{(2,): 1}", "{(2,): True}"], "same": True}


def test_launcher_file_cache_lookup_matches_tritons(tmp_path):
    """``prepare_launchers`` builds what Triton's lookup would not find: the lookup must be
    Triton's own (checked against a real C module build)."""
    out = last_json(
        python(f"""
import json, os
from triton import knobs
knobs.cache.dir = {str(tmp_path / "triton")!r}
from triton.runtime.build import compile_module_from_src
from qsa_warmup.triton_compat import launchers as L
src = '''#include <Python.h>
static struct PyModuleDef mod = {{PyModuleDef_HEAD_INIT, "__triton_launcher", NULL, -1, NULL}};
PyMODINIT_FUNC PyInit___triton_launcher(void) {{ return PyModule_Create(&mod); }}
'''
before = L.launcher_in_file_cache(src)
compile_module_from_src(src=src, name="__triton_launcher")
print(json.dumps({{"before": before, "after": L.launcher_in_file_cache(src),
                  "other": L.launcher_in_file_cache(src + "// another launcher")}}))
""")
    )
    assert out == {"before": False, "after": True, "other": False}


def test_missing_launchers_are_built_at_once(tmp_path):
    out = last_json(
        python("""
import json, threading
from types import SimpleNamespace
from triton.backends.nvidia import driver as nvd
from qsa_warmup import triton_compat as tc
from qsa_warmup.triton_compat import launchers as L
both_running = threading.Barrier(2, timeout=20)  # two builds must overlap, or this times out
built = []
def build(src, name, library_dirs=None, include_dirs=None, libraries=None, ccflags=None):
    if src != "cached":
        both_running.wait()
    built.append(src)
nvd.make_launcher = lambda constants, signature, meta: signature[0]
nvd.compile_module_from_src = build
nvd.library_dirs = lambda: []
L.launcher_in_file_cache = lambda source: source == "cached"
def kernel(sig):
    fn = SimpleNamespace(arg_names=["x", "BLOCK"])
    return SimpleNamespace(src=SimpleNamespace(constants={"BLOCK": 4}, signature={0: sig}, fn=fn),
                           metadata=SimpleNamespace())
kernels = [kernel(s) for s in ("a", "b", "a", "cached", "b")]
n = tc.prepare_launchers(kernels, jobs=4)
print(json.dumps({"n": n, "built": sorted(built)}))
""")
    )
    assert out == {"n": 2, "built": ["a", "b"]}


def test_a_launcher_another_process_built_meanwhile_is_not_built_again():
    out = last_json(
        python("""
import contextlib, json
from types import SimpleNamespace
from triton.backends.nvidia import driver as nvd
from qsa_warmup import triton_compat as tc
from qsa_warmup.triton_compat import launchers as L
built, held = [], []
nvd.make_launcher = lambda constants, signature, meta: signature[0]
nvd.compile_module_from_src = lambda src, name, **kw: built.append(src)
nvd.library_dirs = lambda: []
in_cache = {"a": False, "b": False}
@contextlib.contextmanager
def guard(key):  # stands for the cross-process lock: "a" was built while this waited for it
    held.append(key == L._launcher_key("a") or key == L._launcher_key("b"))
    in_cache["a"] = True
    yield
L.launcher_in_file_cache = lambda source: in_cache[source]
kernels = [SimpleNamespace(src=SimpleNamespace(constants={}, signature={0: s}, fn=None),
                           metadata=None)
           for s in ("a", "b")]
n = tc.prepare_launchers(kernels, jobs=1, guard=guard)
print(json.dumps({"n": n, "built": built, "held": held}))
""")
    )
    assert out == {"n": 1, "built": ["b"], "held": [True, True]}


def test_every_replaced_triton_function_is_restored():
    out = last_json(
        python("""
import json
import triton.runtime.build as build
import triton.runtime.cache as rc
from triton import knobs
from triton.backends.nvidia import compiler as nvc
from triton.backends.nvidia import driver as nvd
from qsa_warmup import triton_compat as tc
owners = ((rc, "triton_key"), (nvc, "get_ptxas_version"), (build, "platform_key"),
          (nvd, "libcuda_dirs"), (nvd, "compile_module_from_src"), (nvd, "make_launcher"),
          (knobs.runtime, "jit_cache_hook"))
before = [getattr(o, n) for o, n in owners]
tc.install_memoized_toolchain_identity("/tmp/qsa-memo-restore-test")
tc.share_launcher_modules()
tc.install_jit_cache_hook(lambda variant, module: False)
replaced = [getattr(o, n) is not b for (o, n), b in zip(owners, before)]
restored = tc.restore()
back = [getattr(o, n) is b for (o, n), b in zip(owners, before)]
print(json.dumps({"replaced": replaced, "restored": restored, "back": back}))
""")
    )
    assert out == {"replaced": [True] * 7, "restored": 7, "back": [True] * 7}
