#!/usr/bin/env python3
"""innopilot real-server benchmark (issue 6).

Per scenario: one private MariaDB configuration, sysbench tables prepared once into a
template datadir (slow shutdown, so it starts purged and clean), then every arm runs on a
fresh copy of that datadir, interleaved (A B C ... A B C ...). Every second the harness
samples the server (one SHOW GLOBAL STATUS + one SELECT of the knobs, through the
`mariadb` client) and innopilot's /proc entries; sysbench reports per-second TPS and p99.

Python 3 standard library only. Run through scripts/bench.sh; see docs/benchmarks.md.
Never touches port 3306 or the system server: --no-defaults, private socket, free port.
"""

import argparse
import atexit
import csv
import datetime as dt
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

# ----------------------------------------------------------------------------------------
# Fixed configuration (documented in docs/benchmarks.md; change it there too)

COMMON_SERVER_ARGS = [
    "--skip-name-resolve",
    "--skip-log-bin",
    "--innodb-buffer-pool-load-at-startup=OFF",
    "--innodb-buffer-pool-dump-at-shutdown=OFF",
    "--innodb-flush-method=O_DIRECT",
    "--max-connections=64",
    "--performance-schema=OFF",
    # Durability relaxed to one redo fsync a second: with =1 every commit waits for an
    # fsync of the virtio disk and the whole benchmark is fsync-bound (~2.5 k TPS here),
    # which hides the purge and flushing effects it exists to measure.
    "--innodb-flush-log-at-trx-commit=2",
]

THRESHOLD_LAG = 100000  # innodb_max_purge_lag for the "threshold" arm
THRESHOLD_DELAY_US = 10000  # innodb_max_purge_lag_delay = 10 ms

BLKIO_ROOT = "/sys/fs/cgroup/blkio"
BLKIO_GROUP = "innopilot-bench"

ARMS = ["defaults", "purge1", "threshold", "watermark", "innopilot", "dryrun"]
STATIC_ARMS = ["defaults", "purge1", "threshold"]
INNOPILOT_ARMS = ["watermark", "innopilot", "dryrun"]

ARM_DOC = {
    "defaults": "MariaDB defaults (innodb_purge_threads=4, no purge lag)",
    "purge1": "static innodb_purge_threads=1",
    "threshold": f"innodb_max_purge_lag={THRESHOLD_LAG}, innodb_max_purge_lag_delay={THRESHOLD_DELAY_US} us",
    "watermark": "innopilot run, only [policy.watermark] enabled, as MariaDB 10.6.5 published it (20/80, no hysteresis, no DML delay)",
    "innopilot": "innopilot run, all default policies",
    "dryrun": "innopilot run --dry-run, all default policies",
}


def scenarios(quick):
    """Scenario definitions. Times are seconds from the start of sysbench."""
    if quick:
        return {
            "a_view_surge": dict(
                doc="read-view surge (quick)",
                bp="128M", redo="32M", tables=2, rows=20000, threads=4,
                test="oltp_update_non_index", duration=10, view=(3, 6), after=4,
            ),
        }
    return {
        "a_view_surge": dict(
            doc="read-view surge: oltp_update_non_index, a consistent-snapshot transaction held, then released",
            bp="256M", redo="64M", tables=4, rows=100000, threads=4,
            test="oltp_update_non_index", duration=40, view=(8, 20), after=20,
        ),
        "b_redo_pressure": dict(
            doc="redo pressure: oltp_write_only on a 32 MiB redo log, checkpoint age at its maximum",
            bp="256M", redo="32M", tables=4, rows=100000, threads=4,
            test="oltp_write_only", duration=25, view=None, after=20,
        ),
        "c_flush_bound": dict(
            doc="flush-bound: 4x150k rows (~140 MiB) in a 64 MiB buffer pool, O_DIRECT, writes throttled to 24 MiB/s (cgroup v1 blkio)",
            bp="64M", redo="64M", tables=4, rows=150000, threads=4,
            test="oltp_update_non_index", duration=35, view=None, after=20,
            throttle_write_bps=24 * 1024 * 1024,
        ),
        "d_open_loop": dict(
            doc="open loop at 70% of measured peak (sysbench --rate) with a read view; latency is the measure",
            bp="256M", redo="64M", tables=4, rows=100000, threads=8,
            test="oltp_update_non_index", duration=40, view=(8, 20), after=20,
            rate_frac=0.7,
        ),
    }


WARMUP_SKIP = 2  # first seconds of sysbench output left out of TPS/latency statistics

# ----------------------------------------------------------------------------------------
# Small helpers

CLK_TCK = os.sysconf("SC_CLK_TCK")
LOG = None


def log(msg):
    line = f"[{dt.datetime.utcnow().strftime('%H:%M:%S')}] {msg}"
    print(line, flush=True)
    if LOG:
        LOG.write(line + "\n")
        LOG.flush()


def which(name):
    for d in os.environ.get("PATH", "").split(":") + ["/usr/sbin", "/usr/bin", "/usr/local/sbin", "/usr/local/bin"]:
        p = os.path.join(d, name)
        if os.path.isfile(p) and os.access(p, os.X_OK):
            return p
    sys.exit(f"`{name}` not found: run scripts/setup.sh (installs mariadb-server and sysbench)")


def free_port():
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            p = s.getsockname()[1]
        if p != 3306:
            return p


def median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def pct(xs, q):
    xs = sorted(x for x in xs if x is not None)
    if not xs:
        return None
    k = (len(xs) - 1) * q / 100.0
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


# ----------------------------------------------------------------------------------------
# The private server

class Server:
    def __init__(self, base, name, sc, arm_args, throttle=False):
        self.dir = os.path.join(base, name)
        self.datadir = os.path.join(self.dir, "data")
        self.tmpdir = os.path.join(self.dir, "tmp")
        self.sock = os.path.join(self.dir, "mysqld.sock")
        self.errlog = os.path.join(self.dir, "error.log")
        self.port = free_port()
        self.sc = sc
        self.arm_args = arm_args
        self.throttle = throttle
        self.proc = None

    def args(self):
        a = [which("mariadbd"), "--no-defaults"]
        if os.geteuid() == 0:
            a.append("--user=root")
        a += [
            f"--datadir={self.datadir}", f"--socket={self.sock}", f"--port={self.port}",
            "--bind-address=127.0.0.1", f"--pid-file={self.dir}/mysqld.pid",
            f"--log-error={self.errlog}", f"--tmpdir={self.tmpdir}",
            f"--innodb-buffer-pool-size={self.sc['bp']}", f"--innodb-log-file-size={self.sc['redo']}",
        ] + COMMON_SERVER_ARGS + self.arm_args
        return a

    def start(self):
        os.makedirs(self.tmpdir, exist_ok=True)
        args = self.args()
        if self.throttle:
            # Enter the blkio group before exec, so every I/O of mariadbd is throttled.
            procs = os.path.join(BLKIO_ROOT, BLKIO_GROUP, "cgroup.procs")
            args = ["sh", "-c", f'echo $$ > {procs} && exec "$@"', "sh"] + args
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL, start_new_session=True)
        deadline = time.time() + 60
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"mariadbd exited: {self.tail()}")
            if os.path.exists(self.sock) and self.sql("SELECT 1", check=False) is not None:
                return
            time.sleep(0.2)
        raise RuntimeError(f"mariadbd did not come up: {self.tail()}")

    def tail(self):
        try:
            with open(self.errlog) as f:
                return "".join(f.readlines()[-20:])
        except OSError:
            return "(no error log)"

    def sql(self, q, check=True, db=None, timeout=60):
        cmd = [which("mariadb"), "--no-defaults", "-uroot", f"--socket={self.sock}", "-N", "-B", "-e", q]
        if db:
            cmd.append(db)
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            if check:
                raise
            return None
        if r.returncode != 0:
            if check:
                raise RuntimeError(f"query failed: {q}: {r.stderr.strip()}")
            return None
        return r.stdout

    def stop(self, clean=False):
        if not self.proc:
            return
        if clean:
            self.sql("SET GLOBAL innodb_fast_shutdown=0", check=False)
            self.sql("SHUTDOWN", check=False, timeout=600)
            try:
                self.proc.wait(timeout=600)
            except subprocess.TimeoutExpired:
                pass
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)  # the copy is thrown away anyway
            self.proc.wait()
        self.proc = None


def install_template(base, sc_name, sc):
    """mariadb-install-db + sysbench prepare + slow shutdown: the datadir every arm copies."""
    srv = Server(base, f"template-{sc_name}", sc, [])
    os.makedirs(srv.tmpdir, exist_ok=True)
    cmd = [which("mariadb-install-db"), "--no-defaults", "--force", "--auth-root-authentication-method=normal",
           f"--datadir={srv.datadir}", f"--innodb-log-file-size={sc['redo']}", f"--tmpdir={srv.tmpdir}"]
    if os.geteuid() == 0:
        cmd.append("--user=root")
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode:
        raise RuntimeError(f"mariadb-install-db failed: {r.stderr[-2000:]}")
    srv.start()
    try:
        srv.sql("CREATE DATABASE sbtest")
        r = subprocess.run(sysbench_cmd(srv, sc, "prepare", threads=min(sc["tables"], 2)),
                           capture_output=True, text=True)
        if r.returncode:
            raise RuntimeError(f"sysbench prepare failed: {r.stdout[-1000:]} {r.stderr[-1000:]}")
    finally:
        srv.stop(clean=True)
    return srv.datadir


def sysbench_cmd(srv, sc, action, threads=None, duration=None, rate=None):
    c = [which("sysbench"), sc["test"], "--db-driver=mysql", f"--mysql-socket={srv.sock}",
         "--mysql-user=root", "--mysql-db=sbtest", f"--tables={sc['tables']}",
         f"--table-size={sc['rows']}", f"--threads={threads or sc['threads']}"]
    if action == "run":
        c += [f"--time={duration}", "--report-interval=1", "--percentile=99", "--db-ps-mode=auto"]
        c += sc.get("extra_sb", [])
        if rate:
            c.append(f"--rate={rate}")
    return c + [action]


SB_LINE = re.compile(r"\[\s*(\d+)s\s*\].*?tps:\s*([\d.]+).*?lat \(ms,99%\):\s*([\d.]+)(?:.*?queue length:\s*(\d+))?")


def parse_sysbench(text):
    rows = []
    for line in text.splitlines():
        m = SB_LINE.search(line)
        if m:
            rows.append(dict(t=int(m.group(1)), tps=float(m.group(2)), p99=float(m.group(3)),
                             queue=int(m.group(4)) if m.group(4) else 0))
    return rows


# ----------------------------------------------------------------------------------------
# blkio throttle (scenario c)

def blkio_setup(write_bps):
    g = os.path.join(BLKIO_ROOT, BLKIO_GROUP)
    if not os.path.isdir(BLKIO_ROOT):
        raise RuntimeError(f"{BLKIO_ROOT} missing: cgroup v1 blkio not available")
    os.makedirs(g, exist_ok=True)
    dev = blkio_device()
    with open(os.path.join(g, "blkio.throttle.write_bps_device"), "w") as f:
        f.write(f"{dev} {write_bps}\n")
    atexit.register(blkio_remove)
    return dev


def blkio_device():
    """major:minor of the whole disk holding the bench directory (vda here: 254:0)."""
    st = os.stat(BASE_DIR)
    major, minor = os.major(st.st_dev), os.minor(st.st_dev)
    # a partition's parent disk: /sys/dev/block/M:m/../dev
    p = f"/sys/dev/block/{major}:{minor}"
    if os.path.exists(os.path.join(p, "partition")):
        with open(os.path.join(p, "..", "dev")) as f:
            return f.read().strip()
    return f"{major}:{minor}"


def blkio_remove():
    g = os.path.join(BLKIO_ROOT, BLKIO_GROUP)
    if os.path.isdir(g):
        for _ in range(50):
            try:
                os.rmdir(g)
                return
            except OSError:
                time.sleep(0.2)


# ----------------------------------------------------------------------------------------
# innopilot

def innopilot_config(path, arm, audit, state, http_port):
    lines = [
        "[control]", f'state_file = "{state}"', "",
        "[audit]", f'path = "{audit}"', "",
        "[http]", "enabled = true", f'listen = "127.0.0.1:{http_port}"', "",
    ]
    if arm == "watermark":
        # MariaDB 10.6.5's adaptive purge as published, the same settings as the
        # simulator's mariadb1065_adaptive peer (src/sim/peers.rs, watermark_only_config):
        # 20/80 %, N = the purge threads found at start, no hysteresis, a change allowed
        # every tick (10.6.5 decided before each purge batch), and no DML delay in high
        # mode (10.6.5 paused purge between batches instead; no variable does that).
        lines.insert(1, "max_sets_per_minute = 600")  # into [control]
        lines += ["[knobs.innodb_purge_threads]", "max_step = 32", 'min_dwell = "0s"', "",
                  "[knobs.innodb_max_purge_lag_delay]", 'min_dwell = "0s"', "",
                  "[knobs.innodb_max_purge_lag]", 'min_dwell = "0s"', "",
                  "[knobs.innodb_purge_batch_size]", 'min_dwell = "0s"', "max_step = 5000", "",
                  "[policy.watermark]", "low_pct = 20.0", "high_pct = 80.0", "max_purge_threads = 0",
                  "hysteresis_pct = 0.0", "high_delay_us = 0", "yield_history_records = 0", "",
                  "[policy.purge_rate]", "enabled = false", "",
                  "[policy.flush]", "enabled = false", "",
                  "[policy.undo]", "enabled = false", ""]
    with open(path, "w") as f:
        f.write("\n".join(lines))


def proc_cpu_ticks(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            parts = f.read().rsplit(")", 1)[1].split()
        return int(parts[11]) + int(parts[12])  # utime + stime
    except (OSError, IndexError):
        return None


def proc_status(pid, key):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])  # kB
    except OSError:
        pass
    return None


# ----------------------------------------------------------------------------------------
# One run

STATUS_VARS = ["Innodb_history_list_length", "Innodb_checkpoint_age", "Innodb_checkpoint_max_age",
               "Innodb_buffer_pool_pages_dirty", "Innodb_buffer_pool_pages_total", "Innodb_lsn_current",
               "Innodb_buffer_pool_pages_flushed", "Innodb_rows_updated", "Innodb_buffer_pool_wait_free"]
KNOB_SQL = ("SELECT @@innodb_purge_threads, @@innodb_max_purge_lag, @@innodb_max_purge_lag_delay, "
            "@@innodb_io_capacity, @@innodb_io_capacity_max")


def sample_once(srv):
    q = ("SHOW GLOBAL STATUS WHERE Variable_name IN (" + ",".join(f"'{v}'" for v in STATUS_VARS) + "); "
         + KNOB_SQL)
    out = srv.sql(q, check=False, timeout=5)
    if out is None:
        return None
    d = {}
    lines = out.strip().splitlines()
    for line in lines[:-1]:
        k, _, v = line.partition("\t")
        try:
            d[k] = int(v)
        except ValueError:
            pass
    knobs = lines[-1].split("\t") if lines else []
    if len(knobs) == 5:
        for k, v in zip(["purge_threads", "max_purge_lag", "purge_lag_delay", "io_capacity", "io_capacity_max"], knobs):
            d[k] = int(v)
    return d


def arm_server_args(arm):
    if arm == "purge1":
        return ["--innodb-purge-threads=1"]
    if arm == "threshold":
        return [f"--innodb-max-purge-lag={THRESHOLD_LAG}", f"--innodb-max-purge-lag-delay={THRESHOLD_DELAY_US}"]
    return []


def run_one(base, outdir, sc_name, sc, arm, rep, template, innopilot_bin, rate=None, duration=None):
    name = f"{sc_name}-{arm}-r{rep}"
    duration = duration or sc["duration"]
    srv = Server(base, name, sc, arm_server_args(arm), throttle=bool(sc.get("throttle_write_bps")))
    os.makedirs(srv.dir, exist_ok=True)
    subprocess.run(["cp", "-a", template, srv.datadir], check=True)
    ip = None
    view_proc = None
    try:
        srv.start()
        # warm the buffer pool identically for every arm (primary keys of every table)
        for i in range(1, sc["tables"] + 1):
            srv.sql(f"SELECT SUM(k) FROM sbtest{i}", db="sbtest", check=False, timeout=120)
        audit = os.path.join(srv.dir, "audit.jsonl")
        http_port = None
        if arm in INNOPILOT_ARMS:
            cfg = os.path.join(srv.dir, "innopilot.toml")
            http_port = free_port()
            innopilot_config(cfg, arm, audit, os.path.join(srv.dir, "state.json"), http_port)
            cmd = [innopilot_bin, "run", "--config", cfg, "--dsn", f"mysql://root@localhost/?socket={srv.sock}",
                   "--audit", audit, "--state-file", os.path.join(srv.dir, "state.json")]
            if arm == "dryrun":
                cmd.append("--dry-run")
            ip = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                  stderr=open(os.path.join(srv.dir, "innopilot.stderr"), "w"))
            time.sleep(2.0)  # a sidecar is already running when the load arrives
            if ip.poll() is not None:
                raise RuntimeError(f"innopilot exited {ip.returncode}: "
                                   + open(os.path.join(srv.dir, 'innopilot.stderr')).read()[-2000:])
        samples = []
        sb_out = []
        t0 = time.time()
        sb = subprocess.Popen(sysbench_cmd(srv, sc, "run", duration=duration, rate=rate),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        reader = threading.Thread(target=lambda: sb_out.extend(sb.stdout), daemon=True)
        reader.start()
        ip_ticks0 = proc_cpu_ticks(ip.pid) if ip else None
        view = sc.get("view")
        view_open = view_closed = None
        tick = 0
        while sb.poll() is None:
            tick += 1
            target = t0 + tick
            now = time.time()
            if target > now:
                time.sleep(target - now)
            el = time.time() - t0
            if view and view_proc is None and el >= view[0]:
                view_proc = subprocess.Popen(
                    [which("mariadb"), "--no-defaults", "-uroot", f"--socket={srv.sock}", "sbtest"],
                    stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True)
                view_proc.stdin.write("START TRANSACTION WITH CONSISTENT SNAPSHOT;\nSELECT COUNT(*) FROM sbtest1;\n")
                view_proc.stdin.flush()
                view_open = el
            if view and view_proc is not None and view_closed is None and el >= view[1]:
                view_proc.stdin.write("COMMIT;\n")
                view_proc.stdin.close()
                view_proc.wait(timeout=30)
                view_closed = el
            s = sample_once(srv) or {}
            s["t"] = round(time.time() - t0, 2)
            if ip:
                s["ip_ticks"] = proc_cpu_ticks(ip.pid)
                s["ip_rss_kb"] = proc_status(ip.pid, "VmRSS")
            samples.append(s)
        reader.join(timeout=10)
        wall = time.time() - t0
        res = dict(scenario=sc_name, arm=arm, rep=rep, duration=duration, rate=rate,
                   view_open=view_open, view_closed=view_closed, wall=wall)
        if ip:
            t1 = proc_cpu_ticks(ip.pid)
            res["ip_cpu_pct"] = (t1 - ip_ticks0) / CLK_TCK / wall * 100 if t1 is not None and ip_ticks0 is not None else None
            res["ip_rss_mib"] = (proc_status(ip.pid, "VmHWM") or 0) / 1024
            try:
                m = urllib.request.urlopen(f"http://127.0.0.1:{http_port}/metrics", timeout=3).read().decode()
                rt = [float(l.split()[-1]) for l in m.splitlines() if l.startswith("innopilot_sample_round_trips")]
                res["ip_round_trips"] = max(rt) if rt else None
            except Exception:
                res["ip_round_trips"] = None
            ip.send_signal(signal.SIGTERM)
            try:
                ip.wait(timeout=30)
            except subprocess.TimeoutExpired:
                ip.kill()
            res["ip_exit"] = ip.returncode
            ip = None
            sets = 0
            decisions = 0
            try:
                with open(audit) as f:
                    for line in f:
                        try:
                            r = json.loads(line)
                        except ValueError:
                            continue
                        if r.get("event") == "decision":
                            decisions += 1
                            if r.get("applied"):
                                sets += 1
            except OSError:
                pass
            res["ip_sets"] = sets
            res["ip_decisions"] = decisions
            shutil.copy(audit, os.path.join(outdir, f"{name}.audit.jsonl")) if os.path.exists(audit) else None
        sb_rows = parse_sysbench("".join(sb_out))
        if not sb_rows:
            raise RuntimeError("no sysbench output:\n" + "".join(sb_out)[-2000:])
        write_csv(os.path.join(outdir, f"{name}.csv"), sb_rows, samples)
        res.update(metrics(sc, sb_rows, samples, view_closed))
        return res, sb_rows, samples
    finally:
        if ip and ip.poll() is None:
            ip.kill()
        if view_proc and view_proc.poll() is None:
            view_proc.kill()
        srv.stop()
        shutil.rmtree(srv.dir, ignore_errors=True)


def write_csv(path, sb_rows, samples):
    cols = ["t", "tps", "p99_ms", "queue", "history", "redo_fill_pct", "dirty_pct", "purge_threads",
            "max_purge_lag", "purge_lag_delay_us", "io_capacity", "io_capacity_max", "pages_flushed",
            "innopilot_cpu_ticks", "innopilot_rss_kb", "free_page_waits"]
    by_t = {r["t"]: r for r in sb_rows}
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(cols)
        for i, s in enumerate(samples):
            t = i + 1
            r = by_t.get(t, {})
            w.writerow([t, r.get("tps"), r.get("p99"), r.get("queue"), s.get("Innodb_history_list_length"),
                        fill(s), dirty(s), s.get("purge_threads"), s.get("max_purge_lag"),
                        s.get("purge_lag_delay"), s.get("io_capacity"), s.get("io_capacity_max"),
                        s.get("Innodb_buffer_pool_pages_flushed"), s.get("ip_ticks"), s.get("ip_rss_kb"),
                        s.get("Innodb_buffer_pool_wait_free")])


def fill(s):
    a, m = s.get("Innodb_checkpoint_age"), s.get("Innodb_checkpoint_max_age")
    return round(100.0 * a / m, 2) if a is not None and m else None


def dirty(s):
    a, m = s.get("Innodb_buffer_pool_pages_dirty"), s.get("Innodb_buffer_pool_pages_total")
    return round(100.0 * a / m, 2) if a is not None and m else None


def metrics(sc, sb_rows, samples, view_closed):
    rows = [r for r in sb_rows if r["t"] > WARMUP_SKIP]
    tps = [r["tps"] for r in rows]
    med = statistics.median(tps)
    m = dict(mean_tps=statistics.mean(tps), median_tps=med,
             worst_ratio=min(tps) / med if med else None,
             p99_of_p99=pct([r["p99"] for r in rows], 99))
    if view_closed is not None:
        after = [r["tps"] for r in rows if view_closed < r["t"] <= view_closed + sc["after"]]
        m["after_view_ratio"] = statistics.mean(after) / med if after and med else None
    hist = [(i + 1, s.get("Innodb_history_list_length")) for i, s in enumerate(samples)
            if s.get("Innodb_history_list_length") is not None]
    if hist:
        peak = max(h for _, h in hist)
        m["peak_history"] = peak
        if view_closed is not None:
            vc = round(view_closed)  # sample index at which the view was released
            drained = [t for t, h in hist if t > vc and h <= 0.1 * peak]
            m["drain_s"] = (drained[0] - vc) if drained else None
            # not drained by the end of the run: at least this long
            m["drain_censored_s"] = None if drained else (hist[-1][0] - vc)
    fills = [fill(s) for s in samples if fill(s) is not None]
    if fills:
        m["max_fill_pct"] = max(fills)
        m["secs_at_max_age"] = sum(1 for x in fills if x >= 95.0)
    # Users waiting for a free buffer-pool page (LRU flushing behind), per second of run.
    waits = [s.get("Innodb_buffer_pool_wait_free") for s in samples
             if s.get("Innodb_buffer_pool_wait_free") is not None]
    if len(waits) >= 2:
        m["free_waits_per_s"] = (waits[-1] - waits[0]) / (len(waits) - 1)
    return m


# ----------------------------------------------------------------------------------------
# Summaries, targets, plots

EXTRA_KEYS = ["drain_censored_s", "median_tps"]

METRIC_COLS = [
    ("mean_tps", "mean TPS", "{:.0f}"),
    ("worst_ratio", "worst 1s/median", "{:.2f}"),
    ("after_view_ratio", "after-view/median", "{:.2f}"),
    ("p99_of_p99", "p99 of p99 ms", "{:.2f}"),
    ("peak_history", "peak history", "{:.0f}"),
    ("drain_s", "drain to 10% s", "{:.0f}"),
    ("max_fill_pct", "max redo fill %", "{:.0f}"),
    ("secs_at_max_age", "s at max age", "{:.0f}"),
    ("free_waits_per_s", "free-page waits/s", "{:.0f}"),
    ("ip_cpu_pct", "innopilot CPU %", "{:.2f}"),
    ("ip_rss_mib", "RSS MiB", "{:.1f}"),
    ("ip_sets", "SETs", "{:.0f}"),
    ("ip_round_trips", "round trips", "{:.0f}"),
]


def summarize(results):
    """scenario -> arm -> metric -> {median, min, max, values}"""
    out = {}
    for r in results:
        a = out.setdefault(r["scenario"], {}).setdefault(r["arm"], {})
        for k in [c[0] for c in METRIC_COLS] + EXTRA_KEYS:
            a.setdefault(k, []).append(r.get(k))
    summ = {}
    for sc, arms in out.items():
        for arm, ms in arms.items():
            for k, vals in ms.items():
                v = [x for x in vals if x is not None]
                summ.setdefault(sc, {}).setdefault(arm, {})[k] = dict(
                    median=statistics.median(v) if v else None, min=min(v) if v else None,
                    max=max(v) if v else None, values=vals)
    return summ


def fmt_cell(c, f):
    if c is None or c["median"] is None:
        vals = c["values"] if c else []
        return "n/a" if not vals or all(v is None for v in vals) else "—"
    s = f.format(c["median"])
    if c["min"] != c["max"] and len(c["values"]) > 1:
        s += f" ({f.format(c['min'])}–{f.format(c['max'])})"
    if c["values"] and any(v is None for v in c["values"]):
        s += f" [{sum(v is None for v in c['values'])} n/r]"
    return s


def table_md(summ, sc):
    arms = [a for a in ARMS if a in summ[sc]]
    cols = [(k, h, f) for k, h, f in METRIC_COLS if any(summ[sc][a][k]["values"] and any(v is not None for v in summ[sc][a][k]["values"]) for a in arms)]
    lines = ["| arm | " + " | ".join(h for _, h, _ in cols) + " |",
             "|---|" + "---|" * len(cols)]
    for a in arms:
        cells = []
        for k, _, f in cols:
            c = fmt_cell(summ[sc][a][k], f)
            cens = [v for v in summ[sc][a].get("drain_censored_s", {}).get("values", []) if v is not None]
            if k == "drain_s" and cens:
                c = (c if summ[sc][a][k]["median"] is not None else "") + f" (>{min(cens)} in {len(cens)} rep(s))"
            cells.append(c.strip())
        lines.append(f"| {a} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def check_targets(summ, sc_name, sc):
    """The issue's targets for the innopilot arm; returns a list of (target, value, ok)."""
    s = summ[sc_name]
    if "innopilot" not in s:
        return []
    ip = s["innopilot"]
    med = lambda arm, k: s.get(arm, {}).get(k, {}).get("median")
    out = []

    def add(name, val, ok):
        out.append(dict(target=name, value=val, met=ok))

    v = med("innopilot", "worst_ratio")
    add("worst 1 s TPS >= 0.85 x median", v, v is not None and v >= 0.85)
    if sc.get("view"):
        v = med("innopilot", "after_view_ratio")
        add("after-view mean >= 0.97 x median", v, v is not None and v >= 0.97)
    v, d = med("innopilot", "p99_of_p99"), med("defaults", "p99_of_p99")
    add("p99 <= 0.8 x defaults", None if v is None or not d else v / d, v is not None and d and v <= 0.8 * d)
    best = max((med(a, "mean_tps") or 0) for a in STATIC_ARMS)
    v = med("innopilot", "mean_tps")
    if sc.get("rate"):
        # open loop: every arm serves the offered rate, TPS differs by noise only
        add("mean TPS >= 0.99 x best static arm (open loop)", None if v is None or not best else v / best,
            v is not None and v >= best * 0.99)
    else:
        add("mean TPS >= best static arm", None if v is None or not best else v / best,
            v is not None and v >= best * 0.999)
    if sc.get("view"):
        v, d = med("innopilot", "drain_s"), med("defaults", "drain_s")
        add("drain <= 1.5 x defaults", None if v is None or not d else v / d, v is not None and d is not None and v <= 1.5 * max(d, 1))
    v = med("innopilot", "ip_cpu_pct")
    add("innopilot CPU <= 1 % of a core", v, v is not None and v <= 1.0)
    v = med("innopilot", "ip_rss_mib")
    add("innopilot RSS <= 30 MiB", v, v is not None and v <= 30)
    v = s["innopilot"]["ip_round_trips"]["max"]
    add("<= 3 round trips per sample", v, v is not None and v <= 3)
    return out


def svg_plot(path, title, series_sets, view):
    """Four stacked panels (TPS, p99 ms, history, redo fill %), one line per repetition."""
    W, PH, L, R, T = 760, 150, 70, 20, 30
    panels = [("tps", "TPS"), ("p99_ms", "p99 latency, ms"), ("history", "history length"),
              ("redo_fill_pct", "redo fill, % of max checkpoint age")]
    colors = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e"]
    H = T + len(panels) * (PH + 30) + 10
    tmax = max((len(rows) for rows in series_sets), default=1) or 1
    o = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="11">',
         f'<rect width="{W}" height="{H}" fill="white"/>',
         f'<text x="{W/2}" y="18" text-anchor="middle" font-size="14">{title}</text>']
    for pi, (key, label) in enumerate(panels):
        y0 = T + pi * (PH + 30)
        vals = [r.get(key) for rows in series_sets for r in rows if r.get(key) not in (None, "")]
        vmax = max([float(v) for v in vals] + [1e-9]) * 1.05
        o.append(f'<rect x="{L}" y="{y0}" width="{W-L-R}" height="{PH}" fill="none" stroke="#999"/>')
        o.append(f'<text x="{L+4}" y="{y0+12}">{label}</text>')
        o.append(f'<text x="{L-4}" y="{y0+8}" text-anchor="end">{vmax:.4g}</text>')
        o.append(f'<text x="{L-4}" y="{y0+PH}" text-anchor="end">0</text>')
        if view:
            for vx in view:
                if vx is not None:
                    x = L + (W - L - R) * vx / tmax
                    o.append(f'<line x1="{x:.1f}" y1="{y0}" x2="{x:.1f}" y2="{y0+PH}" stroke="#aaa" stroke-dasharray="4,3"/>')
        for si, rows in enumerate(series_sets):
            pts = []
            for r in rows:
                v = r.get(key)
                if v in (None, ""):
                    continue
                x = L + (W - L - R) * (int(r["t"]) / tmax)
                y = y0 + PH - PH * float(v) / vmax
                pts.append(f"{x:.1f},{y:.1f}")
            if pts:
                o.append(f'<polyline fill="none" stroke="{colors[si % len(colors)]}" stroke-width="1.2" points="{" ".join(pts)}"/>')
        o.append(f'<text x="{W-R}" y="{y0+PH+14}" text-anchor="end">seconds ({tmax})</text>')
    o.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(o))


def read_csv(path):
    with open(path) as f:
        return list(csv.DictReader(f))


# ----------------------------------------------------------------------------------------

BASE_DIR = None


def main():
    global LOG, BASE_DIR
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="one short scenario, one repetition (CI)")
    ap.add_argument("--reps", type=int, default=None, help="repetitions (default 3, quick 1)")
    ap.add_argument("--scenarios", default=None, help="comma-separated subset")
    ap.add_argument("--order", default=None, help="order in which scenarios run (default: as defined)")
    ap.add_argument("--arms", default=None, help="comma-separated subset")
    ap.add_argument("--innopilot", required=True, help="path to the innopilot binary")
    ap.add_argument("--out", required=True, help="results directory")
    ap.add_argument("--workdir", default=None, help="scratch directory (default: a temp dir under /var/tmp)")
    a = ap.parse_args()
    reps = a.reps or (1 if a.quick else 3)
    scs = scenarios(a.quick)
    if a.scenarios:
        scs = {k: v for k, v in scs.items() if k in a.scenarios.split(",")}
    arms = a.arms.split(",") if a.arms else ARMS
    os.makedirs(a.out, exist_ok=True)
    LOG = open(os.path.join(a.out, "bench.log"), "a")
    BASE_DIR = a.workdir or tempfile.mkdtemp(prefix="innopilot-bench-", dir="/var/tmp")
    os.makedirs(BASE_DIR, exist_ok=True)
    atexit.register(lambda: shutil.rmtree(BASE_DIR, ignore_errors=True))
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    log(f"innopilot bench: {'quick' if a.quick else 'full'}, reps={reps}, scenarios={list(scs)}, arms={arms}, work={BASE_DIR}")

    results = []
    meta = dict(date=dt.datetime.utcnow().isoformat(timespec="seconds") + "Z", quick=a.quick, reps=reps,
                arms={k: ARM_DOC[k] for k in arms}, scenarios={}, machine=machine_info(),
                server_args=COMMON_SERVER_ARGS, warmup_skip_s=WARMUP_SKIP,
                command=" ".join(sys.argv))
    order = [x for x in (a.order.split(",") if a.order else scs) if x in scs]
    for sc_name in order:
        sc = scs[sc_name]
        try:
            run_scenario(a, reps, arms, sc_name, sc, results, meta)
        except Exception as e:  # one broken scenario must not lose the others
            log(f"!! scenario {sc_name} failed: {e!r}")
            meta.setdefault("failed", {})[sc_name] = repr(e)
            blkio_remove()
        write_outputs(a, results, meta)
    missed = write_outputs(a, results, meta, show=True)
    log(f"done: {len(results)} runs, {missed} target(s) missed; results in {a.out}")
    if not a.quick:
        # The simulator on the same kinds of scenario, side by side (side_by_side.md).
        sbs = os.path.join(os.path.dirname(os.path.abspath(__file__)), "side_by_side.py")
        r = subprocess.run([sys.executable, sbs, "--innopilot", a.innopilot, "--results", a.out],
                           capture_output=True, text=True)
        if r.returncode != 0:
            log(f"!! side_by_side.py failed: {r.stderr.strip()}")
            meta.setdefault("failed", {})["side_by_side"] = r.stderr.strip()
        else:
            log(f"simulator side by side: {os.path.join(a.out, 'side_by_side.md')}")
    if meta.get("failed"):
        log(f"!! failed: {sorted(meta['failed'])}")
        sys.exit(1)  # a broken harness fails CI; missed targets do not


def run_scenario(a, reps, arms, sc_name, sc, results, meta):
    if True:
        t_sc = time.time()
        log(f"== {sc_name}: {sc['doc']}")
        if sc.get("throttle_write_bps"):
            dev = blkio_setup(sc["throttle_write_bps"])
            log(f"blkio group {BLKIO_ROOT}/{BLKIO_GROUP}: write_bps_device '{dev} {sc['throttle_write_bps']}'")
            sc = dict(sc, blkio_device=dev)
        template = install_template(BASE_DIR, sc_name, sc)
        log(f"template ready ({du(template)} MiB) in {time.time()-t_sc:.0f}s")
        rate = None
        if sc.get("rate_frac"):
            res, sb_rows, _ = run_one(BASE_DIR, a.out, sc_name, dict(sc, view=None), "defaults", 0, template,
                                      a.innopilot, duration=12 if not a.quick else 6)
            peak = statistics.mean(r["tps"] for r in sb_rows if r["t"] > WARMUP_SKIP)
            rate = max(1, int(peak * sc["rate_frac"]))
            sc = dict(sc, peak_tps=peak, rate=rate)
            log(f"peak {peak:.0f} TPS (closed loop, defaults) -> --rate={rate}")
        meta["scenarios"][sc_name] = {k: v for k, v in sc.items()}
        for rep in range(1, reps + 1):
            for arm in arms:
                t = time.time()
                try:
                    res, _, _ = run_one(BASE_DIR, a.out, sc_name, sc, arm, rep, template, a.innopilot, rate=rate)
                except Exception as e:
                    log(f"!! {sc_name} {arm} r{rep} failed: {e!r}")
                    meta.setdefault("failed", {})[f"{sc_name}-{arm}-r{rep}"] = repr(e)
                    continue
                results.append(res)
                log(f"{sc_name} {arm} r{rep}: mean {res['mean_tps']:.0f} TPS, worst/med {res['worst_ratio']:.2f}, "
                    f"p99 {res['p99_of_p99']:.2f} ms, peak hist {res.get('peak_history')}, drain {res.get('drain_s')}, "
                    f"fill max {res.get('max_fill_pct')}, sets {res.get('ip_sets')} ({time.time()-t:.0f}s)")
        shutil.rmtree(os.path.dirname(template), ignore_errors=True)
        if sc.get("throttle_write_bps"):
            blkio_remove()
        # plots: one per scenario and arm, every repetition overlaid
        for arm in arms:
            sets = []
            view = None
            for rep in range(1, reps + 1):
                p = os.path.join(a.out, f"{sc_name}-{arm}-r{rep}.csv")
                if os.path.exists(p):
                    sets.append(read_csv(p))
            rr = [r for r in results if r["scenario"] == sc_name and r["arm"] == arm]
            if rr:
                view = (rr[0].get("view_open"), rr[0].get("view_closed"))
            svg_plot(os.path.join(a.out, f"{sc_name}-{arm}.svg"), f"{sc_name} — {arm} ({len(sets)} reps)", sets, view)



def write_outputs(a, results, meta, show=False):
    summ = summarize(results)
    targets = {sc: check_targets(summ, sc, meta["scenarios"][sc]) for sc in summ}
    with open(os.path.join(a.out, "summary.json"), "w") as f:
        json.dump(dict(meta=meta, runs=results, summary=summ, targets=targets), f, indent=1, default=str)
    with open(os.path.join(a.out, "runs.csv"), "w", newline="") as f:
        keys = sorted({k for r in results for k in r})
        w = csv.DictWriter(f, fieldnames=keys)
        w.writeheader()
        w.writerows(results)
    report = []
    for sc in summ:
        report.append(f"\n### {sc}\n\n{meta['scenarios'][sc]['doc']}\n")
        report.append(table_md(summ, sc))
        if targets[sc]:
            report.append("\nTargets for the innopilot arm:\n")
            for t in targets[sc]:
                v = t["value"]
                vs = "n/a" if v is None else (f"{v:.3f}" if isinstance(v, float) else str(v))
                report.append(f"- {'MET   ' if t['met'] else 'MISSED'} {t['target']}: {vs}")
    text = "\n".join(report)
    with open(os.path.join(a.out, "table.md"), "w") as f:
        f.write(text + "\n")
    if show:
        print(text)
    return sum(1 for ts in targets.values() for t in ts if not t["met"])


def du(p):
    total = 0
    for root, _, files in os.walk(p):
        for fn in files:
            try:
                total += os.path.getsize(os.path.join(root, fn))
            except OSError:
                pass
    return total // (1 << 20)


def machine_info():
    info = {}
    try:
        info["cpus"] = os.cpu_count()
        with open("/proc/cpuinfo") as f:
            m = re.search(r"model name\s*:\s*(.*)", f.read())
            info["cpu"] = m.group(1) if m else None
        with open("/proc/meminfo") as f:
            info["mem_kb"] = int(f.readline().split()[1])
        info["kernel"] = os.uname().release
        info["mariadbd"] = subprocess.run([which("mariadbd"), "--version"], capture_output=True, text=True).stdout.strip()
        info["sysbench"] = subprocess.run([which("sysbench"), "--version"], capture_output=True, text=True).stdout.strip()
        info["rustc_running_at_start"] = int(subprocess.run("ps aux | grep -c '[r]ustc'", shell=True,
                                                            capture_output=True, text=True).stdout.strip() or 0)
    except Exception as e:  # informational only
        info["error"] = str(e)
    return info


if __name__ == "__main__":
    main()
