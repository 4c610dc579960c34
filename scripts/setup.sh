#!/usr/bin/env bash
# Installs what the tests and benchmarks need: Debian's mariadb-server (for the
# mariadbd and mariadb-install-db binaries; tests start their own private servers),
# sysbench and prometheus (for promtool), plus the rustfmt and clippy components. Idempotent: does nothing when all is
# present. Never starts, stops or configures the system MariaDB service.
set -euo pipefail

have() { command -v "$1" >/dev/null 2>&1; }

# mariadbd lives in /usr/sbin, which is not on every user's PATH.
PATH="$PATH:/usr/local/sbin:/usr/sbin:/sbin"

missing=()
for bin in mariadbd mariadb-install-db sysbench; do
    have "$bin" || missing+=("$bin")
done
# tests/operate.rs verifies the systemd unit with systemd-analyze.
packages=(mariadb-server sysbench)
if ! have systemd-analyze; then
    missing+=(systemd-analyze)
    packages+=(systemd)
fi
# tests/promtool.rs lints a live /metrics scrape with `promtool check metrics`.
# tests/tls.rs makes its certificates with the openssl command.
if ! have openssl; then
    missing+=(openssl)
    packages+=(openssl)
fi
if ! have promtool; then
    missing+=(promtool)
    packages+=(prometheus)
fi

if ((${#missing[@]})); then
    echo "setup.sh: missing ${missing[*]}; installing ${packages[*]}" >&2
    if [[ $(id -u) -eq 0 ]]; then
        sudo=()
    elif have sudo; then
        sudo=(sudo)
    else
        echo "setup.sh: need root or sudo to install packages" >&2
        exit 1
    fi
    # policy-rc.d exit 101 keeps Debian's maintainer scripts from starting the system
    # MariaDB service during the install (tests never use it). Only added when absent,
    # removed again on exit.
    policy=/usr/sbin/policy-rc.d
    if [[ ! -e $policy ]]; then
        printf '#!/bin/sh\nexit 101\n' | "${sudo[@]}" tee "$policy" >/dev/null
        "${sudo[@]}" chmod 755 "$policy"
        trap '"${sudo[@]}" rm -f "$policy"' EXIT
    fi
    "${sudo[@]}" apt-get update
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y "${packages[@]}"
    for bin in mariadbd mariadb-install-db sysbench systemd-analyze promtool; do
        have "$bin" || { echo "setup.sh: $bin still missing after install" >&2; exit 1; }
    done
fi

components=()
cargo fmt --version >/dev/null 2>&1 || components+=(rustfmt)
cargo clippy --version >/dev/null 2>&1 || components+=(clippy)
if ((${#components[@]})); then
    if have rustup; then
        rustup component add "${components[@]}"
    else
        echo "setup.sh: cargo ${components[*]} missing and rustup not found" >&2
        exit 1
    fi
fi

echo "setup.sh: $(mariadbd --version)"
echo "setup.sh: $(sysbench --version)"
