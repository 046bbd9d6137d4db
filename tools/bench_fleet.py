"""Fleet benchmark on a GPU, in one run (results: docs/benchmarks.md): how fast a new host
starts from the shared tier and from an imported bundle, against a warm local start.

A redis-server on the loopback holds the tier. A first host warms up on an empty cache and
publishes; then, repeated, in fresh processes that have imported torch and the kernels and
initialized CUDA (as a server has), ``warmup()`` is timed:

- ``warm_local``: the first host again (its cache holds everything);
- ``tier``: a new host with an empty cache folder and the tier;
- ``bundle``: a new host whose folder got the first host's bundle by ``qsa-warmup import``
  (the import is timed apart);
- ``tier+launchers`` and ``bundle+launchers``: the same with the C launchers already built
  in the folder (host code is never fetched nor bundled: a new host builds them once);
- ``tier+launchers+memo``: also with the toolchain memo in the folder (a host whose image ran
  ``qsa-warmup info`` once: Triton's ``triton_key()`` hashes its 400 MB library otherwise;
  ``import`` leaves that memo, so the bundle modes have it).

Every host holds the fleet's key (``QSA_WARMUP_REMOTE_KEY``), so plans come signed from the
tier as well. Targets: ``tier+launchers`` <= 2x ``warm_local`` + the fetched bytes' time at
the loopback's measured speed; ``bundle+launchers`` <= 1.2x ``warm_local``.

    python tools/bench_fleet.py --out benchmarks/bench_fleet/h200.json [--redis-server PATH]
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CHILD = r"""
import json, sys, time
sys.path.insert(0, sys.argv[1])
import torch
import kernels
torch.cuda.init(); torch.empty(1, device="cuda")
from qsa_warmup import warmup
start = time.perf_counter()
r = warmup(sys.argv[2], cache_dir=sys.argv[3], remote=sys.argv[4])
seconds = time.perf_counter() - start
print(json.dumps({"seconds": seconds, "loaded": r.loaded, "compiled": r.compiled,
                  "fetched": r.fetched, "remote": r.remote, "warnings": r.warnings}))
"""


def child(env, preset, cache, url):
    p = subprocess.run(
        [sys.executable, "-c", CHILD, ROOT, preset, cache, url],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
    )
    if p.returncode:
        raise SystemExit(f"child failed: {p.stderr[-3000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_redis(binary: str, folder: str):
    port = free_port()
    proc = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        cwd=folder,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    import redis

    client = redis.Redis(port=port)
    for _ in range(200):
        try:
            client.ping()
            return proc, client, f"redis://127.0.0.1:{port}/0"
        except redis.ConnectionError:
            time.sleep(0.05)
    raise SystemExit("redis-server did not start")


def loopback_bytes_per_s(client) -> float:
    """GET of one 64 MiB value, best of 5: the loopback's speed for the tier's transfers."""
    blob = os.urandom(64 << 20)
    client.set("bench:blob", blob)
    best = min(_timed(lambda: client.get("bench:blob")) for _ in range(5))
    client.delete("bench:blob")
    return len(blob) / best


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def copy_launchers(src: str, dst: str) -> int:
    """The C launcher folders of ``src``'s Triton cache into ``dst``'s (what a host that built
    them once keeps)."""
    folders = {os.path.dirname(p) for p in glob.glob(os.path.join(src, "triton", "*", "*.so"))}
    for folder in folders:
        shutil.copytree(folder, os.path.join(dst, "triton", os.path.basename(folder)))
    return len(folders)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default="default")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--redis-server", default=shutil.which("redis-server") or "redis-server")
    ap.add_argument("--out")
    args = ap.parse_args()
    base = tempfile.mkdtemp(prefix="bench-fleet-")
    env = dict(
        os.environ,
        PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
        PYTHONPYCACHEPREFIX=os.path.join(base, "pycache"),
    )
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.pop("QSA_WARMUP_REMOTE", None)
    env["QSA_WARMUP_REMOTE_KEY"] = "bench-fleet-key"
    proc, client, url = start_redis(args.redis_server, base)
    try:
        results = run(args, base, env, client, url)
    finally:
        proc.kill()
    if args.out:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1)


def run(args, base, env, client, url) -> dict:
    first = os.path.join(base, "first")
    publish = child(env, args.preset, first, url)
    assert publish["compiled"] and publish["remote"]["published"], publish
    child(env, args.preset, first, "")  # bytecode and launchers in place, as on a served host
    bundle = os.path.join(base, "fleet.qsa")
    export_s = _timed(
        lambda: subprocess.run(
            [sys.executable, "-m", "qsa_warmup", "export", "--cache-dir", first, "--out", bundle],
            check=True,
            env=env,
            capture_output=True,
        )
    )
    rate = loopback_bytes_per_s(client)
    modes = ("tier", "tier+launchers", "tier+launchers+memo")
    runs = {k: [] for k in ("warm_local", *modes, "bundle", "bundle+launchers")}
    imports = []
    for i in range(args.repeats):
        runs["warm_local"].append(child(env, args.preset, first, ""))
        for mode in modes:
            folder = os.path.join(base, f"{mode}-{i}")
            os.makedirs(folder)
            if "launchers" in mode:
                copy_launchers(first, folder)
            if mode.endswith("memo"):
                shutil.copytree(
                    os.path.join(first, "toolchain-memo"), os.path.join(folder, "toolchain-memo")
                )
            runs[mode].append(child(env, args.preset, folder, url))
        for mode in ("bundle", "bundle+launchers"):
            folder = os.path.join(base, f"{mode}-{i}")
            os.makedirs(folder)
            if mode.endswith("launchers"):
                copy_launchers(first, folder)
            cmd = [sys.executable, "-m", "qsa_warmup", "import", bundle, "--cache-dir", folder]
            imports.append(_timed(lambda c=cmd: subprocess.run(c, check=True, env=env)))
            runs[mode].append(child(env, args.preset, folder, ""))
    median = {k: statistics.median(r["seconds"] for r in v) for k, v in runs.items()}
    fetched_bytes = runs["tier"][0]["remote"]["bytes_fetched"]
    transfer_s = fetched_bytes / rate
    results = {
        "preset": args.preset,
        "repeats": args.repeats,
        "median_s": median,
        "compiled": {k: max(r["compiled"] for r in v) for k, v in runs.items()},
        "fetched": {k: min(r["fetched"] for r in v) for k, v in runs.items()},
        "first_host": {k: publish[k] for k in ("seconds", "compiled", "remote")},
        "bundle_bytes": os.path.getsize(bundle),
        "export_s": export_s,
        "import_s_median": statistics.median(imports),
        "tier_bytes_fetched": fetched_bytes,
        "loopback_bytes_per_s": rate,
        "transfer_s": transfer_s,
        "ratios": {k: median[k] / median["warm_local"] for k in median if k != "warm_local"},
        "targets": {
            "tier+launchers <= 2x warm + transfer": median["tier+launchers"]
            <= 2 * median["warm_local"] + transfer_s,
            "bundle+launchers <= 1.2x warm": median["bundle+launchers"]
            <= 1.2 * median["warm_local"],
        },
        "runs": runs,
    }
    for k, v in median.items():
        ratio = "" if k == "warm_local" else f"  {v / median['warm_local']:.2f}x warm"
        print(f"{k:<18} {v * 1e3:8.1f} ms  compiled {results['compiled'][k]}{ratio}")
    print(
        f"tier: {fetched_bytes} bytes fetched, {transfer_s * 1e3:.1f} ms at the loopback's "
        f"{rate / 1e9:.2f} GB/s; bundle {results['bundle_bytes']} bytes, import "
        f"{results['import_s_median'] * 1e3:.0f} ms, export {export_s * 1e3:.0f} ms"
    )
    print(json.dumps(results["targets"]))
    return results


if __name__ == "__main__":
    main()
