"""GPU host A/B: eager decode select 1 x 2K and ragged_topk 1 x 2K / 64 x 32K (bench_kernels'
host cases), prepared replays passing tensors (Triton's launcher then calls data_ptr and
cuPointerGetAttribute per tensor) vs their addresses as ints, alternating rounds."""
import sys
import torch
sys.path.insert(0, "."); sys.path.insert(0, "tools")
import kernels.decode as D
import kernels.topk as T
from kernels import qsa_select_paged_decode, ragged_topk
from bench_kernels import decode_inputs, host_per_call_us


def set_pointers(flag):
    for calls in (D._prepared_selects, T._prepared_topks):
        for call, _ in calls.values():
            call._pointers = flag


q, k_cache, tables, visible = decode_inputs(1, 2048, torch.bfloat16)
out = torch.empty(1, 512, dtype=torch.int32, device="cuda")
sel = lambda: qsa_select_paged_decode(q, k_cache, tables[0], visible, 2048, 4, 1, out)
logits = torch.rand(1, 2048, device="cuda")
lengths = torch.full((1,), 2048, dtype=torch.int32, device="cuda")
tk = lambda: ragged_topk(logits, lengths, 512, out)
out64 = torch.empty(64, 512, dtype=torch.int32, device="cuda")
l64 = torch.rand(64, 32768, device="cuda")
n64 = torch.full((64,), 32768, dtype=torch.int32, device="cuda")
tk64 = lambda: ragged_topk(l64, n64, 512, out64)
for f in (sel, tk, tk64, sel, tk, tk64):
    f()
torch.cuda.synchronize()
print("prepared calls pass addresses:", [c._pointers for calls in (D._prepared_selects, T._prepared_topks) for c, _ in calls.values()])
ref = {}
for flag in (False, True):
    set_pointers(flag)
    out.fill_(-7); sel(); torch.cuda.synchronize()
    ref[flag] = out.clone()
print("same result:", torch.equal(ref[False].sort().values, ref[True].sort().values))
for rnd in range(10):
    for flag in (False, True):
        set_pointers(flag)
        print(f"round {rnd} {'addresses' if flag else 'tensors':9s} decode select 1x2K {host_per_call_us(sel):6.1f} us  "
              f"ragged_topk 1x2K {host_per_call_us(tk):6.1f} us  ragged_topk 64x32K {host_per_call_us(tk64):6.1f} us", flush=True)
set_pointers(True)
