#!/usr/bin/env python3
"""What purge threads over the baseline cost users, from committed runs' per-second CSVs.

    python3 bench/threads.py bench/results/RUN [bench/results/RUN ...]
                             [--scenario e_purge_behind] [--baseline 4]

For every repetition of every innopilot arm (and the defaults) of the scenario, each
second is put in a bucket: how many purge threads over the baseline were in effect at
any of that second and the three before it (the sample lags the SET by a second or
two, and a thread's cost shows a second or two after it starts), and whether the DML
brake was on (history above innodb_max_purge_lag with a delay set, which MariaDB
applies once per changed row while purge progresses). Per bucket it prints the seconds
in it, those under half the repetition's median TPS, and that as a rate per 1 000 s.

Then every thread added above baseline + 1: when, how long it stayed, the lowest
second (× median) from its start to three seconds after it went, and the free-page
waits (Innodb_buffer_pool_wait_free) meanwhile.

The LRU's share of the pages flushed is printed beside each addition: in e it is
100 % from the first minute, which is what the purge-rate policy's eviction rule reads
(`EVICTION_THREADS` in src/policy/purge_rate.rs).
"""
import argparse
import collections
import csv
import glob
import os
import statistics


def num(x):
    try:
        return float(x)
    except (TypeError, ValueError):
        return None


def load(path):
    return [r for r in csv.DictReader(open(path)) if num(r.get("tps")) is not None]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", help="bench/results/<run> directories")
    ap.add_argument("--scenario", default="e_purge_behind")
    ap.add_argument("--baseline", type=int, default=4, help="the scenario's innodb_purge_threads")
    a = ap.parse_args()

    buckets = collections.defaultdict(lambda: [0, 0])
    adds = []
    files = 0
    for run in a.runs:
        for path in sorted(glob.glob(os.path.join(run, f"{a.scenario}-*-r*.csv"))):
            rows = load(path)
            if len(rows) < 10:
                continue
            files += 1
            arm = os.path.basename(path)[len(a.scenario) + 1:].rsplit("-r", 1)[0]
            kind = "defaults" if arm == "defaults" else ("innopilot" if arm.startswith("innopilot") else None)
            if kind is None:
                continue
            med = statistics.median(num(r["tps"]) for r in rows)
            thr = [num(r["purge_threads"]) or 0 for r in rows]
            for i in range(1, len(rows)):
                r = rows[i]
                extra = int(max(thr[max(0, i - 3):i + 1]) - a.baseline)
                brake = (num(r["history"]) or 0) > (num(r["max_purge_lag"]) or 0) > 0 \
                    and (num(r["purge_lag_delay_us"]) or 0) > 0
                b = buckets[(kind, max(extra, 0), brake)]
                b[0] += 1
                b[1] += num(r["tps"]) < 0.5 * med
            for i in range(1, len(rows)):
                if thr[i] > thr[i - 1] and thr[i] > a.baseline + 1:
                    j = i
                    while j < len(rows) and thr[j] >= thr[i]:
                        j += 1
                    end = min(len(rows), j + 3)
                    low = min(num(rows[k]["tps"]) for k in range(i, end)) / med
                    waits = num(rows[end - 1]["free_page_waits"]) - num(rows[i - 1]["free_page_waits"])
                    fl = num(rows[i]["pages_flushed"]) - num(rows[i - 1]["pages_flushed"])
                    lru = num(rows[i]["lru_flushed"]) - num(rows[i - 1]["lru_flushed"])
                    adds.append((os.path.relpath(path), rows[i]["t"], int(thr[i]), j - i, low, waits,
                                 lru / fl if fl else float("nan")))

    print(f"{files} repetitions of {a.scenario} in {len(a.runs)} runs\n")
    print("| arm | threads over the baseline (this or the 3 s before) | DML brake on | seconds | "
          "under half the median | per 1 000 s |")
    print("|---|---|---|---|---|---|")
    for (kind, extra, brake), (n, under) in sorted(buckets.items()):
        print(f"| {kind} | {extra} | {'yes' if brake else 'no'} | {n} | {under} | {1000 * under / n:.1f} |")
    print(f"\n{len(adds)} threads added above baseline + 1:\n")
    print("| repetition | t (s) | threads | kept (s) | lowest second (× median) | free-page waits | "
          "LRU share of pages flushed |")
    print("|---|---|---|---|---|---|---|")
    for path, t, n, kept, low, waits, share in adds:
        print(f"| {path} | {t} | {n} | {kept} | {low:.2f} | {waits:.0f} | {share:.2f} |")


if __name__ == "__main__":
    main()
