"""The ragged top-k of the working tree beside that of another commit, in one process (GPU).

The ``kernels`` package at ``--base`` (a commit, HEAD unless given, or a folder holding one, as
``git archive REV kernels | tar -x -C DIR`` makes for a machine without the repository's
history) is written to a temporary folder as the package ``kernels_base`` (its modules import
one another relatively, so the old package runs whole, beside the tree's) and its
``ragged_topk`` is timed beside the working tree's, each in a CUDA graph, in alternating rounds
(a drift of the GPU's clock reaches both), over the shapes and the kinds of logits asked:
``uniform``, ``normal``, ``relu8`` (8 heads of ReLU'd normals summed with random weights: the
indexer's kind) and ``ties`` (normals rounded to 2 decimals). Every result is checked exact
against ``torch.topk`` (the values taken, so ties at the k-th value may be taken in any
order). Prints a line a case and writes JSON.

    python3 tools/ab_topk.py [--base REV|DIR] [--shapes 64x32768x512,...] [--logits uniform,normal]
        [--rounds 2] [--json ab_topk.json]
    python3 tools/ab_topk.py --check [--base REV|DIR]   # no GPU: each side once on the CPU,
                                                        # under Triton's interpreter, exactness only
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import json
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_SHAPES = (
    "1x2048x512,64x2048x512,1x8192x512,8x8192x512,256x8192x512,1024x8192x512,"
    "8x32768x512,64x32768x512,4096x32768x512,64x131072x2048"
)
CHECK_SHAPES = "2x2048x512,3x8192x512,2x32768x512"
LOGITS = ("uniform", "normal", "relu8", "ties")


def main(argv=None) -> int:
    args = _parse(argv)
    # before Triton is imported: the interpreter for --check, compiled kernels otherwise
    if args.check:
        os.environ["TRITON_INTERPRET"] = "1"
    else:
        os.environ.pop("TRITON_INTERPRET", None)
    sys.path.insert(0, ROOT)
    sys.path.insert(0, os.path.join(ROOT, "tools"))
    with tempfile.TemporaryDirectory() as folder:
        try:
            base = load_base_kernels(args.base, folder)
        except ValueError as e:
            print(f"ab_topk: {e}", file=sys.stderr)
            return 2
        import torch

        import kernels

        if not args.check and not torch.cuda.is_available():
            print("ab_topk: no CUDA GPU here (--check runs both sides on the CPU)", file=sys.stderr)
            return 2
        report = run(args, base.ragged_topk, kernels.ragged_topk)
        report["base_topk_sha256"] = _sha256(os.path.join(base.__path__[0], "topk.py"))
        report["new_topk_sha256"] = _sha256(os.path.join(kernels.__path__[0], "topk.py"))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
    return 0 if all(c["base_exact"] and c["new_exact"] for c in report["cases"]) else 1


def _parse(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--base",
        default="HEAD",
        help="the commit to time against, or a folder holding its kernels package (HEAD)",
    )
    parser.add_argument("--shapes", default=None, help="ROWSxCOLSxK,... (all rows full length)")
    parser.add_argument("--logits", default="uniform,normal,relu8", help=",".join(LOGITS))
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--json", default=None)
    parser.add_argument("--check", action="store_true", help="CPU, interpreter, exactness only")
    args = parser.parse_args(argv)
    args.shapes = _shapes(parser, args.shapes or (CHECK_SHAPES if args.check else DEFAULT_SHAPES))
    args.logits = args.logits.split(",")
    unknown = [name for name in args.logits if name not in LOGITS]
    if unknown:
        parser.error(f"--logits: {unknown[0]!r} is none of {', '.join(LOGITS)}")
    if args.rounds < 1:
        parser.error("--rounds: give 1 or more")
    return args


def _shapes(parser, text: str) -> list[tuple[int, int, int]]:
    shapes = parse_shapes(text)
    if not shapes or any(k > cols for _, cols, k in shapes):
        parser.error(f"--shapes: {text!r} is not ROWSxCOLSxK,... with 0 < K <= COLS")
    return shapes


def parse_shapes(text: str) -> list[tuple[int, int, int]]:
    """``ROWSxCOLSxK,...`` as (rows, cols, k) triples of positive integers; [] if it is not."""
    try:
        shapes = [tuple(int(x) for x in s.split("x")) for s in text.split(",")]
    except ValueError:
        return []
    return shapes if all(len(s) == 3 and min(s) > 0 for s in shapes) else []


def load_base_kernels(base: str, folder: str):
    """The ``kernels`` package as it was at commit ``base`` (or as it is in the folder ``base``
    names, which holds one: a machine without the repository's history), imported as
    ``kernels_base`` from ``folder``."""
    package = os.path.join(folder, "kernels_base")
    if os.path.isdir(os.path.join(base, "kernels")):
        shutil.copytree(os.path.join(base, "kernels"), package)
    else:
        _write_package_at(base, package)
    sys.path.insert(0, folder)
    return importlib.import_module("kernels_base")


def _write_package_at(rev: str, package: str) -> None:
    files = _git("ls-tree", "--name-only", f"{rev}:kernels").split()
    if not files:
        raise ValueError(f"--base: {rev!r} has no kernels package (give a commit of this repo)")
    os.makedirs(package)
    for name in (f for f in files if f.endswith(".py")):
        with open(os.path.join(package, name), "w") as f:
            f.write(_git("show", f"{rev}:kernels/{name}"))


def _sha256(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def _git(*args: str) -> str:
    done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)
    if done.returncode:
        raise ValueError(f"--base: git {args[0]} failed: {done.stderr.strip().splitlines()[-1]}")
    return done.stdout


def make_logits(kind: str, rows: int, cols: int, device):
    import torch

    if kind == "uniform":
        return torch.rand(rows, cols, device=device)
    if kind == "normal":
        return torch.randn(rows, cols, device=device)
    if kind == "ties":
        return torch.randn(rows, cols, device=device).round(decimals=2)
    heads = torch.randn(8, rows, cols, device=device).clamp_min_(0)  # relu8
    return torch.einsum("hrc,h->rc", heads, torch.rand(8, device=device)).contiguous()


def exact(logits, out, k: int) -> bool:
    """Every index a distinct column, and the values taken the k largest (tie-aware)."""
    import torch

    idx = out.long()
    if bool((idx < 0).any()) or bool((idx >= logits.shape[1]).any()):
        return False
    if bool((idx.sort(dim=1).values.diff(dim=1) == 0).any()):
        return False
    got = logits.gather(1, idx).sort(dim=1, descending=True).values
    return bool(torch.equal(got, logits.topk(k, dim=1).values))


def run(args, base_topk, new_topk) -> dict:
    import torch

    device = "cpu" if args.check else "cuda"
    report = {"base": args.base, "device": device, "cases": []}
    if not args.check:
        report["gpu"] = torch.cuda.get_device_name()
    for rows, cols, k in args.shapes:
        for kind in args.logits:
            torch.manual_seed(rows * 7 + cols + k)
            logits = make_logits(kind, rows, cols, device)
            lengths = torch.full((rows,), cols, dtype=torch.int32, device=device)
            case = dict(rows=rows, cols=cols, k=k, logits=kind, base_us=[], new_us=[])
            for _ in range(1 if args.check else args.rounds):
                for side, topk in (("base", base_topk), ("new", new_topk)):
                    out = torch.full((rows, k), -7, dtype=torch.int32, device=device)
                    topk(logits, lengths, k, out)
                    case[f"{side}_exact"] = case.get(f"{side}_exact", True) and exact(
                        logits, out, k
                    )
                    if not args.check:
                        case[f"{side}_us"].append(_graph_us(topk, logits, lengths, k, out))
            report["cases"].append(case)
            print(_line(case), flush=True)
    return report


def _graph_us(topk, logits, lengths, k: int, out) -> float:
    from bench_kernels import graph_bench

    return graph_bench(lambda: topk(logits, lengths, k, out)) * 1e3


def _line(case: dict) -> str:
    shape = f"{case['rows']:>5} x {case['cols']:<6} k={case['k']:<5} {case['logits']:<7}"
    exactness = f"exact base {case['base_exact']} new {case['new_exact']}"
    if not case["base_us"]:
        return f"{shape} {exactness}"
    base, new = min(case["base_us"]), min(case["new_us"])
    times = " ".join(f"{b:.1f}/{n:.1f}" for b, n in zip(case["base_us"], case["new_us"]))
    return (
        f"{shape} base/new us {times}  best {base:.1f} -> {new:.1f} ({new / base:.3f}x) {exactness}"
    )


if __name__ == "__main__":
    sys.exit(main())
