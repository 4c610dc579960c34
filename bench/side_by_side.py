#!/usr/bin/env python3
"""The real benchmark next to the simulator, for the same kind of scenario.

    python3 bench/side_by_side.py --innopilot target/release/innopilot --results bench/results/DATE

Runs `innopilot simulate --compare --json` (every peer on every built-in scenario, seed 1),
writes it to RESULTS/simulator.json, and writes RESULTS/side_by_side.md: for each real
scenario in RESULTS/summary.json, the simulator scenario closest to it, each arm next to
the peer it stands for, as ratios to the defaults arm (the two are different machines
and loads, so only ratios and rankings compare). An innopilot arm without a peer of its
own (a budget arm, an ablation) on the defaults' server is put beside the scenario's twin
run with that arm's own configuration (`simulate --scenario TWIN --policy innopilot
--config`, the file bench.py gives the arm), so the model is checked where the control
acts. A run that capped a scenario's reads at another rate (`bench.py --read-iops`) has
every arm of that scenario, peers too, run on its twin at that cap (`simulate --read-iops`);
a twin that models no read cap (f's) is left out, and the page says why.
bench.py calls it after a full run. Python 3 standard library only.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import bench

# Real scenario -> the simulator scenario closest to it.
SCENARIO = {
    "a_view_surge": "long_read_view",
    "b_redo_pressure": "redo_pressure",
    "c_flush_bound": "flush_bound",
    "d_open_loop": "long_read_view",
    # issue 13's scenarios: their twins, the same sizes and rates (src/sim/scenario.rs)
    "e_purge_behind": "purge_behind",
    "f_cold_view": "cold_view",
    "g_checkpoint_stall": "checkpoint_stall",
    "h_repeated_bursts": "repeated_bursts",
}

# Real arm -> simulator peer. The real threshold arm runs on MariaDB, whose delay applies
# only while purge handles pages; the simulator's threshold peer is MySQL's size-based
# formula (the peer seed 000 describes). dryrun observes only: its peer is the defaults.
PEER = {
    "defaults": "mariadb1011_defaults",
    "purge1": "one_purge_thread",
    "threshold": "mysql_threshold",
    "redo_static": "redo_static",
    "innopilot_redo": "innopilot_redo",
    "watermark": "mariadb1065_adaptive",
    "innopilot": "innopilot",
    "dryrun": "mariadb1011_defaults",
}


def ratio(x, base):
    if x is None or base in (None, 0):
        return None
    return x / base


def fmt(x, spec="{:.2f}"):
    return "–" if x is None else spec.format(x)


def median(summary, sc, arm, key):
    v = summary.get(sc, {}).get(arm, {}).get(key)
    return v.get("median") if isinstance(v, dict) else None


# The new scenarios run on MariaDB; so does their threshold arm.
PEER_BY_SCENARIO = {
    ("e_purge_behind", "threshold"): "mariadb_threshold",
    ("f_cold_view", "threshold"): "mariadb_threshold",
    ("g_checkpoint_stall", "threshold"): "mariadb_threshold",
}


def peer_for(sc, arm):
    return PEER_BY_SCENARIO.get((sc, arm), PEER.get(arm))


def own_config_arm(sc, arm, real_sc):
    """An innopilot arm with no peer whose server is the defaults' (its difference is
    innopilot's configuration alone): its twin runs that configuration."""
    return (peer_for(sc, arm) is None and arm in bench.INNOPILOT_ARMS and real_sc is not None
            and not bench.arm_server_args(arm, real_sc))


def read_cap_overrides(meta, summ):
    """{real scenario: the read cap the run gave it} for each scenario whose cap is not
    its own (`bench.py --read-iops`)."""
    real = bench.scenarios(False)
    out = {}
    for sc in summ:
        ran = ((meta.get("scenarios") or {}).get(sc) or {}).get("blkio") or {}
        own = (real.get(sc) or {}).get("blkio") or {}
        if ran.get("read_iops") is not None and ran["read_iops"] != own.get("read_iops"):
            out[sc] = ran["read_iops"]
    return out


def simulate_one(binary, ssc, policy, seed, read_iops=None, config=None):
    """One twin run's summary: `simulate --scenario SSC --policy POLICY`, on the run's
    read cap and with an arm's configuration where given; exits on a failure."""
    r = simulate_try(binary, ssc, policy, seed, read_iops, config)
    if isinstance(r, str):
        sys.exit(f"side_by_side: {r}")
    return r


def simulate_try(binary, ssc, policy, seed, read_iops=None, config=None):
    """As `simulate_one`, but a failure comes back as its message (a str)."""
    cmd = [binary, "simulate", "--scenario", ssc, "--policy", policy, "--json", "--seed", str(seed)]
    if read_iops is not None:
        cmd += ["--read-iops", str(read_iops)]
    if config is not None:
        cmd += ["--config", config]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        return f"{' '.join(cmd[1:])} failed ({r.returncode}): {r.stderr.strip()}"
    return json.loads(r.stdout)


def own_config_rows(binary, summ, seed, caps):
    """({(real scenario, arm): the twin's summary with the arm's configuration}, {real
    scenario: why it has no twin}). On a run that changed a scenario's read cap
    (`caps`) every arm of it, peers too, runs on that cap, since `--compare` runs the
    scenario's own; a twin that takes no read cap (f's: its device is modelled by
    latency) leaves that scenario without twins rather than beside the wrong device."""
    out, no_twin = {}, {}
    real = bench.scenarios(False)
    with tempfile.TemporaryDirectory() as tmp:
        for sc, arms in summ.items():
            ssc = SCENARIO.get(sc)
            if ssc is None:
                continue
            cap = caps.get(sc)
            if cap is not None:
                base = simulate_try(binary, ssc, PEER["defaults"], seed, cap)
                if isinstance(base, str):
                    no_twin[sc] = base
                    continue
                out[(sc, "defaults")] = base
            for arm in arms:
                if not own_config_arm(sc, arm, real.get(sc)):
                    if cap is not None and peer_for(sc, arm):
                        out[(sc, arm)] = simulate_one(binary, ssc, peer_for(sc, arm), seed, cap)
                    continue
                cfg = os.path.join(tmp, f"{sc}-{arm}.toml")
                # state and audit paths are the simulator's own; http is not started
                bench.innopilot_config(cfg, arm, os.path.join(tmp, "audit.jsonl"),
                                       os.path.join(tmp, "state.json"), 1, real.get(sc))
                out[(sc, arm)] = simulate_one(binary, ssc, "innopilot", seed, cap, cfg)
    return out, no_twin


def ranking(values):
    """Arms ordered best first by value (higher is better); arms without a value last."""
    known = [(a, v) for a, v in values.items() if v is not None]
    return [a for a, _ in sorted(known, key=lambda x: -x[1])]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--innopilot", required=True, help="path to the innopilot binary")
    ap.add_argument("--results", required=True, help="a results directory written by bench.py")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()

    with open(os.path.join(a.results, "summary.json")) as f:
        real = json.load(f)
    out = subprocess.run([a.innopilot, "simulate", "--compare", "--json", "--seed", str(a.seed)],
                         capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        sys.exit(f"side_by_side: innopilot simulate failed ({out.returncode}): {out.stderr.strip()}")
    sim = json.loads(out.stdout)
    with open(os.path.join(a.results, "simulator.json"), "w") as f:
        json.dump(sim, f, indent=1)
    rows = {(r["scenario"], r["peer"]): r for r in sim["rows"]}

    summ = real["summary"]
    caps = read_cap_overrides(real.get("meta") or {}, summ)
    own, no_twin = own_config_rows(a.innopilot, summ, a.seed, caps)
    real_scenarios = bench.scenarios(False)

    def sim_row(sc, arm):
        if (sc, arm) in own:
            return own[(sc, arm)]
        peer = peer_for(sc, arm)
        return rows.get((SCENARIO.get(sc), peer)) if peer else None

    def label(sc, arm):
        on = f", reads capped at {caps[sc]}/s" if sc in caps else ""
        if (sc, arm) in own and own_config_arm(sc, arm, real_scenarios.get(sc)):
            return f"{arm} → innopilot with the arm's config{on}"
        return f"{arm} → {peer_for(sc, arm) or '(no peer)'}{on}"
    lines = [
        f"Simulator: `{os.path.basename(a.innopilot)} simulate --compare --json --seed {a.seed}` "
        "(simulator.json). Ratios are to each side's defaults (arm `defaults`, peer "
        "`mariadb1011_defaults`); the real numbers are medians of the repetitions.",
    ]
    for sc in summ:
        ssc = SCENARIO.get(sc)
        if ssc is None:
            continue
        if sc in no_twin:
            lines.append(f"\n**{sc}**: reads capped at {caps[sc]}/s, which its twin `{ssc}` does not "
                         f"model, so no twin is put beside it ({no_twin[sc]})\n")
            continue
        lines.append(f"\n**{sc}** next to the simulator's `{ssc}`\n")
        lines.append("| arm → peer | real TPS × defaults | sim TPS × defaults | real worst 1 s / median "
                     "| sim worst 1 s / mean | real p99 × defaults | sim p99 × defaults | sim s stalled "
                     "| real peak history | sim peak history | real history at end | sim history at end | real SETs "
                     "| sim SETs |")
        lines.append("|" + "---|" * 14)
        base_real_tps = median(summ, sc, "defaults", "mean_tps")
        base_real_p99 = median(summ, sc, "defaults", "p99_of_p99")
        base_sim = own.get((sc, "defaults")) or rows.get((ssc, "mariadb1011_defaults"))
        for arm in summ[sc]:
            s = sim_row(sc, arm)
            r_tps = median(summ, sc, arm, "mean_tps")
            lines.append("| " + " | ".join([
                label(sc, arm),
                fmt(ratio(r_tps, base_real_tps)),
                fmt(ratio(s["mean_tps"], base_sim["mean_tps"]) if s and base_sim else None),
                fmt(median(summ, sc, arm, "worst_ratio")),
                fmt(ratio(s["worst_tps"], s["mean_tps"]) if s else None),
                fmt(ratio(median(summ, sc, arm, "p99_of_p99"), base_real_p99)),
                fmt(ratio(s["latency_p99_ms"], base_sim["latency_p99_ms"]) if s and base_sim else None),
                fmt(s["stalled_s"] if s else None, "{:.0f}"),
                fmt(median(summ, sc, arm, "peak_history"), "{:.0f}"),
                fmt(s["peak_history"] if s else None, "{:.0f}"),
                fmt(median(summ, sc, arm, "end_debt"), "{:.0f}"),
                fmt(s["end_history"] if s else None, "{:.0f}"),
                fmt(median(summ, sc, arm, "ip_sets"), "{:.0f}"),
                fmt(s["sets"] if s and arm != "dryrun" else None, "{:.0f}"),
            ]) + " |")
        # Rankings: do the simulator and the server order the arms alike? dryrun only
        # observes; its peer is the defaults, so it is left out.
        arms = [x for x in summ[sc] if x != "dryrun" and sim_row(sc, x)]
        for what, rkey, skey, sign in (("mean TPS", "mean_tps", "mean_tps", 1),
                                        ("history at the end (lower is better)", "end_debt", "end_history", -1)):
            real_v, sim_v = {}, {}
            for arm in arms:
                rv = median(summ, sc, arm, rkey)
                sr = sim_row(sc, arm)
                sv = sr.get(skey) if sr else None
                real_v[arm] = None if rv is None else sign * rv
                sim_v[arm] = None if sv is None else sign * sv
            rr, sr_ = ranking(real_v), ranking(sim_v)
            same = "same order" if rr == sr_ and rr else ("no simulator rows" if not sr_ else "**differs**")
            lines.append(f"\nRanking by {what}: server {' > '.join(rr) or '–'}; "
                         f"simulator {' > '.join(sr_) or '–'} ({same}).")
    text = "\n".join(lines) + "\n"
    with open(os.path.join(a.results, "side_by_side.md"), "w") as f:
        f.write(text)
    print(text)


if __name__ == "__main__":
    main()
