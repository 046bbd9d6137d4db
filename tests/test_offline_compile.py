"""Real offline compiles for sm_90 (no GPU): every tile choice fits the H100/H200 shared memory."""

import json

import pytest

from _subproc import last_json, python

pytestmark = pytest.mark.slow


def test_scoring_variants_fit_sm90_shared_memory():
    p = python("""
        import json, torch
        from kernels import TensorMeta, decode_scores_launch, prefill_scores_launch
        from qsa_warmup import triton_compat as tc
        from qsa_warmup.cache import TARGET_LIMITS
        M = TensorMeta
        out = []
        with tc.active_driver(tc.parse_target("sm_90")):
            for dt in (torch.bfloat16, torch.float8_e4m3fn):
                for heads, dim in ((1, 64), (8, 256), (32, 128), (64, 64), (64, 256)):
                    pre = prefill_scores_launch(M((64, heads, dim), dt), M((4, 64, 1, dim), dt),
                                                M((2, 8), torch.int32), M((3,), torch.int32), M((64,), torch.int32),
                                                M((64, 512), torch.float32), 64, 0, 64, 512)
                    dec = decode_scores_launch(M((8, heads, dim), dt), M((4, 64, 1, dim), dt), M((2, 8), torch.int32),
                                               M((8,), torch.int32), M((8, 512), torch.float32), 4)
                    for name, launch in (("prefill", pre), ("decode", dec)):
                        info = tc.compiled_info(launch.warmup())
                        out.append([name, str(dt), heads, dim, info.shared, info.threads])
        print(json.dumps({"limit": TARGET_LIMITS[90][0], "variants": out}))
    """, timeout=900)
    result = last_json(p)
    too_big = [v for v in result["variants"] if v[4] > result["limit"]]
    assert len(result["variants"]) == 20 and not too_big, too_big
