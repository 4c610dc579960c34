#!/usr/bin/env python3
"""What a dynamic server variable does to a scenario's load, read on one live server.

One server of a scenario (its pool, redo, device limits and load, as bench.py runs
them, without the read view), one closed-loop sysbench run, and the variables under
test set with SET GLOBAL in alternating blocks: the server's own values, a setting, its
own values, the next setting, ... for --rounds rounds. Each setting is judged against
the blocks of the server's own values either side of it, so a drift of the run (history
growing, the pool ageing) falls on both. This is the live check that comes before a
lever enters a policy: it says whether the server responds at all, and how much.

    python3 bench/probe.py --out bench/results/<dir> \\
        --setting depth256:innodb_lru_scan_depth=256 --setting depth4096:innodb_lru_scan_depth=4096

Writes probe.csv (per second: block, setting, TPS and the server's counters) and
probe.md (per block, and per setting against its neighbours). Values are integers and
names must be innodb_ variables the server has: the statement is built from validated
parts only, and the server's own values are put back before it stops.
"""
import argparse
import atexit
import csv
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402

NAME = re.compile(r"^innodb_[a-z_]+$")
# per-second rates read from the server's cumulative counters
RATES = {"reads/s": "Innodb_buffer_pool_reads", "free-page waits/s": "Innodb_buffer_pool_wait_free",
         "LRU writes/s": "Innodb_buffer_pool_pages_LRU_flushed", "page writes/s": "Innodb_buffer_pool_pages_flushed"}
LEVELS = {"free pages": "Innodb_buffer_pool_pages_free", "dirty pages": "Innodb_buffer_pool_pages_dirty",
          "history": "Innodb_history_list_length"}


def parse_setting(text):
    """'label:var=int[,var=int]' -> (label, {var: int}); refuses anything else."""
    label, sep, rest = text.partition(":")
    if not sep or not re.fullmatch(r"[A-Za-z0-9_.-]+", label):
        raise ValueError(f"--setting {text!r}: expected LABEL:innodb_variable=INTEGER[,...]")
    out = {}
    for part in rest.split(","):
        k, eq, v = part.partition("=")
        k = k.strip().lower()
        if not eq or not NAME.fullmatch(k) or not re.fullmatch(r"\d+", v.strip()):
            raise ValueError(f"--setting {text!r}: {part!r} is not innodb_variable=INTEGER")
        out[k] = int(v)
    return label, out


def set_vars(srv, values):
    # names matched NAME and values are integers (parse_setting, the server's own reads)
    stmt = "SET GLOBAL " + ", ".join(f"{k} = {int(v)}" for k, v in values.items())
    srv.sql(stmt, timeout=10)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scenario", default="e_purge_behind", help="bench.py scenario (default e_purge_behind)")
    ap.add_argument("--setting", action="append", required=True,
                    help="LABEL:innodb_var=INT[,innodb_var=INT]; repeat for several")
    ap.add_argument("--block-s", type=int, default=30, help="seconds a block (default 30)")
    ap.add_argument("--settle-s", type=int, default=8,
                    help="seconds at the start of a block left out of its figures (default 8)")
    ap.add_argument("--warm-s", type=int, default=30, help="seconds of load before the first block (default 30)")
    ap.add_argument("--rounds", type=int, default=2, help="rounds over the settings (default 2)")
    ap.add_argument("--read-iops", type=int, help="the device's read cap instead of the scenario's")
    ap.add_argument("--out", required=True, help="directory for probe.csv and probe.md")
    ap.add_argument("--workdir", help="where the server's files go (default a new /var/tmp dir, removed at exit; "
                                      "a directory given here is kept)")
    a = ap.parse_args()
    try:
        settings = [parse_setting(s) for s in a.setting]
    except ValueError as e:
        sys.exit(str(e))
    if a.block_s <= a.settle_s or a.rounds < 1:
        sys.exit("--block-s must exceed --settle-s, and --rounds be at least 1")
    sc = dict(bench.scenarios(False)[a.scenario], view=None)
    if a.read_iops is not None:
        if a.read_iops <= 0 or "read_iops" not in (sc.get("blkio") or {}):
            sys.exit("--read-iops needs a positive number and a scenario that caps reads")
        sc["blkio"] = dict(sc["blkio"], read_iops=a.read_iops)
    os.makedirs(a.out, exist_ok=True)
    if a.workdir:
        bench.BASE_DIR = a.workdir
    else:
        # The server's copy of the scenario's data (1.7 GB for e) is of no use once the
        # tables are written; two probes left theirs behind before this.
        bench.BASE_DIR = tempfile.mkdtemp(prefix="innopilot-probe-", dir="/var/tmp")
        atexit.register(shutil.rmtree, bench.BASE_DIR, True)
    t_start = time.time()
    template = bench.install_template(bench.BASE_DIR, a.scenario, sc)
    if sc.get("blkio"):
        sc["blkio_device"] = bench.blkio_setup(sc["blkio"])
    srv = bench.Server(bench.BASE_DIR, f"probe-{a.scenario}", sc, [], throttle=bool(sc.get("blkio")))
    os.makedirs(srv.dir, exist_ok=True)
    subprocess.run(["cp", "-a", template, srv.datadir], check=True)
    names = sorted({k for _, v in settings for k in v})
    plan = []
    for r in range(a.rounds):
        for label, values in settings:
            plan += [("own", {}), (label, values)]
    plan.append(("own", {}))
    duration = a.warm_s + len(plan) * a.block_s
    sb = None
    have = {}  # the server's own values, as read: what the finally block puts back
    try:
        srv.start()
        for k in names:
            out = (srv.sql(f"SELECT @@GLOBAL.{k}", check=False, timeout=5) or "").strip()
            # (a percentage such as innodb_max_dirty_pages_pct reads back as 90.000000)
            if not re.fullmatch(r"\d+(\.0+)?", out):
                sys.exit(f"the server has no variable {k} holding a whole number (read {out!r})")
            have[k] = int(float(out))
        bench.warm_pool(srv, sc)
        sb = subprocess.Popen(bench.sysbench_cmd(srv, sc, "run", duration=duration), stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
        out = []
        th = threading.Thread(target=lambda: out.extend(sb.stdout), daemon=True)
        th.start()
        t0 = time.time()
        samples, tick, block = [], 0, -1
        while sb.poll() is None and tick < duration + 5:
            tick += 1
            time.sleep(max(0.0, t0 + tick - time.time()))
            el = time.time() - t0
            b = int((el - a.warm_s) // a.block_s) if el >= a.warm_s else -1
            if 0 <= b < len(plan) and b != block:
                block = b
                label, values = plan[b]
                set_vars(srv, {k: values.get(k, have[k]) for k in names})
                bench.log(f"block {b}: {label} {values or have}")
            s = bench.sample_once(srv) or {}
            s["t"] = round(el, 2)
            s["block"] = block
            samples.append(s)
        th.join(timeout=10)
    finally:
        if sb and sb.poll() is None:
            sb.kill()
        if srv.proc and have:
            set_vars(srv, have)
        srv.stop()
    per_s = {r["t"]: r for r in bench.parse_sysbench("".join(out))}
    write(a, plan, settings, samples, per_s, time.time() - t_start)


def write(a, plan, settings, samples, per_s, wall):
    tps = {t: r["tps"] for t, r in per_s.items()}
    cols = sorted({k for s in samples for k in s if k not in ("user_tids",)} - {"t", "block"})
    with open(os.path.join(a.out, "probe.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["t", "block", "setting", "tps"] + cols)
        for s in samples:
            label = plan[s["block"]][0] if s["block"] >= 0 else "warm"
            w.writerow([s["t"], s["block"], label, tps.get(round(s["t"]))] + [s.get(c) for c in cols])
    rows = []
    for b, (label, values) in enumerate(plan):
        ss = [s for s in samples if s["block"] == b and s["t"] - a.warm_s - b * a.block_s >= a.settle_s]
        if len(ss) < 2:
            continue
        span = ss[-1]["t"] - ss[0]["t"]
        secs = [per_s[round(s["t"])] for s in ss if round(s["t"]) in per_s]
        if not secs:  # sysbench reported none of the block's seconds (it died early)
            continue
        # p99 ms: the median of sysbench's per-second 99th percentiles, so a free-page
        # wait that lands on users shows as latency even where TPS rises
        r = dict(block=b, setting=label, tps=statistics.median(x["tps"] for x in secs),
                 **{"p99 ms": statistics.median(x["p99"] for x in secs)})
        for name, key in RATES.items():
            r[name] = (ss[-1].get(key, 0) - ss[0].get(key, 0)) / span if span else None
        for name, key in LEVELS.items():
            r[name] = statistics.median(s.get(key, 0) for s in ss)
        rows.append(r)
    heads = ["block", "setting", "tps", "p99 ms"] + list(RATES) + list(LEVELS)
    lines = [f"# probe: {a.scenario}, blocks of {a.block_s} s (first {a.settle_s} s of each left out)", "",
             "Command: `python3 bench/probe.py " + " ".join(sys.argv[1:]) + "`", "",
             f"Wall time {wall / 60:.1f} min. Machine: {bench.machine_info()}", "",
             "| " + " | ".join(heads) + " |", "|" + "---|" * len(heads)]
    for r in rows:
        lines.append("| " + " | ".join((f"{r[h]:.1f}" if h == "p99 ms" else f"{r[h]:.0f}") if isinstance(r[h], float)
                                      else str(r[h]) for h in heads) + " |")
    lines += ["", "Each setting against the mean of the server's own values in the blocks either side:", "",
              "| setting | values | TPS × own | p99 × own | reads/s × own | free-page waits/s (own → setting) |",
              "|---|---|---|---|---|---|"]
    by_block = {r["block"]: r for r in rows}
    for label, values in settings:
        ratios, lat, rr, waits = [], [], [], []
        for b, (l2, _) in enumerate(plan):
            if l2 != label or b not in by_block or b - 1 not in by_block or b + 1 not in by_block:
                continue
            own = [by_block[b - 1], by_block[b + 1]]
            ratios.append(by_block[b]["tps"] / statistics.mean(o["tps"] for o in own))
            lat.append(by_block[b]["p99 ms"] / statistics.mean(o["p99 ms"] for o in own))
            rr.append(by_block[b]["reads/s"] / statistics.mean(o["reads/s"] for o in own))
            waits.append(f"{statistics.mean(o['free-page waits/s'] for o in own):.0f} → "
                         f"{by_block[b]['free-page waits/s']:.0f}")
        vals = ", ".join(f"{k}={v}" for k, v in values.items())
        lines.append(f"| {label} | {vals} | {' '.join(f'{x:.3f}' for x in ratios)} | "
                     f"{' '.join(f'{x:.2f}' for x in lat)} | "
                     f"{' '.join(f'{x:.3f}' for x in rr)} | {'; '.join(waits)} |")
    with open(os.path.join(a.out, "probe.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
