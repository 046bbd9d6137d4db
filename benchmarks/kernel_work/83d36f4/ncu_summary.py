"""Summarize Nsight Compute's CSV (``--csv --page details``) of ncu_topk.py: one line per launch
of the second (profiled) call at each shape. Usage: python3 ncu_summary.py ncu_topk.csv"""

import csv
import io
import sys

METRICS = {
    "Duration": "us",
    "DRAM Throughput": "dram%",
    "Compute (SM) Throughput": "sm%",
    "Issued Warp Per Scheduler": "issued",
    "Registers Per Thread": "regs",
    "Block Size": "threads",
    "Grid Size": "grid",
    "Waves Per SM": "waves",
    "Theoretical Occupancy": "occ_th%",
    "Achieved Occupancy": "occ%",
    "Eligible Warps Per Scheduler": "eligible",
    "L2 Hit Rate": "l2hit%",
}


def launches(path):
    text = open(path).read()
    table = text[text.index('"ID"') :]
    by_id = {}
    for row in csv.DictReader(io.StringIO(table)):
        if row["Metric Name"] in METRICS:
            entry = by_id.setdefault(int(row["ID"]), {"kernel": row["Kernel Name"]})
            value = float(row["Metric Value"].replace(",", ""))
            if row["Metric Name"] == "Duration":
                value /= 1000 if row["Metric Unit"] == "ns" else 1
            entry[METRICS[row["Metric Name"]]] = value
    return by_id


def main(path):
    by_id = launches(path)
    cols = list(METRICS.values())
    print(f"{'id':>3} {'kernel':24} " + " ".join(f"{c:>8}" for c in cols))
    for i, e in sorted(by_id.items()):
        vals = " ".join(f"{e.get(c, float('nan')):8.2f}" for c in cols)
        print(f"{i:>3} {e['kernel'][:24]:24} {vals}")


if __name__ == "__main__":
    main(sys.argv[1])
