"""GPU host: where an eager decode select 1 x 2K and ragged_topk 1 x 2K spend their host time.
Host issue time of N calls without a sync (N below the launch queue's depth), per component,
and each kernel's GPU time (20 launches in one graph). Usage: python3 scratch/host_profile.py"""
import sys
import time

import torch

sys.path.insert(0, ".")
sys.path.insert(0, "tools")
import kernels.decode as D
import kernels.topk as T
from kernels import qsa_select_paged_decode, ragged_topk
from kernels._launch import call_key
from triton.runtime.driver import driver
from bench_kernels import decode_inputs

N = 400


def issue_us(fn, n=N, rounds=7):
    best = 1e9
    for _ in range(rounds):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        best = min(best, (t1 - t0) / n * 1e6)
    return best


def wall_us(fn, n=2000):
    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / n * 1e6


def graph_each_us(fn, reps=20):
    fn()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(reps):
            fn()
    g.replay()
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    best = 1e9
    for _ in range(20):
        s.record()
        g.replay()
        e.record()
        e.synchronize()
        best = min(best, s.elapsed_time(e) * 1e3 / reps)
    return best


q, k_cache, tables, visible = decode_inputs(1, 2048, torch.bfloat16)
out = torch.empty(1, 512, dtype=torch.int32, device="cuda")
t = tables[0]
sel = lambda: qsa_select_paged_decode(q, k_cache, t, visible, 2048, 4, 1, out)
sel()
logits2 = torch.rand(1, 2048, device="cuda")
lengths = torch.full((1,), 2048, dtype=torch.int32, device="cuda")
tk = lambda: ragged_topk(logits2, lengths, 512, out)
tk()
print(f"decode select: wall {wall_us(sel):.1f} us, issue {issue_us(sel):.1f} us, GPU (graph of 20) {graph_each_us(sel):.1f} us")
print(f"ragged_topk:   wall {wall_us(tk):.1f} us, issue {issue_us(tk):.1f} us, GPU (graph of 20) {graph_each_us(tk):.1f} us")

tensors = (q, k_cache, t, visible, out)
key = call_key(tensors, (2048, 4, 1))
call, (shape, sizes) = D._prepared_selects[key]
steps = call._steps
print("steps:", [(s.kernel.fn.__name__, s.grid, len(s.slots)) for s in steps])
logits = torch.empty(shape, dtype=torch.float32, device="cuda")
full = (*tensors, logits)
stream = driver.active.get_current_stream(0)

comp = {
    "call_key(5 tensors)": lambda: call_key(tensors, (2048, 4, 1)),
    "dict get": lambda: D._prepared_selects.get(key),
    "call.ready()": call.ready,
    "torch.empty logits": lambda: torch.empty(shape, dtype=torch.float32, device="cuda"),
    "get_current_device": lambda: driver.active.get_current_device(),
    "get_current_stream": lambda: driver.active.get_current_stream(0),
    "torch.cuda.current_stream().cuda_stream": lambda: torch.cuda.current_stream().cuda_stream,
    "data_ptr x6": lambda: [x.data_ptr() for x in full],
    "call.launch(full)": lambda: call.launch(full),
}
for i, step in enumerate(steps):
    args = list(step.args)
    for pos, idx in step.slots:
        args[pos] = full[idx]
    b = step.bound
    a_t = (*step.grid, stream, *b.prefix, *args, *b.constexpr_tail)
    args_i = [a.data_ptr() if isinstance(a, torch.Tensor) else a for a in args]
    a_i = (*step.grid, stream, *b.prefix, *args_i, *b.constexpr_tail)
    comp[f"C launch step {i} (tensors)"] = lambda b=b, a=a_t: b.launch(*a)
    comp[f"C launch step {i} (int pointers)"] = lambda b=b, a=a_i: b.launch(*a)
    comp[f"GPU step {i}"] = None
    print(f"step {i} launcher {b.launch}")
for name, fn in comp.items():
    if fn is None:
        continue
    print(f"  {name:45s} {issue_us(fn):7.2f} us")
for i, step in enumerate(steps):
    args = list(step.args)
    for pos, idx in step.slots:
        args[pos] = full[idx]
    b = step.bound
    a_t = (*step.grid, stream, *b.prefix, *args, *b.constexpr_tail)
    print(f"  GPU step {i} alone (graph of 20): {graph_each_us(lambda: b.launch(*a_t)):.2f} us")

# the same split by cProfile-free timers inside a copy of the prepared path
import cProfile, pstats, io
pr = cProfile.Profile()
pr.enable()
for _ in range(300):
    sel()
pr.disable()
torch.cuda.synchronize()
s = io.StringIO()
pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(15)
print(s.getvalue()[-3500:])
