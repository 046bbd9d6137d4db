"""8K-wide rows: the one-program path against the split path (forced), by row count. GPU."""
import sys
from dataclasses import replace

import torch

sys.path.insert(0, ".")
sys.path.insert(0, "tools")
from bench_kernels import bench, graph_bench  # noqa: E402

from kernels import topk as T  # noqa: E402


def main():
    cols, k = 8192, 512
    for rows in (8, 64, 256, 1024, 2048, 4096):
        torch.manual_seed(rows)
        logits = torch.randn(rows, cols, device="cuda")
        lengths = torch.full((rows,), cols, dtype=torch.int32, device="cuda")
        out = torch.empty(rows, k, dtype=torch.int32, device="cuda")
        want = torch.topk(logits, k, dim=1).values.sort(dim=1, descending=True).values
        base = T.topk_launch_config(32768, k, rows)  # the split config a 32K row would get
        fused = T.topk_launch_config(32768, k, 1)
        designs = {"dispatched": T.topk_launch_config(cols, k, rows)}
        for chunk in (1024, 2048, 4096):
            for warps in (4, 8):
                designs[f"fused.c{chunk}.w{warps}"] = replace(fused, block=chunk, num_warps=warps)
                designs[f"apart.c{chunk}.w{warps}"] = replace(
                    base if base.finish_warps else replace(fused, finish_warps=4),
                    block=chunk, num_warps=warps)
        torch_us = graph_bench(lambda: torch.topk(logits, k, dim=1)) * 1e3
        for name, cfg in designs.items():
            launches = T.ragged_topk_launches(logits, lengths, k, out, config=cfg)

            def run(ls=launches):
                for launch in ls:
                    launch.run()

            out.fill_(-7)
            us = graph_bench(run) * 1e3
            eager = bench(run) * 1e3
            got = logits.gather(1, out.long().clamp(min=0)).sort(dim=1, descending=True).values
            print(f"{rows:>5} x {cols} {name:<16} graph {us:8.1f} us eager {eager:8.1f} us "
                  f"torch {torch_us:8.1f} exact={bool(torch.equal(got, want))}", flush=True)


if __name__ == "__main__":
    main()
