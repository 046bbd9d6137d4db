"""Several warmups in one process: other configs, other folders, the same again; strict mode
covers everything warmed. Offline (sm_90) on the CPU; the GPU version runs real launches."""

import json

import pytest

from _subproc import cli_json, last_json, python

REPEAT = """
import json, logging
logging.basicConfig(level=logging.WARNING)
import torch, qsa_warmup, kernels
from kernels import TensorMeta as M
from qsa_warmup import triton_compat as tc
from qsa_warmup.errors import StrictModeError
from qsa_warmup.planner import build_plan

tiny = qsa_warmup.load_config(preset="tiny")
# other decode and prefill variants
other = tiny.replace(num_heads=8, head_dim=128, max_decode_query_len=3)
TARGET = {target!r}
DEVICE = {device!r}
kw = dict(target=TARGET) if TARGET else {{}}
reports = [qsa_warmup.warmup(tiny, cache_dir={a!r}, strict="error", **kw),
           qsa_warmup.warmup(other, cache_dir={a!r}, strict="error", **kw),  # compiles under strict
           qsa_warmup.warmup(tiny, cache_dir={b!r}, strict="error", **kw),  # a cold folder
           qsa_warmup.warmup(tiny, cache_dir={a!r}, strict="error", **kw)]    # a repeat
requests = []
target = TARGET or tc.target_name(tc.current_gpu_target())
offline = tc.parse_target(target) if TARGET else None
with tc.active_driver(offline):
    with tc.capture_requests(block=False) as seen:
        for cfg in (tiny, other):  # every planned launch of both is in memory: no request at all
            for spec in build_plan(cfg, target, offline=offline is not None).specs:
                spec.launch.warmup()
    requests = len(seen)
    unplanned = kernels.ragged_topk_launch(M((2, 3000), torch.float32), M((2,), torch.int32), 16,
                                           M((2, 16), torch.int32))
    try:
        unplanned.warmup()
        outcome = "compiled"
    except StrictModeError as exc:
        outcome = exc.closest
rows = [[r.planned, r.loaded, r.compiled, r.repeat, r.warnings] for r in reports]
print(json.dumps({{"reports": rows,
                   "requests_after": requests, "strict": outcome}}))
"""


def test_repeat_warmups_in_one_process(tmp_path):
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    out = last_json(python(REPEAT.format(a=a, b=b, target="sm_90", device=None)))
    first, second, cold, repeat = out["reports"]
    assert first[:3] == [5, 5, 5] and not first[3]  # cold: the pool compiled 5, all 5 loaded
    assert second[1] == second[0] and second[2] > 0 and not second[4], second
    assert cold[:3] == [5, 5, 5] and not cold[4], (
        cold
    )  # the kernels were in memory; folder b still built
    assert repeat[3] is True
    assert out["requests_after"] == 0
    assert out["strict"] == "topk.single.b1024.w4"  # raised, naming the closest planned variant
    for root in (a, b):
        assert cli_json("check", "--preset", "tiny", "--cache-dir", root)["ok"] == 5


@pytest.mark.gpu
def test_repeat_warmups_on_the_gpu(tmp_path):
    # real launches after four warmups: nothing compiles, results match the reference
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    code = (
        REPEAT.format(a=a, b=b, target=None, device=0)
        + """
from triton import knobs
from kernels import reference as ref
compiles = []
knobs.compilation.listener = lambda **kw: compiles.append(kw["metadata"]["name"])
gen = torch.Generator(device="cuda").manual_seed(1)
wrong = 0
for cfg in (tiny, other):
    rows = 3
    q = torch.randn(rows, cfg.num_heads, cfg.head_dim, device="cuda", generator=gen)
    q = q.to(torch.bfloat16)
    k_cache = torch.randn(64, cfg.page_size, 1, cfg.head_dim, device="cuda", generator=gen)
    k_cache = k_cache.to(torch.bfloat16)
    table = torch.randint(0, 64, (rows, cfg.page_table_width), device="cuda", generator=gen,
                          dtype=torch.int32)
    visible = torch.full((rows,), cfg.num_columns, device="cuda", dtype=torch.int32)
    out = torch.full((rows, cfg.block_topk), -7, device="cuda", dtype=torch.int32)
    ratio = cfg.compress_ratio
    kernels.qsa_select_paged_decode(q, k_cache, table, visible, cfg.token_topk, ratio, 1, out)
    scores = ref.decode_scores(q.cpu(), k_cache.cpu(), table.cpu(), visible.cpu(), 1)
    want = ref.select_blocks(scores, visible.cpu(), cfg.block_topk)
    for r in range(rows):
        got, exp = out[r].cpu().long(), want[r]
        chosen, best = scores[r, got].sort().values, scores[r, exp].sort().values
        wrong += int(not torch.allclose(chosen, best, rtol=1e-3))
torch.cuda.synchronize()
print(json.dumps({"compiles": compiles, "wrong": wrong}))
"""
    )
    p = python(code)
    assert json.loads(p.stdout.strip().splitlines()[-2])["requests_after"] == 0
    assert last_json(p) == {"compiles": [], "wrong": 0}


def test_warmups_for_two_offline_targets_keep_each_targets_kernels(tmp_path):
    # Triton keeps compiled kernels per device index: two offline targets must not share one
    root = str(tmp_path / "c")
    out = last_json(
        python(f"""
        import json, qsa_warmup
        from qsa_warmup import triton_compat as tc
        from qsa_warmup.planner import build_plan
        tiny = qsa_warmup.load_config(preset="tiny")
        targets = ("sm_90", "sm_80")
        reports = [qsa_warmup.warmup(tiny, cache_dir={root!r}, target=t) for t in targets]
        archs = {{}}
        for target in ("sm_90", "sm_80"):
            with tc.active_driver(tc.parse_target(target)):
                archs[target] = sorted({{s.launch.warmup().metadata.target.arch
                                         for s in build_plan(tiny, target).specs}})
        print(json.dumps({{"loaded": [r.loaded for r in reports], "archs": archs}}))
        """)
    )
    assert out == {"loaded": [5, 5], "archs": {"sm_90": [90], "sm_80": [80]}}
    assert (
        cli_json("check", "--preset", "tiny", "--target", "sm_80", "--cache-dir", root)["ok"] == 5
    )
