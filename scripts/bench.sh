#!/usr/bin/env bash
# The real-server benchmark (issues 6 and 13; docs/benchmarks.md). One command:
#
#   scripts/bench.sh            full run: scenarios e_purge_behind, f_cold_view,
#                               g_checkpoint_stall, each arm set x 3 repetitions x 180 s,
#                               release build, results in bench/results/<UTC date>/ (-2, -3, ... for
#                               a later run that day); the
#                               estimate is printed first and the run refuses to start
#                               beyond --budget-min (120)
#   scripts/bench.sh --scenarios h_repeated_bursts
#                               opt-in: g with two bursts (about 5.3 min a run)
#   scripts/bench.sh --scenarios i_drain_at_the_cliff
#                               opt-in: purge draining at the maximum checkpoint age,
#                               1, 4 or 8 purge threads (about 2.5 min a run)
#   scripts/bench.sh --quick    about a minute: one short legacy scenario, one repetition,
#                               debug build, results in $CARGO_TARGET_DIR/bench-quick/ (CI)
#
# Extra arguments go to bench/bench.py (--reps N, --scenarios new|legacy|all|a,b,...,
# --arms all|defaults,innopilot,..., --duration S for smoke runs, --budget-min M,
# --out DIR, --below-calibration to run f even when this machine is too slow for
# the rate it was calibrated at, --finish-invalid to run every repetition even when a
# scenario's first defaults run did not reproduce its pathology: by default the
# scenario stops there, INVALID, saying why). Needs mariadbd, mariadb-install-db, mariadb and sysbench
# (scripts/setup.sh) and python3. Starts private servers only (--no-defaults, private
# socket, free loopback port); never touches port 3306. Needs root for the cgroup v1
# blkio throttles (scenarios c, e, f, g) and the redo tmpfs (g).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

target="${CARGO_TARGET_DIR:-target}"
quick=0
for a in "$@"; do [ "$a" = "--quick" ] && quick=1; done
has_out=0
for a in "$@"; do [ "$a" = "--out" ] && has_out=1; done

if [ "$quick" = 1 ]; then
    cargo build --quiet --bin innopilot
    bin="$target/debug/innopilot"
    out=(--out "$target/bench-quick")
else
    cargo build --quiet --release --bin innopilot
    bin="$target/release/innopilot"
    # One directory per run: a second run on the same day gets <date>-2, -3, ...
    day="bench/results/$(date -u +%Y-%m-%d)"
    dir="$day"
    n=2
    while [ -e "$dir" ]; do dir="$day-$n"; n=$((n + 1)); done
    out=(--out "$dir")
fi
[ "$has_out" = 1 ] && out=()
exec python3 bench/bench.py --innopilot "$bin" "${out[@]}" "$@"
