#!/usr/bin/env python3
"""What a read-bound device allows: the throughput any controller can keep in
e_purge_behind for a given purge debt at the end, from a committed run's per-second CSVs.

    python3 bench/frontier.py bench/results/DATE [--scenario e_purge_behind] [--from-s 45]
                              [--budget 100000] [--reference threshold]
                              [--phases 0,40,140,180] [--cost-phases 40,50,60,100,140,180]
                              [--bands 0,110000,140000,200000,300000,600000]

It prints the report (markdown) on stdout; bench/bench.py writes it to frontier.md.

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
not matter while the costs are linear: only the end history does). They are not quite:
while history is well above the budget the same work takes a few per cent more reads
(the per-phase table below; twenty-seventh run), so a drain that ends sooner serves a
little more than a slow one to the same end. The report gives,
for each run, its mean TPS against that bound at its own end history; the bound for
ending at the budget; and the lowest end history that 0.9 x the defaults' mean TPS
allows.

Two more sections say where the arms differ. "By phase": for each arm, the median over
repetitions of the transactions served in each phase (the sum of the per-second TPS
over the seconds t with a < t <= b, for the --phases boundaries; e's view ends at 40 s)
and its difference from the --reference arm's median (default threshold, else defaults).
"By history band": for every second t > --from-s of every run,

    purged(t) = tps(t) - (history(t) - history(t-1))   (one undo log per transaction in e)
    reads(t)  = pool_reads(t) - pool_reads(t-1)

and, over the seconds with purged > 0 whose history(t) falls in a --bands band,
sum(reads - a * tps) / sum(purged): the reads purge took per undo log once the users'
are taken out with the fitted a; for all arms together and for each arm with at least
20 seconds in the band, plus one row for the seconds where history is falling
(history(t) < history(t-5)). "Reads the model does not account for": per --cost-phases
phase, a * U + b * P - reads, the work the device did cheaper (positive) or dearer
(negative) than the fitted average. Python 3 standard library only.
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


def num(v):
    """A CSV cell as a number; empty or absent cells are missing (None)."""
    return None if v in (None, "") else float(v)


def seconds(path):
    """Per-second tps, history and pool_reads of one run, keyed by t; missing cells are None."""
    out = {}
    for r in csv.DictReader(open(path)):
        if r.get("t") in (None, ""):
            continue
        out[int(r["t"])] = (num(r.get("tps")), num(r.get("history")), num(r.get("pool_reads")))
    return out


def ints(text, what):
    try:
        v = [int(x) for x in text.split(",")]
    except ValueError:
        sys.exit(f"frontier: {what} must be comma-separated integers, got {text!r}")
    if len(v) < 2 or any(x >= y for x, y in zip(v, v[1:])):
        sys.exit(f"frontier: {what} must be at least two increasing integers, got {text!r}")
    return v


def spans(phases):
    """(a, b, name) for each phase between consecutive boundaries."""
    return [(a, b, f"{a}-{b} s") for a, b in zip(phases, phases[1:])]


def tps_in(secs, a, b):
    """The per-second TPS of the seconds a < t <= b that have one."""
    return [secs[t][0] for t in range(a + 1, b + 1) if t in secs and secs[t][0] is not None]


def by_phase(per_s, arms, ref, phases, view_end):
    """Transactions served per phase: median over repetitions, and the difference from ref."""
    names = [name for _, _, name in spans(phases)]
    med, gaps = {}, []
    for arm in arms:
        totals = []
        for rep, secs in per_s[arm]:
            row = []
            for a, b, name in spans(phases):
                tps = tps_in(secs, a, b)
                # A phase that reaches past the run or has empty cells is summed over the seconds
                # it has; say so rather than let a shorter sum read as lost transactions.
                if len(tps) < b - a:
                    gaps.append(f"{arm} r{rep}, {name}: {len(tps)} of {b - a} seconds")
                row.append(sum(tps))
            totals.append(row + [sum(row)])
        med[arm] = [statistics.median(c) for c in zip(*totals)], len(totals)
    print("## Where the arms' transactions differ, by phase")
    print()
    print(f"Transactions served in each phase: the sum of the per-second TPS over the seconds t with "
          f"a < t <= b, median over the repetitions; the total is the median of each run's sum over "
          f"{phases[0]}-{phases[-1]} s (not the sum of the phases' medians). \"vs {ref}\" is the arm's median "
          f"minus the reference arm's ({ref}) in the same column, and that as a share of the reference's."
          + (f" The view ends at {view_end} s." if view_end is not None else ""))
    print()
    cols = names + ["total"]
    print("| arm | runs | " + " | ".join(f"{c} | vs {ref}" for c in cols) + " |")
    print("|---|---|" + "---|---|" * len(cols))
    for arm in arms:
        m, n = med[arm]
        r = med[ref][0]
        cells = []
        for x, y in zip(m, r):
            d = "" if arm == ref else f"{x - y:+.0f} ({(x - y) / y * 100:+.1f} %)" if y else f"{x - y:+.0f}"
            cells.append(f"{x:.0f} | {d}")
        print(f"| {arm} | {n} | " + " | ".join(cells) + " |")
    if gaps:
        print()
        print("Phases summed over fewer seconds than they span: " + "; ".join(gaps) + ".")
    print()


def by_band(per_s, arms, a, b, from_s, bands, min_s=20, drain_lag=5):
    """Reads per undo log purged, net of the users' reads at the fitted a, per history band."""
    edges = list(zip(bands, bands[1:])) + [(bands[-1], None)]
    names = [f"{lo}-{hi}" if hi is not None else f">= {lo}" for lo, hi in edges]
    # acc[(band, arm)] = [seconds used, seconds with purged <= 0, sum(reads - a*tps), sum(purged)];
    # band "drain" collects the seconds whose history is below its value drain_lag seconds earlier.
    acc = {}
    below = 0

    def add(key, arm, net, purged):
        for k in ((key, arm), (key, None)):
            v = acc.setdefault(k, [0, 0, 0.0, 0.0])
            if purged > 0:
                v[0] += 1
                v[2] += net
                v[3] += purged
            else:
                v[1] += 1

    for arm in arms:
        for rep, secs in per_s[arm]:
            for t in sorted(secs):
                if t <= from_s or t - 1 not in secs:
                    continue
                tps, h, pr = secs[t]
                _, h0, pr0 = secs[t - 1]
                if None in (tps, h, pr, h0, pr0):
                    continue
                purged = tps - (h - h0)
                net = (pr - pr0) - a * tps
                band = next((i for i, (lo, hi) in enumerate(edges) if h >= lo and (hi is None or h < hi)), None)
                if band is None:
                    below += 1
                else:
                    add(band, arm, net, purged)
                hd = secs.get(t - drain_lag, (None, None, None))[1]
                if hd is not None and h < hd:
                    add("drain", arm, net, purged)
    print("## Reads per undo log purged, by history band")
    print()
    print(f"For every second t > {from_s} s of every run: purged(t) = tps(t) - (history(t) - "
          f"history(t-1)), since in this scenario each user transaction (one UPDATE) leaves one undo log; "
          f"reads(t) = pool_reads(t) - pool_reads(t-1). A second belongs to the band of history(t). "
          f"Over the seconds with purged > 0, the cell is **sum(reads - {a:.3f} x tps) / "
          f"sum(purged)**: the reads purge took per undo log once the users' reads (the fitted "
          f"{a:.3f} per transaction) are taken out. The fit above puts it at {b:.3f} for the whole segment. "
          f"Per arm only with at least {min_s} seconds in the band (seconds used in brackets). "
          f"\"falling\" takes the seconds where history(t) < history(t-{drain_lag}), whatever their band. "
          f"TPS comes from sysbench's per-second report and history and pool_reads from the sampler, "
          f"so one second's split is noisy; the sums over many seconds are not.")
    print()
    print("| history (undo logs) | seconds | purged <= 0, left out | purged/s | all arms | "
          + " | ".join(arms) + " |")
    print("|---|---|---|---|---|" + "---|" * len(arms))
    for key, name in list(enumerate(names)) + [("drain", "falling")]:
        v = acc.get((key, None))
        if not v:
            continue
        n, skipped, net, purged = v
        cells = []
        for arm in arms:
            w = acc.get((key, arm))
            cells.append(f"{w[2] / w[3]:.3f} ({w[0]} s)" if w and w[0] >= min_s and w[3] > 0 else
                         f"- ({w[0]} s)" if w else "")
        ratio = f"**{net / purged:.3f}**" if purged > 0 else "-"
        rate = f"{purged / n:.0f}" if n else "-"
        print(f"| {name} | {n} | {skipped} | {rate} | {ratio} | " + " | ".join(cells) + " |")
    if below:
        print()
        print(f"{below} seconds had history below the first band ({bands[0]}) and are left out.")


def unexplained(per_s, arms, a, b, phases):
    """Reads the fitted model does not account for, per phase: a*U + b*P - reads."""
    names = [name for _, _, name in spans(phases)]
    med, gaps = {}, []
    for arm in arms:
        cols = []
        for rep, secs in per_s[arm]:
            row = []
            for x, y, name in spans(phases):
                tps = tps_in(secs, x, y)
                ends = secs.get(x, (None,) * 3), secs.get(y, (None,) * 3)
                if len(tps) < y - x or None in ends[0][1:] + ends[1][1:]:
                    gaps.append(f"{arm} r{rep}, {name}")
                    row.append(None)
                    continue
                u = sum(tps)
                purged = u - (ends[1][1] - ends[0][1])
                reads = ends[1][2] - ends[0][2]
                row.append((a * u + b * purged - reads, reads))
            whole = [c for c in row if c is not None]
            row.append((sum(c[0] for c in whole), sum(c[1] for c in whole)) if len(whole) == len(row) else None)
            cols.append(row)
        present = [[c for c in col if c is not None] for col in zip(*cols)]
        med[arm] = ([statistics.median(c[0] for c in col) if col else None for col in present],
                    [statistics.median(c[1] for c in col) if col else None for col in present], len(cols))
    print("## Reads the model does not account for, by phase")
    print()
    print(f"For each phase a < t <= b: **a x U + b x P - reads**, with the fitted a = {a:.3f} and "
          f"b = {b:.3f}, U the transactions served (sum of the per-second TPS), P = U - (history(b) - "
          f"history(a)) the undo logs purged and reads = pool_reads(b) - pool_reads(a); median over the "
          f"repetitions, and as a share of the phase's reads. Positive: the device served that work with "
          f"fewer reads than the model charges (cheaper than average); negative: it took more. Divided by "
          f"a + b it is the transactions that many reads are worth at a steady history. A phase's sum "
          f"carries the history counter at its two ends, which can fall in steps (33 366 in one second "
          f"after the view, twenty-sixth run, threshold r1), so short phases are noisy; whole runs are not.")
    print()
    cols = names + ["total"]
    print("| arm | runs | " + " | ".join(cols) + " |")
    print("|---|---|" + "---|" * len(cols))
    for arm in arms:
        m, r, n = med[arm]
        cells = [f"{x:+.0f} ({x / y * 100:+.1f} %)" if x is not None and y else "-" for x, y in zip(m, r)]
        print(f"| {arm} | {n} | " + " | ".join(cells) + " |")
    if gaps:
        print()
        print("Phases left out (seconds or samples missing): " + "; ".join(gaps) + ".")
    print()


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
    ap.add_argument("--reference", default=None,
                    help="arm the others' transactions per phase are compared with (default threshold, else defaults)")
    ap.add_argument("--phases", default="0,40,140,180",
                    help="phase boundaries, s: a phase holds the seconds t with a < t <= b (e: view 10-40 s)")
    ap.add_argument("--cost-phases", default="40,50,60,100,140,180",
                    help="phase boundaries, s, for the reads the fitted model does not account for")
    ap.add_argument("--bands", default="0,110000,140000,200000,300000,600000",
                    help="history band boundaries, undo logs, for the reads per undo log purged")
    args = ap.parse_args()
    phases = ints(args.phases, "--phases")
    bands = ints(args.bands, "--bands")
    cost_phases = ints(args.cost_phases, "--cost-phases")

    runs, per_s = {}, {}
    for path in sorted(glob.glob(os.path.join(args.results, f"{args.scenario}-*-r*.csv"))):
        m = re.match(rf"{re.escape(args.scenario)}-(.+)-r(\d+)\.csv$", os.path.basename(path))
        if not m or m.group(2) == "0":
            continue
        r = load(path, args.from_s)
        if r:
            runs.setdefault(m.group(1), []).append((int(m.group(2)), r))
            per_s.setdefault(m.group(1), []).append((int(m.group(2)), seconds(path)))
    if "defaults" not in runs:
        sys.exit(f"frontier: no defaults runs of {args.scenario} in {args.results}: run the benchmark with the defaults arm")
    arms = list(runs)
    ref = args.reference or ("threshold" if "threshold" in runs else "defaults")
    if ref not in runs:
        sys.exit(f"frontier: no {ref} runs of {args.scenario} in {args.results} to compare the phases with "
                 f"(arms: {', '.join(arms)})")
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
    print()
    # e holds its view from 10 s to 40 s; other scenarios' view ends are not known here.
    by_phase(per_s, arms, ref, phases, 40 if args.scenario == "e_purge_behind" else None)
    unexplained(per_s, arms, a, b, cost_phases)
    by_band(per_s, arms, a, b, args.from_s, bands)


if __name__ == "__main__":
    main()
