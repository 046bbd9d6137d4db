"""Direct launches (``KernelLaunch.run`` skipping Triton's binder for a specialization seen
before): the direct key must never merge two launches that Triton's own key tells apart."""

import json

import pytest

from _subproc import last_json, python


def test_direct_key_is_at_least_as_fine_as_tritons():
    p = python("""
        import json, itertools, torch
        from triton import knobs
        from kernels import TensorMeta as M, decode_scores_launch, ragged_topk_launches, expand_launch
        from kernels import TopkConfig
        from kernels._launch import _direct_key
        from qsa_warmup import triton_compat as tc
        launches = []
        with tc.active_driver(tc.parse_target("sm_90")):
            for mis_table, mis_vis, width in itertools.product((0, 4, 8), (0, 4), (8, 16, 17)):
                table = M((4, width), torch.int32, stride=(width + (mis_vis == 4), 1), misalign=mis_table)
                launches.append(decode_scores_launch(M((8, 8, 64), torch.bfloat16), M((64, 64, 1, 64), torch.bfloat16),
                                                     table, M((8,), torch.int32, misalign=mis_vis),
                                                     M((8, width * 64), torch.float32), 2))
            for rows, cols, stride, k, mis in itertools.product((1, 3), (1, 16, 40, 9000), (None, 16, 9008, 9009),
                                                                 (1, 16, 17), (0, 4)):
                if stride is not None and stride < cols:
                    continue
                logits = M((rows, cols), torch.float32, stride=(stride or cols, 1))
                for l in ragged_topk_launches(logits, M((rows,), torch.int32, misalign=mis), k,
                                              M((rows, k), torch.int32, misalign=mis)):
                    launches.append(l)
            for mis in (0, 4):
                launches.append(expand_launch(M((5, 16), torch.int32, misalign=mis), M((5,), torch.int32),
                                              M((5,), torch.int32, misalign=mis), 4, 64, M((5, 68), torch.int32)))
            knobs.runtime.interpret = False
            groups = {}
            for l in launches:
                direct = _direct_key(l)
                assert direct is not None, l.kernel_name
                groups.setdefault(repr(direct), set()).add((l.kernel_name, tc._bind(l, with_hash=False)[1]))
        merged = [sorted(map(str, v)) for v in groups.values() if len(v) > 1]
        triton_keys = set().union(*groups.values())
        print(json.dumps({"launches": len(launches), "direct": len(groups), "triton": len(triton_keys),
                          "merged": merged[:3]}))
    """, timeout=600)
    r = last_json(p)
    assert not r["merged"], r["merged"]
    # the sweep reaches several of Triton's specializations per kernel, or the check proves little
    assert r["triton"] >= 8 and r["direct"] >= r["triton"], r


def test_direct_key_declines_the_interpreter_and_odd_arguments():
    p = python("""
        import json, torch
        from triton import knobs
        from kernels import KernelLaunch, TensorMeta as M, ragged_topk_launch
        from kernels._launch import _direct_key
        from qsa_warmup import triton_compat as tc
        with tc.active_driver(tc.parse_target("sm_90")):
            l = ragged_topk_launch(M((2, 64), torch.float32), M((2,), torch.int32), 4, M((2, 4), torch.int32))
            knobs.runtime.interpret = False
            plain = _direct_key(l) is not None
            odd = _direct_key(KernelLaunch(l.kernel, l.grid, l.args[:-1] + (4.0,), l.options)) is None
            flag = _direct_key(KernelLaunch(l.kernel, l.grid, l.args[:-1] + (True,), l.options)) is None
            knobs.runtime.interpret = True
            interp = _direct_key(l) is None
        print(json.dumps([plain, odd, flag, interp]))
    """)
    assert last_json(p) == [True, True, True, True]
