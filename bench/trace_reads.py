#!/usr/bin/env python3
"""Each page read's wait, by thread, from the kernel's tracepoints, beside a bench run.

    python3 bench/trace_reads.py watch --out DIR [--at 60,130] [--secs 20]
    python3 bench/trace_reads.py summary DIR            # prints; the recordings stay in DIR

`watch` runs beside `bench/bench.py` (start it first; stop it with Ctrl-C when the run
ends). For every `sysbench ... run` against a bench mariadbd it records that mariadbd
with `perf record -p` for SECS seconds at each AT second after sysbench started: the
system calls that read a page (`pread64`), submit or reap asynchronous I/O
(`io_uring_enter`, `io_submit`, `io_getevents`, io_uring's submit / complete / punt
tracepoints) and wait on a lock or a condition (`futex`), each by thread id. Beside each
recording it keeps the processlist's `TID`s, so users are told from the server's own
threads. One process, two `perf` starts a run: it does not fork per sample (a forking
sampler perturbed the ninety-eighth run).

`summary` prints, per recording and per side (users, the server's threads): reads a
second, their size and wait (mean and percentiles), the share of reads that waited
over 10 ms and of the wait they carry; the same-moment test (reads issued in the same
2 ms: each side's mean wait — a first-come-first-served queue gives both the same);
the bursts in which long waits end; time in `pread64` and on futexes a thread;
asynchronous submissions by kind. The numbers in docs/benchmarks.md's hundredth run
come from it.

Needs root and `perf` with the syscalls / io_uring tracepoints. Python 3 standard
library only.
"""
import argparse
import collections
import json
import os
import re
import shutil
import statistics as st
import subprocess
import sys
import time

import bench

EVENTS = [
    "syscalls:sys_enter_pread64", "syscalls:sys_exit_pread64",
    "syscalls:sys_enter_io_uring_enter", "syscalls:sys_exit_io_uring_enter",
    "io_uring:io_uring_submit_req", "io_uring:io_uring_complete", "io_uring:io_uring_queue_async_work",
    "syscalls:sys_enter_io_submit", "syscalls:sys_enter_io_getevents", "syscalls:sys_exit_io_getevents",
    "syscalls:sys_enter_futex", "syscalls:sys_exit_futex",
]
LONG_MS = 10.0  # a read that waited past a throttle slice's closed part, not at the device
SAME_BIN_S = 0.002
FUTEX_WAITS = (0, 9)  # FUTEX_WAIT, FUTEX_WAIT_BITSET (the private flag masked off)


def procs():
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                with open(f"/proc/{p}/cmdline", "rb") as f:
                    yield int(p), f.read().split(b"\0")
            except OSError:
                pass


def start_time(pid):
    """Wall-clock start of a process: boot time + its start in clock ticks."""
    with open("/proc/stat") as f:
        btime = next(int(l.split()[1]) for l in f if l.startswith("btime"))
    fields = bench.proc_stat(f"/proc/{pid}/stat")[1]
    return btime + int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22, starttime


def watch(a):
    if os.geteuid() != 0:
        sys.exit("watch needs root (perf record of another user's mariadbd, its tracepoints)")
    if shutil.which("perf") is None:
        sys.exit("perf not found: install it (Debian: apt-get install linux-perf)")
    os.makedirs(a.out, exist_ok=True)
    at = [int(x) for x in a.at.split(",")]
    seen, n = set(), 0
    while True:
        sb = next(((p, c) for p, c in procs()
                   if c and c[0].endswith(b"sysbench") and b"run" in c and p not in seen), None)
        if sb is None:
            time.sleep(0.5)
            continue
        pid, cmd = sb
        seen.add(pid)
        try:
            t0 = start_time(pid)
        except OSError:
            continue
        sock = next((c.decode().split("=", 1)[1] for c in cmd if c.startswith(b"--mysql-socket=")), None)
        mpid = next((p for p, c in procs() if sock and c and c[0].endswith(b"mariadbd")
                     and f"--socket={sock}".encode() in c), None)
        n += 1
        print(f"run {n}: sysbench {pid}, mariadbd {mpid}, socket {sock}", flush=True)
        if mpid is None:
            continue
        for w in at:
            d = t0 + w - time.time()
            if d > 0:
                time.sleep(d)
            users = subprocess.run(
                ["mariadb", "--no-defaults", "-uroot", f"--socket={sock}", "-N", "-B", "-e",
                 "SELECT GROUP_CONCAT(TID) FROM information_schema.PROCESSLIST WHERE DB = 'sbtest'"],
                capture_output=True, text=True, timeout=10).stdout.strip()
            comms = {}
            for t in os.listdir(f"/proc/{mpid}/task"):
                try:
                    with open(f"/proc/{mpid}/task/{t}/comm") as f:
                        comms[t] = f.read().strip()
                except OSError:
                    pass
            tag = os.path.join(a.out, f"run{n}-t{w}")
            with open(tag + ".json", "w") as f:
                json.dump(dict(at_s=w, users=users, comms=comms, mariadbd=mpid, socket=sock), f)
            with open(tag + ".err", "w") as err:
                subprocess.run(["perf", "record", "-q", "-o", tag + ".data"]
                               + [x for e in EVENTS for x in ("-e", e)]
                               + ["-p", str(mpid), "--", "sleep", str(a.secs)],
                               stdout=subprocess.DEVNULL, stderr=err)
            print(f"  {w} s: {tag}.data", flush=True)


LINE = re.compile(r"\s*(\d+)\s+([\d.]+):\s+(\S+):\s*(.*)")


def summarise(tag):
    with open(tag + ".json") as f:
        meta = json.load(f)
    users = {int(x) for x in (meta["users"] or "").split(",") if x.strip().isdigit()}
    comms = {int(k): v for k, v in meta["comms"].items()}

    def side(tid):
        return "users" if tid in users else "server"

    out = subprocess.run(["perf", "script", "-i", tag + ".data", "-F", "tid,time,event,trace"],
                         capture_output=True, text=True, check=True).stdout
    pending, futex_from, reads = {}, {}, []
    futex = collections.defaultdict(float)
    submits = collections.defaultdict(collections.Counter)
    punted = collections.Counter()
    first = last = None
    for line in out.splitlines():
        m = LINE.match(line)
        if not m:
            continue
        tid, t, ev, tr = int(m[1]), float(m[2]), m[3], m[4]
        first = t if first is None else first
        last = t
        if ev == "syscalls:sys_enter_pread64":
            pending[tid] = (t, int(re.search(r"count: (0x[0-9a-f]+)", tr)[1], 16))
        elif ev == "syscalls:sys_exit_pread64" and tid in pending:
            t0, size = pending.pop(tid)
            reads.append((t0, (t - t0) * 1e3, size, tid))
        elif ev == "syscalls:sys_enter_futex":
            if int(re.search(r"op: (0x[0-9a-f]+|\d+)", tr)[1], 0) & 0x7F in FUTEX_WAITS:
                futex_from[tid] = t
        elif ev == "syscalls:sys_exit_futex" and tid in futex_from:
            futex[tid] += t - futex_from.pop(tid)
        elif ev == "io_uring:io_uring_submit_req":
            op = re.search(r"opcode (\w+)", tr)
            submits[side(tid)][op[1] if op else "?"] += 1
        elif ev == "io_uring:io_uring_queue_async_work":
            punted[side(tid)] += 1
        elif ev == "syscalls:sys_enter_io_submit":
            submits[side(tid)]["io_submit"] += 1
    dur = (last - first) if first is not None else 0.0
    print(f"== {tag}: {dur:.1f} s traced at {meta['at_s']} s, {len(users)} users")
    if not reads or dur <= 0:
        print("   no reads traced")
        return
    reads.sort()
    per_thread = collections.Counter(x[3] for x in reads)
    for s in ("users", "server"):
        r = [x for x in reads if side(x[3]) == s]
        if not r:
            continue
        lat = sorted(x[1] for x in r)
        threads = {x[3] for x in r}
        q = lambda p: lat[min(len(lat) - 1, int(p * len(lat)))]
        long_ = [x for x in lat if x > LONG_MS]
        in_pread = collections.Counter()
        for x in r:
            in_pread[x[3]] += x[1] / 1e3
        fut = [futex.get(t, 0.0) / dur for t in threads]
        print(f"   {s:6s} {len(threads):2d} threads read: {len(r) / dur:7.0f}/s of {st.mean(x[2] for x in r) / 1024:.0f} KiB; "
              f"wait mean {st.mean(lat):.2f} ms, p10 {q(.1):.2f}, p50 {q(.5):.2f}, p90 {q(.9):.2f}, p99 {q(.99):.1f}")
        print(f"          over {LONG_MS:.0f} ms: {len(long_) / len(lat) * 100:.2f} % of reads, {sum(long_) / sum(lat) * 100:.0f} % of the wait "
              f"(mean {st.mean(long_) if long_ else 0:.1f} ms); the rest {st.mean([x for x in lat if x <= LONG_MS]):.2f} ms")
        print(f"          a reading thread: {min(per_thread[t] for t in threads) / dur:.0f}-"
              f"{max(per_thread[t] for t in threads) / dur:.0f} reads/s, "
              f"in pread64 {min(in_pread.values()) / dur:.2f}-{max(in_pread.values()) / dur:.2f} s/s (sum {sum(in_pread.values()) / dur:.2f}), "
              f"on futexes {min(fut):.2f}-{max(fut):.2f} s/s")
    for s, c in submits.items():
        print(f"   {s} asynchronous submissions/s: " + ", ".join(f"{k} {v / dur:.0f}" for k, v in sorted(c.items())))
    if punted:
        print("   punted to io_uring workers/s: " + ", ".join(f"{k} {v / dur:.0f}" for k, v in punted.items()))
    bins = collections.defaultdict(lambda: {"users": [], "server": []})
    for t0, lat, _, tid in reads:
        bins[int(t0 / SAME_BIN_S)][side(tid)].append(lat)
    both = [(st.mean(b["users"]), st.mean(b["server"])) for b in bins.values() if b["users"] and b["server"]]
    if both:
        print(f"   issued in the same {SAME_BIN_S * 1e3:.0f} ms ({len(both)} bins): users wait {st.mean(u for u, _ in both):.2f} ms, "
              f"the server's threads {st.mean(s for _, s in both):.2f} ms")
    # When long waits end: a throttle that budgets per slice releases them together.
    ends = sorted(t0 + lat / 1e3 for t0, lat, _, _ in reads if lat > LONG_MS)
    t1 = reads[0][0] + dur / 2
    bursts = []
    for e in (e for e in ends if t1 <= e < t1 + 1):
        if bursts and e - bursts[-1][-1] < 0.003:
            bursts[-1].append(e)
        else:
            bursts.append([e])
    print("   long waits end in bursts (ms into one second: reads): "
          + ", ".join(f"{(b[0] - t1) * 1e3:.0f}: {len(b)}" for b in bursts))
    done = collections.Counter(int((t0 + lat / 1e3 - t1) / 0.005) for t0, lat, _, _ in reads
                               if t1 <= t0 + lat / 1e3 < t1 + 0.3)
    print("   reads completed per 5 ms over 300 ms: " + " ".join(str(done.get(i, 0)) for i in range(60)))
    top = sorted(((k, t) for t, k in per_thread.items() if side(t) == "server"), reverse=True)[:8]
    for k, t in top:
        lat = [x[1] for x in reads if x[3] == t]
        print(f"     server thread {t} ({comms.get(t, '?')}): {k / dur:.0f} reads/s, wait {st.mean(lat):.2f} ms, "
              f"futex {futex.get(t, 0.0) / dur:.2f} s/s")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    sub = ap.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("watch", help="record beside a running bench.py")
    w.add_argument("--out", required=True, help="directory for the recordings (hundreds of MB a run)")
    w.add_argument("--at", default="60,130", help="seconds after sysbench starts (default 60,130)")
    w.add_argument("--secs", type=int, default=20, help="length of each recording (default 20)")
    s = sub.add_parser("summary", help="print what the recordings say")
    s.add_argument("dir")
    a = ap.parse_args()
    if a.cmd == "watch":
        try:
            watch(a)
        except KeyboardInterrupt:
            pass
    else:
        if not os.path.isdir(a.dir):
            sys.exit(f"{a.dir}: no such directory; give the --out of `watch`")
        tags = sorted(f[:-5] for f in os.listdir(a.dir) if f.endswith(".data"))
        if not tags:
            sys.exit(f"no perf recordings (*.data) in {a.dir}: run `watch --out {a.dir}` beside bench.py first")
        for t in tags:
            summarise(os.path.join(a.dir, t))


if __name__ == "__main__":
    main()
