"""GPU: what a read-only kernel of decode scoring's bytes reaches, timed as bench_kernels times
decode (do_bench medians, inputs rotated past L2): the ceiling a short read-mostly kernel has,
beside a same-size copy and the dispatched decode scoring (8 x 32K, bf16 and fp8)."""
import sys
import torch
import triton
import triton.language as tl
sys.path.insert(0, "."); sys.path.insert(0, "tools")
from bench_kernels import HEAD_DIM, HEADS, bench, bench_clean, copy_bandwidth, decode_inputs, rotating, same_size_copy_tbps
from kernels import decode_launch_config, decode_scores_launch


@triton.jit
def _read_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr, ITERS: tl.constexpr):
    pid = tl.program_id(0)
    acc = tl.zeros((BLOCK,), tl.int32)
    base = pid.to(tl.int64) * BLOCK * ITERS
    for i in tl.static_range(ITERS):
        offs = base + i * BLOCK + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + offs, mask=offs < n, other=0)
    tl.store(out_ptr + pid, tl.sum(acc, axis=0))


def read_tbps(nbytes, block=2048, iters=4, warps=4, timer=bench):
    n = nbytes // 4
    sets = max(1, min(8, (1 << 30) // nbytes))
    srcs = [torch.ones(n, dtype=torch.int32, device="cuda") for _ in range(sets)]
    progs = triton.cdiv(n, block * iters)
    out = torch.empty(progs, dtype=torch.int32, device="cuda")
    fns = [lambda s=s: _read_kernel[(progs,)](s, out, n, BLOCK=block, ITERS=iters, num_warps=warps) for s in srcs]
    fns[0](); torch.cuda.synchronize()
    assert int(out.sum()) == n
    return nbytes / timer(rotating(fns)) / 1e9


print(torch.cuda.get_device_name(), "copy 1 GiB", round(copy_bandwidth(), 3), "TB/s", flush=True)
print("read 1 GiB", round(read_tbps(1 << 30), 3), "clean", round(read_tbps(1 << 30, timer=bench_clean), 3), "copy 1 GiB clean", round(copy_bandwidth(clean=True), 3), flush=True)
for name, dtype in (("bf16", torch.bfloat16), ("fp8", torch.float8_e4m3fn)):
    reqs, cols = 8, 32768
    elem = torch.empty((), dtype=dtype).element_size()
    sets = max(1, min(8, (1 << 30) // (reqs * cols * HEAD_DIM * elem)))
    q, k_cache, tables, visible = decode_inputs(reqs, cols, dtype, sets)
    logits = torch.empty(reqs, cols, device="cuda")
    moved = reqs * cols * (HEAD_DIM * elem + 4) + reqs * HEADS * HEAD_DIM * q.element_size()
    launches = [decode_scores_launch(q, k_cache, t, visible, logits, 1) for t in tables]
    launches[0].run()
    for rnd in range(2):
        ms = bench(rotating([l.run for l in launches]))
        copy = same_size_copy_tbps(moved)
        best = max(read_tbps(moved, b, i, w) for b, i, w in ((2048, 4, 4), (4096, 4, 8), (1024, 8, 4), (8192, 2, 8)))
        dec = moved / ms / 1e9
        ms_c = bench_clean(rotating([l.run for l in launches]))
        best_c = max(read_tbps(moved, b, i, w, bench_clean) for b, i, w in ((2048, 4, 4), (4096, 4, 8), (1024, 8, 4), (8192, 2, 8)))
        print(f"  clean L2 (flushed by a read): decode {ms_c*1e3:.1f} us {moved/ms_c/1e9:.2f} TB/s; same-size read {best_c:.2f} TB/s; decode = {moved/ms_c/1e9/best_c:.0%} of read", flush=True)
        print(f"{name} 8x32K round {rnd}: decode {ms*1e3:.1f} us {dec:.2f} TB/s; same-size copy {copy:.2f} TB/s; "
              f"same-size read (best of 4 configs) {best:.2f} TB/s; decode = {dec/copy:.0%} of copy, {dec/best:.0%} of read", flush=True)
