"""GPU: the fused decode select prototype (scratch/fused_select.py) against the dispatched
decode select, bf16, 32 heads x 128, page 64, k = 512: exactness (tie-aware, every row, 5
fresh inputs, a CUDA graph replay), then eager host time per call (both as prepared replays)
and GPU time (CUDA graphs of 1 and of 20 calls), alternating rounds. Usage:
python3 scratch/fused_select_gpu.py"""
import sys
import statistics as st
import torch
sys.path.insert(0, "."); sys.path.insert(0, "tools"); sys.path.insert(0, "scratch")
from fused_select import fused_select_launch
from kernels import qsa_select_paged_decode
from kernels._fast_launch import _prepare_call
from kernels._launch import call_key
from kernels.topk import _row_states
from bench_kernels import decode_inputs, host_per_call_us, graph_bench

_prepared = {}


def fused_select(q, k_cache, table, visible, token_topk, ratio, out):
    """The op as qsa_select_paged_decode replays: key, ready, allocate, launch."""
    tensors = (q, k_cache, table, visible, out)
    key = call_key(tensors, (token_topk, ratio))
    call = _prepared.get(key)
    if call is not None and call.ready():
        logits = torch.empty((q.shape[0], table.shape[1] * k_cache.shape[1]), dtype=torch.float32, device=q.device)
        if call.launch((*tensors, logits, _row_states(logits, q.shape[0]))):
            return
    launch, logits, states = fused_select_launch(q, k_cache, table, visible, token_topk, ratio, out)
    launch.run()
    call = _prepare_call([launch], (*tensors, logits, states), (5, 6))
    if call is not None:
        _prepared[key] = call


for reqs, cols in ((1, 2048), (8, 2048), (64, 2048), (128, 1024)):
    for trial in range(5):
        q, k_cache, tables, visible = decode_inputs(reqs, cols, torch.bfloat16)
        if trial % 2:
            visible = torch.randint(0, cols + 1, (reqs,), dtype=torch.int32, device="cuda")
        t = tables[0]
        want = torch.full((reqs, 512), -7, dtype=torch.int32, device="cuda")
        got = torch.full((reqs, 512), -7, dtype=torch.int32, device="cuda")
        qsa_select_paged_decode(q, k_cache, t, visible, 2048, 4, 1, want)
        fused_select(q, k_cache, t, visible, 2048, 4, got)
        fused_select(q, k_cache, t, visible, 2048, 4, got)  # the replay
        torch.cuda.synchronize()
        print(f"{reqs} x {cols} trial {trial}: exact (as index sets) {torch.equal(got.sort(dim=1).values, want.sort(dim=1).values)}", flush=True)
    graph = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream(); s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fused_select(q, k_cache, t, visible, 2048, 4, got)
    torch.cuda.current_stream().wait_stream(s)
    with torch.cuda.graph(graph):
        fused_select(q, k_cache, t, visible, 2048, 4, got)
    got.fill_(-7); graph.replay(); graph.replay(); torch.cuda.synchronize()
    print(f"{reqs} x {cols} graph replay exact {torch.equal(got.sort(dim=1).values, want.sort(dim=1).values)}", flush=True)

q, k_cache, tables, visible = decode_inputs(1, 2048, torch.bfloat16)
out = torch.empty(1, 512, dtype=torch.int32, device="cuda")
cases = {
    "two launches": lambda: qsa_select_paged_decode(q, k_cache, tables[0], visible, 2048, 4, 1, out),
    "fused": lambda: fused_select(q, k_cache, tables[0], visible, 2048, 4, out),
}
for f in cases.values():
    f(); f(); f()
res = {n: [] for n in cases}
for rnd in range(6):
    for name, f in cases.items():
        h = host_per_call_us(f)
        res[name].append(h)
        print(f"round {rnd} {name:12s} eager {h:6.1f} us  graph of 1 {graph_bench(f) * 1e3:6.1f} us", flush=True)
for name, v in res.items():
    print("median eager", name, round(st.median(v), 2))
