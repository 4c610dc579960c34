#!/usr/bin/env python3
"""Does the number of purge threads matter to users while purge drains at the maximum
checkpoint age? Per repetition, from a committed run's per-second CSVs of
i_drain_at_the_cliff:

    python3 bench/cliff.py bench/results/DATE [--scenario i_drain_at_the_cliff]
                           [--view 10,70] [--window 30] [--rate-window 20]

It prints the report (markdown) on stdout; the fortieth run's is phases.md there.

This machine's speed drifts between runs by up to 25 % (the same arm's mean TPS
moved 7 736-9 936 in three repetitions), more than the arms differ, so each run is
measured against itself:

- users' share: their mean TPS over the first --window seconds after the release
  (purge draining, the redo at the cliff) over their mean TPS from 10 s into the view
  to its end (purge blocked, the same cliff), in the same run;
- purge's rate over the first --rate-window seconds after the release: the fall of
  history plus the undo logs users added meanwhile (one per read-write transaction,
  oltp_write_only's commits), undo logs/s;
- the cost to users per 10 k undo logs purged a second: (1 - share) / rate.

Medians (min-max) of the repetitions per arm, then every repetition.
"""
import argparse
import csv
import glob
import os
import re
import statistics as st


def load(path):
    tps, hist, fill = {}, {}, {}
    with open(path) as f:
        for row in csv.DictReader(f):
            t = int(row["t"])
            if row.get("tps"):
                tps[t] = float(row["tps"])
            if row.get("history"):
                hist[t] = float(row["history"])
            if row.get("redo_fill_pct"):
                fill[t] = float(row["redo_fill_pct"])
    return tps, hist, fill


def mean_over(d, a, b):
    """Mean of d[t] for a < t <= b, None when no second is there."""
    v = [d[t] for t in range(a + 1, b + 1) if t in d]
    return st.mean(v) if v else None


def measure(path, view, window, rate_window):
    tps, hist, fill = load(path)
    v0, v1 = view
    during = mean_over(tps, v0 + 10, v1)
    drain = mean_over(tps, v1, v1 + window)
    h0, h1 = hist.get(v1 + 1), hist.get(v1 + 1 + rate_window)
    inflow = mean_over(tps, v1 + 1, v1 + 1 + rate_window)
    if None in (during, drain, h0, h1, inflow) or not during:
        return None
    rate = (h0 - h1) / rate_window + inflow
    share = drain / during
    at_max = sum(1 for t in range(v1 + 1, v1 + window + 1) if fill.get(t, 0) >= 95.0)
    return dict(view_tps=during, drain_tps=drain, share=share, purge_rate=rate,
                cost=(1 - share) / rate * 10000 if rate > 0 else None, at_max=at_max)


def cell(vals, f):
    v = [x for x in vals if x is not None]
    if not v:
        return "n/a"
    m = f.format(st.median(v))
    return m if min(v) == max(v) else f"{m} ({f.format(min(v))}–{f.format(max(v))})"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results")
    ap.add_argument("--scenario", default="i_drain_at_the_cliff")
    ap.add_argument("--view", default="10,70", help="the view's start and end, s")
    ap.add_argument("--window", type=int, default=30, help="seconds after the release for users' share")
    ap.add_argument("--rate-window", type=int, default=20, help="seconds after the release for purge's rate")
    a = ap.parse_args()
    view = tuple(int(x) for x in a.view.split(","))
    runs = {}
    pat = re.compile(re.escape(a.scenario) + r"-(.+)-r(\d+)\.csv$")
    for p in sorted(glob.glob(os.path.join(a.results, f"{a.scenario}-*-r*.csv"))):
        m = pat.search(os.path.basename(p))
        if not m:
            continue
        r = measure(p, view, a.window, a.rate_window)
        if r:
            runs.setdefault(m.group(1), []).append((int(m.group(2)), r))
    if not runs:
        raise SystemExit(f"no {a.scenario} runs under {a.results}")
    print(f"# {a.scenario}: users and purge while purge drains at the cliff\n")
    print(f"From `python3 bench/cliff.py {a.results}`: users' share = mean TPS over the {a.window} s "
          f"after the release / mean TPS from {view[0] + 10} s to the release ({view[1]} s), same run; "
          f"purge's rate over the {a.rate_window} s after the release (history's fall + users' commits). "
          f"Median (min–max) of the repetitions.\n")
    print("| arm | users' share while purge drains | purge's rate, undo logs/s | cost per 10 k/s purged "
          f"| s at fill ≥ 95 % in the {a.window} s |")
    print("|---|---|---|---|---|")
    for arm, rs in runs.items():
        rs = [r for _, r in rs]
        print(f"| {arm} | {cell([r['share'] for r in rs], '{:.2f}')} | "
              f"{cell([r['purge_rate'] for r in rs], '{:.0f}')} | {cell([r['cost'] for r in rs], '{:.3f}')} | "
              f"{cell([r['at_max'] for r in rs], '{:.0f}')} |")
    print("\nEvery repetition:\n")
    print("| arm | rep | TPS in the view | TPS while draining | share | purge's rate |")
    print("|---|---|---|---|---|---|")
    for arm, rs in runs.items():
        for rep, r in sorted(rs):
            print(f"| {arm} | {rep} | {r['view_tps']:.0f} | {r['drain_tps']:.0f} | {r['share']:.2f} | "
                  f"{r['purge_rate']:.0f} |")


if __name__ == "__main__":
    main()
