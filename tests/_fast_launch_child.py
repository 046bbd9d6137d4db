"""Child process of test_fast_launch (compiled-mode Triton, no GPU): every launch is bound by
Triton's own binder under the offline sm_90 driver, and ``triton.compiler.compile`` is replaced
by a recorder, so each variant Triton chooses is a distinct object that records the launcher
call made to it. Prints one JSON object of findings."""

import contextlib
import json
import random
import sys
import threading

import torch
import triton
import triton.language as tl
from triton.knobs import HookChain

from kernels import _fast_launch as fl

CALLS = []


class RecordingKernel:
    """Stands in for a CompiledKernel: the launcher call is recorded, never made."""

    def __init__(self, options):
        self.function = object()
        self.packed_metadata = ("packed", id(self))
        self.options = options

    def launch_metadata(self, grid, stream, *args):
        return None

    def run(self, *call):
        CALLS.append((self, call))


def record_compile(src, target=None, options=None):
    return RecordingKernel(options)


@triton.jit(do_not_specialize=["n_free"], do_not_specialize_on_alignment=["y_ptr"])
def probe(x_ptr, y_ptr, n, n_free, flag, scale, BLOCK: tl.constexpr, ON: tl.constexpr):
    offsets = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offsets, mask=offsets < n + n_free)
    if flag and ON:
        x = x * scale
    tl.store(y_ptr + offsets, x, mask=offsets < n)


def _tensor(dtype, misaligned):
    base = torch.zeros(64, dtype=dtype)
    return base[1:] if misaligned else base


POOLS = {
    "x": [(torch.float32, False), (torch.float32, True), (torch.float16, False)],
    "y": [(torch.float32, False), (torch.float32, True), (torch.int32, False)],
    "n": [1, 16, 17, 32, 2**31, -16, 2**40],
    "n_free": [1, 16, 17, 2**33],
    "flag": [True, False],
    "scale": [1.0, 2.5, 1e300],
    "BLOCK": [16, 32],
    "ON": [True, False, 1, 0],
    "num_warps": [1, 4],
}


def _no_hook(a):
    # an empty launch-hook chain calls nothing: the same launch as no hook
    return None if isinstance(a, HookChain) and not a.calls else a


def _call_description(call):
    # tensors by identity, everything else by type and value
    return [
        (type(a).__name__, id(a) if isinstance(a, torch.Tensor) else a) for a in map(_no_hook, call)
    ]


def _both_ways(launch):
    """(what Triton's run launched, what the fast path launched) for one launch."""
    CALLS.clear()
    with fl.triton_launches_only():
        launch()
    via_triton = list(CALLS)
    CALLS.clear()
    launch()
    via_fast = list(CALLS)
    return via_triton, via_fast


def random_probe_launches(count, seed):
    """Random launches of ``probe`` in pairs that differ in one property (an argument's
    dtype, alignment or int class, a constexpr's value or type, an option), each launched
    twice: the fast path must launch what Triton's run launches, every time."""
    rng = random.Random(seed)
    tensors = {}
    mismatches = []

    def launch(pick):
        x = tensors.setdefault(("x", pick["x"]), _tensor(*pick["x"]))
        y = tensors.setdefault(("y", pick["y"]), _tensor(*pick["y"]))
        args = (x, y, pick["n"], pick["n_free"], pick["flag"], pick["scale"])
        options = dict(BLOCK=pick["BLOCK"], ON=pick["ON"], num_warps=pick["num_warps"])
        via_triton, via_fast = _both_ways(lambda: fl.launch(probe, (2, 3), args, options))
        if len(via_triton) != 1 or len(via_fast) != 1:
            mismatches.append({"pick": repr(pick), "why": "not launched once each way"})
            return
        (kt, ct), (kf, cf) = via_triton[0], via_fast[0]
        if kt is not kf or _call_description(ct) != _call_description(cf):
            mismatches.append({"pick": repr(pick)})

    for _ in range(count):
        base = {name: rng.choice(pool) for name, pool in POOLS.items()}
        name = rng.choice(sorted(POOLS))
        other = dict(base, **{name: rng.choice(POOLS[name])})
        for pick in (base, other, base, other):
            launch(pick)
    variants = len(probe.device_caches[-90][0])
    return {"mismatches": mismatches, "variants": variants, "stats": fl.fast_launch_stats()}


def _launch_bound_to_the_fast_path():
    """(args, options) of a probe launch made twice: bound, then taken on the fast path."""
    x, y = _tensor(torch.float32, False), _tensor(torch.float32, False)
    args = (x, y, 32, 5, True, 1.0)
    options = dict(BLOCK=16, ON=True)
    fl.launch(probe, (1,), args, options)
    fl.launch(probe, (1,), args, options)
    return args, options


def forgotten_cache_goes_through_triton():
    args, options = _launch_bound_to_the_fast_path()
    before = fl.fast_launch_stats()
    old = probe.device_caches[-90][0]
    requests = []
    triton.knobs.runtime.jit_cache_hook = lambda **kw: requests.append(kw["key"]) and False
    probe.device_caches.clear()  # what a rebuild does to a kernel's in-memory cache
    CALLS.clear()
    fl.launch(probe, (1,), args, options)
    triton.knobs.runtime.jit_cache_hook = None
    after = fl.fast_launch_stats()
    new = probe.device_caches[-90][0]
    return {
        "triton_launches": after["triton"] - before["triton"],
        "hook_asked": len(requests),
        "launched_new_kernel": CALLS[-1][0] is next(iter(new.values())) and new is not old,
    }


def enter_hook_goes_through_triton():
    args, options = _launch_bound_to_the_fast_path()
    entered = []
    before = fl.fast_launch_stats()
    chain = triton.knobs.runtime.launch_enter_hook
    chain.add(entered.append)
    CALLS.clear()
    fl.launch(probe, (1,), args, options)
    chain.remove(entered.append)
    after = fl.fast_launch_stats()
    hook_passed = CALLS[-1][1][7] is chain  # the launcher receives the enter hook
    return {"triton_launches": after["triton"] - before["triton"], "hook_passed": hook_passed}


def triton_path_is_per_thread():
    """Launches of the same bound probe in this thread and in another, while this thread is
    inside ``triton_launches_only()``: how many went through Triton's run in each."""
    args, options = _launch_bound_to_the_fast_path()

    def triton_launches(launch_in):
        before = fl.fast_launch_stats()["triton"]
        launch_in()
        return fl.fast_launch_stats()["triton"] - before

    def here():
        fl.launch(probe, (1,), args, options)

    def in_another_thread():
        thread = threading.Thread(target=here)
        thread.start()
        thread.join()

    with fl.triton_launches_only():
        found = {"this thread": triton_launches(here), "other": triton_launches(in_another_thread)}
    found["after"] = triton_launches(here)
    return found


def _tensor_ptrs(tensors):
    return {t.data_ptr() for t in tensors if isinstance(t, torch.Tensor)}


def _call_meta(call, user_ptrs):
    out = []
    for a in map(_no_hook, call):
        if isinstance(a, torch.Tensor):
            ptr = a.data_ptr()
            out.append((str(a.dtype), tuple(a.shape), ptr if ptr in user_ptrs else None))
        else:
            out.append((type(a).__name__, repr(a)))
    return out


def op_launches():
    """The ops' own launches (every top-k path, decode and prefill select, expansion), made
    through Triton and through the fast path: the same kernels, called the same way."""
    from kernels import (
        TopkConfig,
        expand_qsa_block_indices,
        qsa_select_paged_decode,
        qsa_select_paged_prefill,
        ragged_topk,
        ragged_topk_launches,
    )

    gen = torch.Generator().manual_seed(0)
    results = {}

    def compare(name, run, user):
        user_ptrs = _tensor_ptrs(user)
        run()  # bind every variant once (first launches go through Triton)
        before = fl.fast_launch_stats()["prepared"]
        via_triton, via_fast = _both_ways(run)
        same = len(via_triton) == len(via_fast) and all(
            kt is kf and _call_meta(ct, user_ptrs) == _call_meta(cf, user_ptrs)
            for (kt, ct), (kf, cf) in zip(via_triton, via_fast)
        )
        prepared = fl.fast_launch_stats()["prepared"] - before
        results[name] = {"launches": len(via_triton), "same": same, "prepared": prepared}

    for cols, k in [(3000, 64), (12000, 512), (40000, 2048)]:
        rows = 3
        logits = torch.randn(rows, cols, generator=gen)
        lengths = torch.tensor([cols, k // 2, cols - 7], dtype=torch.int32)
        out = torch.empty(rows, k, dtype=torch.int32)
        compare(
            f"topk_{cols}x{k}",
            lambda logits=logits, lengths=lengths, k=k, out=out: ragged_topk(
                logits, lengths, k, out
            ),
            [logits, lengths, out],
        )
    logits = torch.randn(4, 12000, generator=gen)
    lengths = torch.full((4,), 12000, dtype=torch.int32)
    out = torch.empty(4, 512, dtype=torch.int32)
    apart = TopkConfig("split", 4096, 8, 1024, candidates=2048, collect_warps=8, finish_warps=4)

    def split_apart():
        for launch in ragged_topk_launches(logits, lengths, 512, out, config=apart):
            launch.run()

    compare("topk_split_apart", split_apart, [logits, lengths, out])

    dtype = torch.bfloat16
    heads, head_dim, page = 8, 128, 16
    k_cache = torch.randn(40, page, 1, head_dim, generator=gen).to(dtype)
    q = torch.randn(2, heads, head_dim, generator=gen).to(dtype)
    table = torch.randint(0, 40, (2, 8), generator=gen, dtype=torch.int32)
    visible = torch.tensor([128, 77], dtype=torch.int32)
    block_indices = torch.empty(2, 16, dtype=torch.int32)
    compare(
        "decode_select",
        lambda: qsa_select_paged_decode(q, k_cache, table, visible, 64, 4, 1, block_indices),
        [q, k_cache, table, visible, block_indices],
    )
    # a table wide enough for the split top-k: its workspace is allocated on every call
    wide = torch.randint(0, 40, (2, 600), generator=gen, dtype=torch.int32)
    wide_visible = torch.tensor([9600, 9000], dtype=torch.int32)
    compare(
        "decode_select_split",
        lambda: qsa_select_paged_decode(q, k_cache, wide, wide_visible, 64, 4, 1, block_indices),
        [q, k_cache, wide, wide_visible, block_indices],
    )
    results["decode_select_still_checked"] = _refusals_after_preparation(
        lambda **kw: qsa_select_paged_decode(
            kw.get("q", q), k_cache, table, visible, 64, 4, 1, kw.get("out", block_indices)
        ),
        q,
        block_indices,
    )
    results["decode_select_gives_way"] = _prepared_call_gives_way(
        lambda: qsa_select_paged_decode(q, k_cache, table, visible, 64, 4, 1, block_indices)
    )
    qp = torch.randn(6, heads, head_dim, generator=gen).to(dtype)
    starts = torch.tensor([0, 6], dtype=torch.int32)
    seen = torch.tensor([80, 81, 90, 100, 110, 128], dtype=torch.int32)
    selected = torch.empty(6, 16, dtype=torch.int32)
    compare(
        "prefill_select",
        lambda: qsa_select_paged_prefill(
            qp, k_cache, table[:1].contiguous(), starts, seen, 64, 4, 6, selected, 128
        ),
        [qp, k_cache, starts, seen, selected],
    )
    positions = torch.arange(6, dtype=torch.int32)
    tokens = torch.empty(6, 64 + 4, dtype=torch.int32)
    compare(
        "expand",
        lambda: expand_qsa_block_indices(selected, positions, seen, 4, 64, tokens),
        [selected, positions, seen, tokens],
    )
    return results


def _prepared_call_gives_way(select):
    """For each thing that must send a prepared call back through Triton (a profiler's launch
    hooks, a kernel's pre-run hook, ``triton_launches_only``): the launches the call then made
    through Triton and the replays it made."""
    from kernels.decode import _decode_scores_kernel

    select()
    select()  # prepared, then replayed
    runtime = triton.knobs.runtime

    def ignore(*args, **kwargs):
        return None

    @contextlib.contextmanager
    def added(add, remove):
        add(ignore)
        try:
            yield
        finally:
            remove(ignore)

    enter, leave = runtime.launch_enter_hook, runtime.launch_exit_hook
    pre_run = _decode_scores_kernel.pre_run_hooks
    cases = {
        "launch enter hook": lambda: added(enter.add, enter.remove),
        "launch exit hook": lambda: added(leave.add, leave.remove),
        "pre-run hook": lambda: added(pre_run.append, pre_run.remove),
        "triton_launches_only": fl.triton_launches_only,
    }
    found = {}
    for name, state in cases.items():
        before = fl.fast_launch_stats()
        with state():
            select()
        after = fl.fast_launch_stats()
        found[name] = {key: after[key] - before[key] for key in ("triton", "prepared")}
    before = fl.fast_launch_stats()["prepared"]
    select()  # all of them gone: replayed again
    found["after"] = fl.fast_launch_stats()["prepared"] - before
    return found


def _refusals_after_preparation(select, q, out):
    """The errors a prepared select still raises for bad arguments (a prepared call must not
    skip the checks of a call whose key differs): by name, the exception's type."""
    select()
    select()  # prepared, then replayed
    bad = {
        "out int64": dict(out=out.to(torch.int64)),
        "out too narrow": dict(out=out[:, :-1].contiguous()),
        "q misaligned": dict(q=torch.empty(q.numel() + 1, dtype=q.dtype)[1:].view(q.shape)),
        "q float32": dict(q=q.float()),
        "q not contiguous": dict(q=q.transpose(0, 1).contiguous().transpose(0, 1)),
    }
    refused = {}
    for name, kwargs in bad.items():
        try:
            select(**kwargs)
            refused[name] = None
        except (TypeError, ValueError) as err:
            refused[name] = type(err).__name__
    return refused


def main():
    from qsa_warmup.triton_compat.targets import active_driver, parse_target

    triton.compiler.compile = record_compile  # JITFunction binds `compile` from here
    with active_driver(parse_target("sm_90")):
        report = {
            "probe": random_probe_launches(int(sys.argv[1]), seed=int(sys.argv[2])),
            "forgotten": forgotten_cache_goes_through_triton(),
            "enter_hook": enter_hook_goes_through_triton(),
            "per_thread": triton_path_is_per_thread(),
            "ops": op_launches(),
        }
    print(json.dumps(report))


if __name__ == "__main__":
    main()
