"""Zero JIT on a Triton library nobody here wrote: Liger-Kernel's RMSNorm, layer norm, SwiGLU,
GeGLU, RoPE and fused linear cross entropy, forward and backward (GPU; ``pip install
liger-kernel``, a tools dependency only).

The envelope: hidden sizes ``HIDDEN`` (896 to 8192, odd ones included), bf16 and fp32, 1 to
8192 tokens. ``cover`` runs every op at each hidden size and dtype over token counts that reach
every integer specialization class (1, a multiple of 16, neither) of the row counts and the
rows-per-program Liger derives from the GPU's multiprocessor count; it is what a recording is
made from. ``random`` draws a fresh sweep of the envelope (op, hidden, dtype, tokens uniform in
1..8192). Each case prints a digest of every output (forward result and input gradients), so two
runs compare bit for bit.

    python tools/liger_proof.py sweep --cases cover|random [--seed N] [--n N] --json FILE
        [--warmup RECORDING --cache-dir DIR]   warm up from the cache first, strict error, scope
                                                all: a compile raises and is counted per case
Timing: the sweep runs its cases twice in the process (``first_pass_s``, ``second_pass_s``):
the first pass pays for what is not in memory yet (compiles or loads), the second is execution
only. tools/liger_proof.sh runs the record, the plain-Triton references and the warm runs.
"""

from __future__ import annotations

import argparse
import cProfile
import hashlib
import json
import random
import time

import torch

HIDDEN = (896, 2049, 4096, 8192)
DTYPES = (torch.bfloat16, torch.float32)
OPS = ("rms_norm", "layer_norm", "swiglu", "geglu", "rope", "flce")
MAX_TOKENS = 8192
VOCAB = 4096  # fused linear cross entropy's vocabulary (its chunking follows tokens and hidden)
HEAD_DIM = 128


BASE_TOKENS = (1, 2, 7, 16, 17, 100, 255, 256, MAX_TOKENS - 1, MAX_TOKENS)


def cover_tokens(op: str, sm_count: int) -> list[int]:
    """Token counts that put the row count and the rows per program Liger derives from it
    (ceil(rows / SMs)) in every class Triton specializes an integer on (1, a multiple of 16,
    neither), in each combination reachable. Layer norm's backward takes the rows per program
    as a constexpr: for it, every value the envelope reaches."""
    if op == "layer_norm":
        per_program_values = range(1, -(-MAX_TOKENS // sm_count) + 1)
    else:  # a runtime integer: one value of each class
        per_program_values = (1, 2, 16)
    tokens = set(BASE_TOKENS)
    for per_program in per_program_values:
        last = per_program * sm_count
        first = last - sm_count + 1
        aligned = first + (-first) % 16  # the first multiple of 16 in the range
        tokens.update({first, last, last - 1, aligned, aligned + 1})
    return sorted(t for t in tokens if 1 <= t <= MAX_TOKENS)


def cases(kind: str, seed: int, n: int) -> list[tuple]:
    if kind == "cover":
        sms = torch.cuda.get_device_properties(0).multi_processor_count
        return [
            (op, hidden, dtype, tokens)
            for op in OPS
            for hidden in HIDDEN
            for dtype in DTYPES
            for tokens in cover_tokens(op, sms)
        ]
    rng = random.Random(seed)
    return [
        (rng.choice(OPS), rng.choice(HIDDEN), rng.choice(DTYPES), rng.randint(1, MAX_TOKENS))
        for _ in range(n)
    ]


def _digest(tensors) -> str:
    h = hashlib.sha256()
    for t in tensors:
        h.update(t.detach().reshape(-1).contiguous().view(torch.uint8).cpu().numpy().tobytes())
    return h.hexdigest()[:16]


def run_case(op: str, hidden: int, dtype, tokens: int, seed: int):
    """The op forward and backward on fresh random inputs; every output tensor."""
    from liger_kernel.ops.fused_linear_cross_entropy import LigerFusedLinearCrossEntropyFunction
    from liger_kernel.ops.geglu import LigerGELUMulFunction
    from liger_kernel.ops.layer_norm import LigerLayerNormFunction
    from liger_kernel.ops.rms_norm import LigerRMSNormFunction
    from liger_kernel.ops.rope import LigerRopeFunction
    from liger_kernel.ops.swiglu import LigerSiLUMulFunction

    gen = torch.Generator(device="cuda").manual_seed(seed)

    def rand(*shape, grad=True, dt=dtype):
        t = torch.randn(*shape, device="cuda", generator=gen, dtype=dt)
        return t.requires_grad_(grad)

    if op in ("rms_norm", "layer_norm"):
        x, w = rand(tokens, hidden), rand(hidden)
        if op == "rms_norm":
            y = LigerRMSNormFunction.apply(x, w, 1e-6)
            params = [x, w]
        else:
            b = rand(hidden)
            y = LigerLayerNormFunction.apply(x, w, b, 1e-5)
            params = [x, w, b]
        y.backward(rand(tokens, hidden, grad=False))
        return [y] + [p.grad for p in params]
    if op in ("swiglu", "geglu"):
        a, b = rand(tokens, hidden), rand(tokens, hidden)
        fn = LigerSiLUMulFunction if op == "swiglu" else LigerGELUMulFunction
        y = fn.apply(a, b)
        y.backward(rand(tokens, hidden, grad=False))
        return [y, a.grad, b.grad]
    if op == "rope":
        heads = max(1, hidden // HEAD_DIM)
        q = rand(1, heads, tokens, HEAD_DIM)
        k = rand(1, max(1, heads // 4), tokens, HEAD_DIM)
        cos = rand(1, tokens, HEAD_DIM, grad=False)
        sin = rand(1, tokens, HEAD_DIM, grad=False)
        qo, ko = LigerRopeFunction.apply(q, k, cos, sin)
        grads = [rand(*qo.shape, grad=False), rand(*ko.shape, grad=False)]
        torch.autograd.backward([qo, ko], grads)
        return [qo, ko, q.grad, k.grad]
    if op == "flce":
        x, w = rand(tokens, hidden), rand(VOCAB, hidden)
        target = torch.randint(0, VOCAB, (tokens,), device="cuda", generator=gen)
        loss = LigerFusedLinearCrossEntropyFunction.apply(x, w, target)[0]
        loss.backward()
        return [loss, x.grad, w.grad]
    raise ValueError(op)


def _init_torch() -> None:
    """CUDA context, generator, cuBLAS and Liger's modules (it imports transformers and peft:
    ~10 s on the H100 host) up before the clock starts: every run pays them."""
    import liger_kernel.ops.fused_linear_cross_entropy  # noqa: F401
    import liger_kernel.ops.geglu  # noqa: F401
    import liger_kernel.ops.layer_norm  # noqa: F401
    import liger_kernel.ops.rms_norm  # noqa: F401
    import liger_kernel.ops.rope  # noqa: F401
    import liger_kernel.ops.swiglu  # noqa: F401

    for dtype in DTYPES:
        a = torch.randn(256, 256, device="cuda", dtype=dtype)
        (a @ a).sum().item()


def sweep(args) -> dict:
    report = {"gpu": torch.cuda.get_device_name(), "cases": [], "kind": args.cases}
    _init_torch()
    start = time.perf_counter()
    strict_errors = []
    if args.warmup:
        import qsa_warmup

        warm = qsa_warmup.warmup(
            recordings=args.warmup, cache_dir=args.cache_dir, strict="error", strict_scope="all"
        )
        report["warmup"] = {
            "planned": warm.planned,
            "loaded": warm.loaded,
            "compiled": warm.compiled,
            "seconds": warm.seconds,
        }
    todo = cases(args.cases, args.seed, args.n)
    profiler = cProfile.Profile() if args.profile_first_pass else None
    for pass_no in (1, 2):
        if profiler is not None and pass_no == 1:
            profiler.enable()
        for i, (op, hidden, dtype, tokens) in enumerate(todo):
            try:
                outputs = run_case(op, hidden, dtype, tokens, seed=args.seed * 100003 + i)
            except Exception as exc:  # a strict refusal: counted, the sweep goes on
                if type(exc).__name__ != "StrictModeError":
                    raise
                strict_errors.append(f"{op} h{hidden} {dtype} t{tokens}: {exc}")
                continue
            if pass_no == 1 and args.digests:
                report["cases"].append(
                    {
                        "op": op,
                        "hidden": hidden,
                        "dtype": str(dtype).removeprefix("torch."),
                        "tokens": tokens,
                        "digest": _digest(outputs),
                    }
                )
        torch.cuda.synchronize()
        if profiler is not None and pass_no == 1:
            profiler.disable()
            profiler.dump_stats(args.profile_first_pass)
        now = time.perf_counter()
        report[f"{'first' if pass_no == 1 else 'second'}_pass_s"] = now - start
        start = now
    report["strict_errors"] = strict_errors
    return report


def _load(folder: str, name: str) -> dict:
    with open(f"{folder}/{name}.json") as f:
        return json.load(f)


def _case_key(case: dict) -> tuple:
    return case["op"], case["hidden"], case["dtype"], case["tokens"]


def _start_cost(run: dict) -> float:
    """What the first pass paid beyond execution: loads or compiles (and, warmed, the warmup)."""
    return run["first_pass_s"] - run["second_pass_s"]


def compare(folder: str) -> dict:
    """The proof's numbers from one serve run's JSON files (and the record run's, if there)."""
    plain, qsa = _load(folder, "plain_random"), _load(folder, "qsa_random")
    triton_warm, qsa_warm = _load(folder, "triton_warm"), _load(folder, "qsa_warm")
    warmed = {_case_key(c): c["digest"] for c in qsa["cases"]}
    same = sum(warmed.get(_case_key(c)) == c["digest"] for c in plain["cases"])
    out = {
        "gpu": qsa["gpu"],
        "random_cases": len(plain["cases"]),
        "random_cases_warmed": len(qsa["cases"]),
        "bitwise_equal": same,
        "strict_errors": qsa["strict_errors"] + qsa_warm["strict_errors"],
        "warmup": qsa_warm["warmup"],
        "warm_start_s": {"qsa": _start_cost(qsa_warm), "triton": _start_cost(triton_warm)},
    }
    out["warm_ratio"] = out["warm_start_s"]["qsa"] / out["warm_start_s"]["triton"]
    for name in ("triton_cold", "record"):  # same machine as the warm runs, else the record's
        try:
            out["cold_start_s"] = {"triton": _start_cost(_load(folder, name)), "from": name}
            break
        except OSError:
            continue
    return out


def main():
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command", required=True)
    c = sub.add_parser("compare")
    c.add_argument("--dir", required=True)
    s = sub.add_parser("sweep")
    s.add_argument("--cases", choices=("cover", "random"), required=True)
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--n", type=int, default=60, help="cases of a random sweep")
    s.add_argument("--json", required=True)
    s.add_argument("--warmup", metavar="RECORDING")
    s.add_argument("--cache-dir")
    s.add_argument("--no-digests", dest="digests", action="store_false")
    s.add_argument(
        "--profile-first-pass",
        metavar="FILE",
        help="cProfile the first pass (after any warmup) into FILE; its timings then count "
        "the profiler too",
    )
    args = parser.parse_args()
    if args.command == "compare":
        print(json.dumps(compare(args.dir), indent=1))
        return
    t0 = time.perf_counter()
    report = sweep(args)
    report["process_s"] = time.perf_counter() - t0
    with open(args.json, "w") as f:
        json.dump(report, f, indent=1)
    print(
        f"{args.cases}: {len(report['cases'])} cases digested, "
        f"first pass {report['first_pass_s']:.2f} s, "
        f"second {report['second_pass_s']:.2f} s, strict errors {len(report['strict_errors'])}"
        + (f", warmup {report['warmup']}" if "warmup" in report else "")
    )


if __name__ == "__main__":
    main()
