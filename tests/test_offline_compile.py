"""Real offline compiles for sm_90 (no GPU): every tile choice fits the H100/H200 shared memory."""

import pytest

from _subproc import last_json, python

pytestmark = pytest.mark.slow


def test_scoring_variants_fit_sm90_shared_memory():
    p = python(
        """
        import json, torch
        from kernels import TensorMeta, decode_scores_launch, prefill_scores_launch
        from qsa_warmup import triton_compat as tc
        M = TensorMeta
        out = []
        with tc.active_driver(tc.parse_target("sm_90")):
            for dt in (torch.bfloat16, torch.float8_e4m3fn):
                for heads, dim in ((1, 64), (8, 256), (32, 128), (64, 64), (64, 256)):
                    pre = prefill_scores_launch(M((64, heads, dim), dt), M((4, 64, 1, dim), dt),
                                                M((2, 8), torch.int32), M((3,), torch.int32),
                                                M((64,), torch.int32),
                                                M((64, 512), torch.float32), 64, 0, 64, 512)
                    dec = decode_scores_launch(M((8, heads, dim), dt), M((4, 64, 1, dim), dt),
                                               M((2, 8), torch.int32),
                                               M((8,), torch.int32), M((8, 512), torch.float32), 4)
                    for name, launch in (("prefill", pre), ("decode", dec)):
                        info = tc.compiled_info(launch.warmup())
                        out.append([name, str(dt), heads, dim, info.shared, info.threads])
        print(json.dumps({"limit": tc.target_limits(90)[0], "variants": out}))
    """,
        timeout=900,
    )
    result = last_json(p)
    too_big = [v for v in result["variants"] if v[4] > result["limit"]]
    assert len(result["variants"]) == 20 and not too_big, too_big


def test_every_topk_path_compiles_for_sm90():
    # the interpreter runs code that a GPU compile may refuse (an early return in a branch on a
    # runtime value did): each top-k path's launches, dispatched or not (the split path fused
    # and finished apart, over group maxima and over every key; coop at each chunk and at a
    # 4096-candidate list; the split path with and without its programmatic dependent collect
    # launch; one program per row, in registers and streaming, and listing its candidates),
    # built for sm_90, each named by the planner's spec id for its path
    p = python(
        """
        import json, torch
        from kernels import (TensorMeta, TopkConfig, ragged_topk_launches, topk_launch_config,
                             topk_tuning_configs)
        M = TensorMeta
        from qsa_warmup import triton_compat as tc
        from qsa_warmup.qsa.planning import _topk_spec_id
        cases = [(64, 32768, 512, None), (1024, 32768, 512, None), (1, 2048, 512, None),
                 (8, 65536, 4096, None), (4, 40000, 64, TopkConfig("streaming", 8192, 16, 1024))]
        for rows, cols, k in ((8, 16384, 512), (8, 65536, 2048)):
            cases += [(rows, cols, k, cfg) for cfg in topk_tuning_configs(cols, k, rows).values()
                      if cfg.path == "coop"]
        cases.append((64, 32768, 512, topk_tuning_configs(32768, 512, 64)["launch.after"]))
        for rows, cols in ((256, 8192), (64, 2048)):
            designs = topk_tuning_configs(cols, 512, rows).values()
            cases += [(rows, cols, 512, cfg) for cfg in designs if cfg.path == "listed"]
        built, failed, waits, ids = [], [], [], {}
        with tc.active_driver(tc.parse_target("sm_90")):
            for rows, cols, k, cfg in cases:
                cfg = cfg or topk_launch_config(cols, k, rows)
                for launch in ragged_topk_launches(M((rows, cols), torch.float32),
                                                   M((rows,), torch.int32), k,
                                                   M((rows, k), torch.int32), cfg):
                    try:
                        ptx = launch.warmup().asm["ptx"]
                        built.append(launch.kernel_name)
                        ids.setdefault(launch.kernel_name, []).append(_topk_spec_id(launch))
                        if cfg.path == "split":
                            waits.append([cfg.dependent_launch, launch.kernel_name,
                                          "griddepcontrol.wait" in ptx,
                                          "griddepcontrol.launch_dependents" in ptx,
                                          launch.options.get("launch_pdl", False)])
                    except Exception as exc:
                        failed.append([rows, cols, k, cfg.path, launch.kernel_name,
                                       type(exc).__name__])
        print(json.dumps({"built": built, "failed": failed, "waits": waits, "ids": ids}))
    """,
        timeout=900,
    )
    result = last_json(p)
    assert not result["failed"], result["failed"]
    # (config's dependent collect; launch; it waits, it lets its dependent start, it is launched
    # as a dependent): a split path's collect launch waits for the bound launch and is launched
    # as its dependent where the config says so (the dispatch does for sm_90); the bound launch
    # lets it start early only then, and no other launch does either
    waits = {tuple(w) for w in result["waits"]}
    assert waits == {
        (True, "_split_bound_kernel", False, True, False),
        (True, "_split_collect_kernel", True, False, True),
        (True, "_split_finish_kernel", False, False, False),
        (False, "_split_bound_kernel", False, False, False),
        (False, "_split_collect_kernel", False, False, False),
    }, waits
    assert set(result["built"]) == {
        "_ragged_topk_kernel",
        "_split_bound_kernel",
        "_split_collect_kernel",
        "_split_finish_kernel",
        "_coop_topk_kernel",
        "_listed_topk_kernel",
    }, result
    paths = {name: {i.split(".")[1] for i in ids} for name, ids in result["ids"].items()}
    assert paths == {
        "_ragged_topk_kernel": {"single", "streaming"},
        "_split_bound_kernel": {"split"},
        "_split_collect_kernel": {"split"},
        "_split_finish_kernel": {"split"},
        "_coop_topk_kernel": {"coop"},
        "_listed_topk_kernel": {"listed"},
    }, paths
    # the listed designs (3 warp counts, 2 list passes, 2 widths) are told apart by their ids
    assert len(set(result["ids"]["_listed_topk_kernel"])) == 10


def test_fast_loader_builds_what_triton_builds(tmp_path):
    """The hook's loader (no compile()) yields the same CompiledKernel, under the same in-memory
    key, as Triton's own cache-hit path; a wrong compile hash is refused."""
    p = python(f"""
        import json, os, torch
        from qsa_warmup import triton_compat as tc
        from qsa_warmup.qsa.config import load_config
        from qsa_warmup.qsa.planning import launch_for
        from triton.compiler.compiler import CompiledKernel
        tc.set_triton_cache({str(tmp_path)!r})
        tc.store_binaries_only(True)
        with tc.active_driver(tc.parse_target("sm_90")):
            cfg = load_config(preset="tiny")
            launch = launch_for(cfg, "expand", (cfg.position_dtypes[0],))
            built = launch.warmup()
            folder = os.path.join({str(tmp_path)!r}, tc.file_cache_dirname(built.hash))
            files = sorted(os.listdir(folder))
            group = {{n: os.path.join(folder, n) for n in files if not n.startswith("__grp__")}}
            ref = CompiledKernel(built.src, group, built.hash)
            mine = tc.compiled_kernel_from_files(built.src, group, built.hash)
            same = {{k: (getattr(ref, k) == getattr(mine, k)) for k in vars(ref)}}
            from triton.runtime.driver import driver
            cache = launch.kernel.device_caches[driver.active.get_current_device()][0]
            (key,) = list(cache)
            cache.clear()
            refused = tc.load_from_entry(launch, folder, files, "0" * 64)
            refused_planned = tc.load_from_entry(launch, folder, files, built.hash,
                                                 planned_hash="1" * 64)
            loaded = tc.load_from_entry(launch, folder, files, built.hash)
            cache.clear()
            loaded_planned = tc.load_from_entry(launch, folder, files, built.hash,
                                                planned_hash=built.hash)
            cache.clear()
            data = tc.specialization_data(launch)
            unbound = tc.load_from_entry(launch, folder, files, built.hash, planned_hash=built.hash,
                                         specialization=data)
            unbound_src = all(getattr(unbound.src, a) == getattr(built.src, a)
                              for a in ("signature", "constants", "attrs", "name"))
            unbound_key = list(cache) == [key] and unbound.kernel == built.kernel
            print(json.dumps({{"unbound_src": unbound_src, "unbound_key": unbound_key,"same": same,
                               "attrs_equal": sorted(vars(ref)) == sorted(vars(mine)),
                               "refused": refused is None and refused_planned is None,
                               "key_again": list(cache) == [key],
                               "binary_equal": loaded.kernel == built.kernel,
                               "planned_equal": loaded_planned.kernel == built.kernel}}))
    """)
    r = last_json(p)
    assert r["attrs_equal"] and all(r["same"].values()), r["same"]
    assert r["refused"] and r["key_again"] and r["binary_equal"] and r["planned_equal"]
    # from the plan's memoized binding (no binder call): same key, same source description
    assert r["unbound_src"] and r["unbound_key"], r


def test_plan_memo_holds_current_compile_hashes():
    """The hook trusts a plan's compile hashes (memoized under the toolchain fingerprint and the
    kernels' digest) instead of re-hashing the kernels' source: they must be what Triton would
    compute now, whether the plan was computed or read back from its memo."""
    p = python("""
        import json
        from qsa_warmup import triton_compat as tc
        from qsa_warmup.qsa.config import load_config
        from qsa_warmup.planner import build_plan
        cfg = load_config(preset="default")
        fresh = build_plan(cfg, "sm_90", offline=True)
        memo = json.loads(json.dumps(fresh.to_memo()))
        again = build_plan(cfg, "sm_90", offline=True, memo=memo)
        with tc.active_driver(tc.parse_target("sm_90")):
            now = {s.id: tc.compile_hash_of(s.launch) for s in again.specs}
            binding = {s.id: tc.specialization_data(s.launch) for s in again.specs}
        print(json.dumps({"n": len(now),
                          "fresh": all(now[s.id] == s.compile_hash for s in fresh.specs),
                          "bindings": all(binding[s.id] == s.specialization for s in again.specs),
                          "memo": all(now[s.id] == s.compile_hash for s in again.specs),
                          "ids": [s.id for s in fresh.specs] == [s.id for s in again.specs]}))
    """)
    r = last_json(p)
    assert r["n"] > 10 and r["fresh"] and r["memo"] and r["ids"] and r["bindings"], r


@pytest.mark.parametrize(
    "first", ["_split_finish_kernel", "_ragged_topk_kernel", "_split_collect_kernel"]
)
def test_compile_hashes_do_not_depend_on_what_hashed_first(first):
    """Triton folds a helper's constexpr globals into a caller's source hash only when the helper
    was hashed first (in 3.6), so a server that touched one kernel before warmup, or a worker that
    compiled another spec first, computed other hashes than the prebuild and refused its entries.
    The planner settles every kernel's hash first; whatever hashed first, the plan is the same."""
    code = """
        import json, sys
        import kernels
        from kernels import topk
        FIRST = {first!r}
        if FIRST:
            getattr(topk, FIRST).cache_key
        from qsa_warmup.qsa.config import load_config
        from qsa_warmup.planner import build_plan
        plan = build_plan(load_config(preset="default"), "sm_90", offline=True)
        print(json.dumps({{s.id: s.compile_hash for s in plan.specs}}))
    """
    plain = last_json(python(code.format(first="")))
    touched = last_json(python(code.format(first=first)))
    assert len(plain) > 10 and touched == plain


def test_topk_launches_hold_their_registers_for_sm90():
    # Registers decide how many programs stay resident, and a change can raise them with no
    # test failing: moving the scan's chunk load above the row-bound reads took the 2-warp
    # scan-only collect from 96 to 162 registers and 4096 x 32K from 602 to 672 us (H100;
    # docs/benchmarks.md). Each dispatched top-k launch of these shapes, built for sm_90 and
    # run through ptxas -v (Triton's own), holds at most its budget (its registers when
    # measured, plus 8) and spills nothing. The finishing programs of the split path read
    # every slot of the row's list with its count (benchmarks/kernel_work/finish_reads/): 98 ->
    # 114 registers in the fused collect launch, 127 -> 177 in the finish of 4096-key lists,
    # whose launches have one program a row (none waits for registers).
    budgets = {
        (64, 32768, 512): {"_split_bound_kernel": 48, "_split_collect_kernel": 122},
        (4096, 32768, 512): {
            "_split_bound_kernel": 48,
            "_split_collect_kernel": 104,
            "_split_finish_kernel": 129,
        },
        (256, 8192, 512): {
            "_split_bound_kernel": 48,
            "_split_collect_kernel": 104,
            "_split_finish_kernel": 129,
        },
        (64, 131072, 2048): {
            "_split_bound_kernel": 48,
            "_split_collect_kernel": 64,
            "_split_finish_kernel": 185,
        },
        (8, 32768, 512): {"_coop_topk_kernel": 175},
        (8, 8192, 512): {"_coop_topk_kernel": 157},  # 512-key chunks
        (1, 2048, 512): {"_ragged_topk_kernel": 104},
    }
    p = python(
        f"""
        import json, re, subprocess, tempfile, os, torch
        from triton.backends.nvidia.compiler import get_ptxas
        from kernels import TensorMeta as M, ragged_topk_launches, topk_launch_config
        from qsa_warmup import triton_compat as tc
        out = []
        with tc.active_driver(tc.parse_target("sm_90")):
            for rows, cols, k in {sorted(budgets)!r}:
                cfg = topk_launch_config(cols, k, rows)
                for launch in ragged_topk_launches(M((rows, cols), torch.float32),
                                                   M((rows,), torch.int32), k,
                                                   M((rows, k), torch.int32), cfg):
                    with tempfile.TemporaryDirectory() as d:
                        ptx = os.path.join(d, "k.ptx")
                        with open(ptx, "w") as f:
                            f.write(launch.warmup().asm["ptx"])
                        log = subprocess.run([get_ptxas(90).path, "-v", "--gpu-name", "sm_90a",
                                              ptx, "-o", os.path.join(d, "k.o")],
                                             capture_output=True, text=True).stderr
                    regs = int(re.search(r"Used (\\d+) registers", log)[1])
                    spills = int(re.search(r"(\\d+) bytes spill stores", log)[1])
                    out.append([rows, cols, k, launch.kernel_name, regs, spills])
        print(json.dumps(out))
    """,
        timeout=900,
    )
    measured = last_json(p)
    seen = {(r, c, k, name): (regs, spills) for r, c, k, name, regs, spills in measured}
    want = {(*shape, name): cap for shape, caps in budgets.items() for name, cap in caps.items()}
    assert set(seen) == set(want), sorted(set(seen) ^ set(want))
    over = {key: seen[key] for key in want if seen[key][0] > want[key] or seen[key][1]}
    assert not over, over
