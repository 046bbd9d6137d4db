import sys, time, cProfile, pstats
t0 = time.perf_counter()
import torch, toy_kernels, qsa_warmup
t1 = time.perf_counter()
prof = "--prof" in sys.argv
if prof:
    pr = cProfile.Profile(); pr.enable()
r = qsa_warmup.warmup(recordings="rec.jsonl", cache_dir="cache", target="sm_90")
t2 = time.perf_counter()
if prof:
    pr.disable(); pstats.Stats(pr).sort_stats("cumulative").print_stats(45)
print("imports", round(t1 - t0, 3), "warmup", round(t2 - t1, 3), r)
