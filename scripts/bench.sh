#!/usr/bin/env bash
# The real-server benchmark (issue 6; docs/benchmarks.md). One command:
#
#   scripts/bench.sh            full run: 4 scenarios x 6 arms x 3 repetitions, release
#                               build, results in bench/results/<UTC date>/
#   scripts/bench.sh --quick    about a minute: one short scenario, one repetition, debug
#                               build, results in $CARGO_TARGET_DIR/bench-quick/ (CI)
#
# Extra arguments go to bench/bench.py (--reps N, --scenarios a_view_surge,...,
# --arms defaults,innopilot,..., --out DIR). Needs mariadbd, mariadb-install-db,
# mariadb and sysbench (scripts/setup.sh) and python3. Starts private servers only
# (--no-defaults, private socket, free loopback port); never touches port 3306.
# Scenario c needs root for the cgroup v1 blkio throttle.
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
    out=(--out "bench/results/$(date -u +%Y-%m-%d)")
fi
[ "$has_out" = 1 ] && out=()
exec python3 bench/bench.py --innopilot "$bin" "${out[@]}" "$@"
