"""A kernel family defined here, through the public API only (qsa_warmup.families): planned,
built, checked, traced, explained, exported, imported and warmed up strictly; and the QSA
kernels found as a family by name."""

import json
import os

import pytest

from _subproc import child_env, cli, cli_json, python

TOY_FAMILY = '''
import random

import torch
import triton
import triton.language as tl

from qsa_warmup.errors import ConfigError
from qsa_warmup.families import Family, Launch, Point

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@triton.jit
def toy_scale_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2, mask=mask)


def toy_block(n, block):
    """The one dispatch function: the launcher and the family both call it."""
    return block if n > 64 else 64


def toy_launch(x, out, block):
    n = x.numel()
    b = toy_block(n, block)
    return Launch(toy_scale_kernel, (triton.cdiv(n, b),), (x, out, n), {"BLOCK": b})


def toy_scale(x, out, block):
    launch = toy_launch(x, out, block)
    launch.kernel[launch.grid](*launch.args, **launch.options)


class ToyFamily(Family):
    name = "toy"

    def config_from_dict(self, data):
        sizes, dtypes = data.get("sizes"), data.get("dtypes", ["float32"])
        if not isinstance(sizes, list) or not sizes or not all(
            isinstance(s, int) and s > 0 for s in sizes
        ):
            raise ConfigError("sizes", "must be a non-empty list of positive ints")
        if not isinstance(dtypes, list) or not set(dtypes) <= set(DTYPES):
            raise ConfigError("dtypes", f"must be a list drawn from {sorted(DTYPES)}")
        return {"sizes": sorted(sizes), "dtypes": dtypes, "block": int(data.get("block", 256))}

    def config_to_dict(self, config):
        return dict(config)

    def points(self, config, arch):
        for dtype in config["dtypes"]:
            for n in config["sizes"]:
                yield Point(f"toy.{dtype}.n{n}", (dtype, n), f"{n} elements")

    def launch_for(self, config, value, arch):
        dtype, n = value
        x = torch.empty(n, dtype=DTYPES[dtype])
        return toy_launch(x, torch.empty_like(x), config["block"])

    def sweep(self, config, seed):
        rng = random.Random(seed)
        calls = 0
        for _ in range(60):
            dtype = DTYPES[rng.choice(config["dtypes"])]
            x = torch.empty(rng.randint(1, max(config["sizes"])), dtype=dtype)
            toy_scale(x, torch.empty_like(x), config["block"])
            calls += 1
        return calls
'''

# sizes 1, 16, 17 (block 64) and 80, 100 (block 256): every class Triton specializes n on, at
# each block the dispatch picks, for any size up to 100
CONFIG = {"sizes": [1, 16, 17, 80, 100], "dtypes": ["float32", "bfloat16"]}


@pytest.fixture
def toy(tmp_path):
    (tmp_path / "toy_family.py").write_text(TOY_FAMILY)
    (tmp_path / "toy.json").write_text(json.dumps(CONFIG))
    env = child_env()
    env["PYTHONPATH"] = f"{tmp_path}{os.pathsep}{env['PYTHONPATH']}"
    return tmp_path, env


def _fam(toy, *args, config="toy.json"):
    folder, _ = toy
    return ("--family", "toy_family:ToyFamily", "--config", folder / config, *args)


def test_family_plan_prebuild_check_trace_explain(toy):
    folder, env = toy
    cache = folder / "cache"
    plan = cli_json("plan", *_fam(toy), env=env)
    assert {s["family"] for s in plan["specs"]} == {"toy"}
    assert len(plan["specs"]) == 10  # 5 sizes x 2 dtypes, each its own variant
    built = cli_json("prebuild", *_fam(toy, "--cache-dir", cache), env=env)
    assert built["compiled"] == 10 and built["failed"] == 0
    out = cli_json("check", *_fam(toy, "--cache-dir", cache, "--trace"), env=env)
    assert out["ok"] == 10 and out["trace"]["unplanned"] == [], out["trace"]
    assert out["trace"]["launches"] == 60
    spec = plan["specs"][0]["id"]
    assert cli_json("explain", spec, *_fam(toy, "--cache-dir", cache), env=env)["state"] == "ok"
    # a family whose envelope forgets a class (no size that is neither 1 nor a multiple of 16
    # at block 64) fails the trace, naming the variant
    (folder / "forgetful.json").write_text(json.dumps({**CONFIG, "sizes": [1, 16, 80, 100]}))
    forgot = cli_json(
        "check", *_fam(toy, "--cache-dir", cache, "--trace", config="forgetful.json"),
        env=env, expect=1,
    )  # fmt: skip
    assert forgot["trace"]["unplanned"] and all(
        v["kernel"] == "toy_scale_kernel" for v in forgot["trace"]["unplanned"]
    )


def test_family_export_import_and_strict_warmup(toy):
    folder, env = toy
    cache, other, bundle = folder / "cache", folder / "other", folder / "toy.qsa"
    cli_json("prebuild", *_fam(toy, "--cache-dir", cache), env=env)
    p = cli(
        "export", *_fam(toy, "--target", "sm_90", "--cache-dir", cache, "--out", bundle), env=env
    )
    assert p.returncode == 0, p.stderr
    p = cli("import", bundle, "--cache-dir", other, env=env)
    assert p.returncode == 0, p.stderr
    assert cli_json("check", *_fam(toy, "--cache-dir", other), env=env)["ok"] == 10
    out = python(
        f"""
        import json, torch, qsa_warmup
        from qsa_warmup import triton_compat as tc
        from qsa_warmup.errors import StrictModeError
        from qsa_warmup.families import deployment
        import toy_family
        dep = deployment("toy_family:ToyFamily", {CONFIG!r})
        report = qsa_warmup.warmup(dep, target="sm_90", cache_dir={str(other)!r}, strict="error")
        refused = None
        with tc.active_driver(tc.parse_target("sm_90")):
            x = torch.empty(100, dtype=torch.float16)  # a dtype the config does not serve
            try:
                toy_family.toy_scale(x, torch.empty_like(x), 256)
            except StrictModeError as exc:
                refused = str(exc)
        print(json.dumps(dict(planned=report.planned, loaded=report.loaded,
                              compiled=report.compiled, refused=refused)))
        """,
        env=env,
    )
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert (got["planned"], got["loaded"], got["compiled"]) == (10, 10, 0), got
    assert got["refused"] and "toy_scale_kernel" in got["refused"]


def test_family_config_errors_name_the_field(toy):
    folder, env = toy
    (folder / "bad.json").write_text(json.dumps({"sizes": [0]}))
    p = cli("plan", *_fam(toy, config="bad.json"), env=env)
    assert p.returncode == 2 and "sizes" in p.stderr and len(p.stderr.strip().splitlines()) == 1
    p = cli("plan", "--family", "no_such_family", "--config", folder / "toy.json", env=env)
    assert p.returncode == 2 and "no family named 'no_such_family'" in p.stderr


def test_qsa_is_a_family_found_by_name(tmp_path):
    cfg = tmp_path / "tiny.json"
    plain = cli_json("plan", "--preset", "tiny")
    cfg.write_text(json.dumps(plain["config"]))
    named = cli_json("plan", "--family", "qsa", "--config", cfg)
    assert [s["id"] for s in named["specs"]] == [s["id"] for s in plain["specs"]]
