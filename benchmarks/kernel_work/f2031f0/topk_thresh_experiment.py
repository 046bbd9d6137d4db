"""Where many-row calls should start splitting 4K-8K rows: one program per row vs the
finished-apart split, 256-768 rows. GPU."""
import sys

import torch

sys.path.insert(0, ".")
sys.path.insert(0, "tools")
from bench_kernels import graph_bench  # noqa: E402

from kernels import topk as T  # noqa: E402


def main():
    k = 512
    split = T.topk_launch_config(32768, k, T.SPLIT_MANY_ROWS_MIN_ROWS)
    for cols in (4160, 6144, 8192):
        for rows in (256, 384, 512, 768, 1024):
            torch.manual_seed(rows + cols)
            logits = torch.randn(rows, cols, device="cuda")
            lengths = torch.full((rows,), cols, dtype=torch.int32, device="cuda")
            out = torch.empty(rows, k, dtype=torch.int32, device="cuda")
            want = torch.topk(logits, k, dim=1).values.sort(dim=1, descending=True).values
            res = []
            for name, cfg in (("single", T._per_row_config(cols)), ("split", split)):
                launches = T.ragged_topk_launches(logits, lengths, k, out, config=cfg)

                def run(ls=launches):
                    for launch in ls:
                        launch.run()

                out.fill_(-7)
                us = graph_bench(run) * 1e3
                got = logits.gather(1, out.long().clamp(min=0)).sort(dim=1, descending=True).values
                res.append(f"{name} {us:7.1f} us exact={bool(torch.equal(got, want))}")
            print(f"{rows:>5} x {cols}: " + "  ".join(res), flush=True)


if __name__ == "__main__":
    main()
