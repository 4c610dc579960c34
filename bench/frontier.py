#!/usr/bin/env python3
"""What a read-bound device allows: the throughput any controller can keep in
e_purge_behind for a given purge debt at the end, from a committed run's per-second CSVs.

    python3 bench/frontier.py bench/results/DATE [--scenario e_purge_behind] [--from-s 45]
                              [--budget 100000]

In e every read is a buffer-pool miss served by a device capped at 6000 reads/s
(blkio), and both users and purge need reads: a user transaction reads the clustered
and secondary-index pages it changes, purge reads the ones it cleans. So over the
seconds after the view's backlog (from --from-s on)

    reads = a * U + b * P           U user transactions, P undo logs purged

with P = U - (history at the end - history at the start of the segment). a and b are
fitted by least squares on the runs whose device was saturated (needs arms that purge
different shares of their inflow, e.g. defaults and threshold). The fit is checked on
every run, saturated or not. For a segment of S seconds at the device's rate R,

    U <= (R * S + b * (H_end - H_from)) / (a + b)

is the most users can commit for that end history, whoever decides how (timing does
not matter while the costs are linear: only the end history does). The report gives,
for each run, its mean TPS against that bound at its own end history; the bound for
ending at the budget; and the lowest end history that 0.9 x the defaults' mean TPS
allows. Python 3 standard library only.
"""
import argparse
import csv
import glob
import os
import re
import statistics
import sys


def load(path, from_s):
    rows = list(csv.DictReader(open(path)))
    rows = [r for r in rows if r.get("tps") not in (None, "") and r.get("pool_reads") not in (None, "")]
    if len(rows) < from_s + 10:
        return None
    seg = [r for r in rows if int(r["t"]) >= from_s]
    # The last second is often partial (the load stops within it).
    seg = seg[:-1]
    first, last = seg[0], seg[-1]
    s = int(last["t"]) - int(first["t"])
    u_seg = sum(float(r["tps"]) for r in seg[1:])
    u_all = sum(float(r["tps"]) for r in rows[:-1])
    h_from, h_end = int(first["history"]), int(last["history"])
    reads = int(last["pool_reads"]) - int(first["pool_reads"])
    return {
        "seconds": s,
        "all_seconds": len(rows) - 1,
        "u_seg": u_seg,
        "u_pre": u_all - u_seg,
        "p_seg": u_seg - (h_end - h_from),
        "h_from": h_from,
        "h_end": h_end,
        "reads": reads,
        "read_rate": reads / s,
        "mean_tps": u_all / (len(rows) - 1),
    }


def fit(points):
    """Least squares of reads = a*U + b*P without intercept."""
    sxx = sum(u * u for u, p, r in points)
    sxy = sum(u * p for u, p, r in points)
    syy = sum(p * p for u, p, r in points)
    sxr = sum(u * r for u, p, r in points)
    syr = sum(p * r for u, p, r in points)
    det = sxx * syy - sxy * sxy
    if abs(det) < 1e-9 * sxx * syy:
        return None
    return (sxr * syy - syr * sxy) / det, (syr * sxx - sxr * sxy) / det


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results", help="a bench/results/<run> directory")
    ap.add_argument("--scenario", default="e_purge_behind")
    ap.add_argument("--from-s", type=int, default=45,
                    help="start of the segment, s: after the view's backlog has drained (e: view 10-40 s)")
    ap.add_argument("--budget", type=int, default=100_000, help="history budget, undo logs")
    ap.add_argument("--saturated", type=float, default=0.98,
                    help="a run is saturated when its read rate is at least this share of the highest")
    args = ap.parse_args()

    runs = {}
    for path in sorted(glob.glob(os.path.join(args.results, f"{args.scenario}-*-r*.csv"))):
        m = re.match(rf"{re.escape(args.scenario)}-(.+)-r(\d+)\.csv$", os.path.basename(path))
        if not m or m.group(2) == "0":
            continue
        r = load(path, args.from_s)
        if r:
            runs.setdefault(m.group(1), []).append((int(m.group(2)), r))
    if "defaults" not in runs:
        sys.exit(f"frontier: no defaults runs of {args.scenario} in {args.results}: run the benchmark with the defaults arm")
    top = max(r["read_rate"] for rs in runs.values() for _, r in rs)
    sat = [(r["u_seg"], r["p_seg"], r["reads"]) for rs in runs.values() for _, r in rs
           if r["read_rate"] >= args.saturated * top]
    ab = fit(sat)
    shares = sorted({round(p / u, 2) for u, p, _ in sat})
    if ab is None or len(shares) < 2 or shares[-1] - shares[0] < 0.2:
        sys.exit("frontier: the saturated runs all purge the same share of their inflow, so the two "
                 "read costs cannot be told apart: include an arm that holds history (threshold)")
    a, b = ab
    rate = statistics.median(r["read_rate"] for _, r in runs["defaults"])
    print(f"# Read frontier: {args.scenario} in {args.results}, segment from {args.from_s} s")
    print()
    print(f"Fitted on {len(sat)} saturated runs: reads = {a:.3f} x user transactions + {b:.3f} x undo logs "
          f"purged; the device gives {rate:.0f} reads/s (defaults' median).")
    print()
    print("| arm | run | mean TPS | history at end | reads/s | fit error | TPS bound at this end history | share of the bound |")
    print("|---|---|---|---|---|---|---|---|")
    share = {}
    for arm, rs in runs.items():
        for rep, r in sorted(rs):
            pred = a * r["u_seg"] + b * r["p_seg"]
            u_max = (rate * r["seconds"] + b * (r["h_end"] - r["h_from"])) / (a + b)
            bound = (r["u_pre"] + u_max) / r["all_seconds"]
            share.setdefault(arm, []).append((r["mean_tps"] / bound, r["mean_tps"], r["h_end"], bound))
            print(f"| {arm} | {rep} | {r['mean_tps']:.0f} | {r['h_end']} | {r['read_rate']:.0f} | "
                  f"{(pred - r['reads']) / r['reads'] * 100:+.1f} % | {bound:.0f} | {r['mean_tps'] / bound:.2f} |")
    print()
    d = runs["defaults"]
    d_tps = statistics.median(r["mean_tps"] for _, r in d)
    # The defaults' own segment as the reference: same pre-segment, same start history.
    pre = statistics.median(r["u_pre"] for _, r in d)
    n_all = statistics.median(r["all_seconds"] for _, r in d)
    s = statistics.median(r["seconds"] for _, r in d)
    h_from = statistics.median(r["h_from"] for _, r in d)
    u_budget = (rate * s + b * (args.budget - h_from)) / (a + b)
    at_budget = (pre + u_budget) / n_all
    u_09 = 0.9 * d_tps * n_all - pre
    h_09 = h_from + ((a + b) * u_09 - rate * s) / b
    print(f"- The defaults: {d_tps:.0f} TPS, history {statistics.median(r['h_end'] for _, r in d):.0f} at the end.")
    print(f"- Ending at the budget {args.budget} (from the defaults' {h_from:.0f} at {args.from_s} s) allows at most "
          f"**{at_budget:.0f} TPS, {at_budget / d_tps:.2f} x the defaults'**.")
    print(f"- 0.9 x the defaults' TPS ({0.9 * d_tps:.0f}) leaves at least **{h_09:.0f}** undo logs at the end.")
    for arm, v in share.items():
        print(f"- {arm}: median share of the bound {statistics.median(x[0] for x in v):.2f}.")


if __name__ == "__main__":
    main()
