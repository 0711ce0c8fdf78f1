#!/usr/bin/env bash
# shellcheck disable=SC2317  # step functions are only called via run_step/start_step
# The single test command for osmium (README, CI via .ci/run):
#
#     bash scripts/test-all.sh
#
# Works from a clean clone on a fresh Debian 12 machine (root, no stdin). It
#   1. builds the test oracle, genuine memcached 1.6.45, from the source in
#      tests/oracle/ (scripts/build-memcached.sh; nothing to do when
#      .oracle/memcached-1.6.45/memcached is built) and exports MEMCACHED_BIN
#      for every later step; installs what the suites need (apt packages,
#      Rust components, pip packages from tests/requirements.txt, the Go
#      modules, Maven artifacts and npm packages of the Go/Java/Node client
#      suites; apt, pip and npm only what is missing or not at its pin),
#   2. runs, in order, stopping at the first failure:
#        cargo fmt --all -- --check
#        cargo +RUST_VERSION check --lib --bins (the workspace's
#          rust-version, installed with rustup --profile minimal if
#          missing; target/msrv), in the
#          background beside the next two steps (its log printed whole
#          when it ends, before the Debian package step)
#        cargo clippy --workspace --all-targets -- -D warnings
#        cargo build --release --workspace --lib --bins --tests --examples
#          (every unit `cargo test` needs, built once: see cargo_build_release)
#        the Debian package (scripts/build-deb.sh: man pages, cargo deb
#          --no-build; installed and purged by tests/package)
#        then side by side (PARALLEL=0: one after another):
#        cargo test --workspace --release
#        the proxy's placement, serving, stats and TLS suites again,
#          each proxy started on placeholder servers and SIGHUP-reloaded
#          into its real configuration (OSMIUM_PROXY_TESTS_RELOADED=1)
#        cargo fuzz (one build of every target, then each target briefly,
#          two at a time, at nice 10; only if fuzz/Cargo.toml exists)
#        python3 -m pytest tests -q (in two pytest-xdist processes)
#   3. prints a summary of the steps and of the test counts.
#
# Knobs (environment):
#   SKIP_INSTALL=1        in step 1 only build the oracle (when it is not
#                         built yet); install nothing else
#   MEMCACHED_BIN=PATH    compare against this memcached instead of the
#                         oracle built in step 1
#   SKIP_FUZZ=1           skip the fuzz step
#   FUZZ_SECONDS=10       libFuzzer -max_total_time per fuzz target (a
#                         smoke run of every target beside the tests: a
#                         longer campaign is `cargo fuzz run TARGET`)
#                         (text_parser and proxy_parsers get half: see
#                         fuzz_seconds_of)
#   FUZZ_TOOLCHAIN=NAME   run `RUSTC_BOOTSTRAP=1 cargo +NAME fuzz` (default:
#                         `cargo +nightly fuzz` if a nightly toolchain is
#                         installed, else the default toolchain with
#                         RUSTC_BOOTSTRAP=1, which is enough for cargo-fuzz:
#                         no nightly download needed)
#   FUZZ_JOBS=2           fuzz targets run at a time
#   FUZZ_OPT_LEVEL=1      the fuzz targets' opt-level (cargo-fuzz builds at 3)
#   PYTEST_ARGS="..."     extra arguments for pytest
#   PYTEST_WORKERS=2      pytest-xdist processes (1: one process, no xdist)
#   PARALLEL=1            cargo test, fuzz and pytest side by side (0: in turn)
#   ONLY="ID ..."         run only these steps (the others are reported as
#                         skipped): install fmt msrv clippy build deb test
#                         reloaded fuzz pytest; e.g. ONLY="install pytest"
#   OSMIUM_TEST_PROFILE=release
#                         build and test with Cargo.toml's release profile
#                         (thin LTO, line tables) instead of the test build's
#                         (no LTO, no debug info: see cargo_build_release)
#   OSMIUM_LONG_TESTS=1   the long versions of the slowest integration tests
#                         (crates/test-harness/src/size.rs): more keys and
#                         longer loads, the same cases
set -uo pipefail

cd "$(dirname "$0")/.." || exit 1
export CI="${CI:-}"
FUZZ_SECONDS="${FUZZ_SECONDS:-10}"
LOGDIR=$(mktemp -d "${TMPDIR:-/tmp}/osmium-test-all.XXXXXX")
trap 'rm -rf "$LOGDIR"' EXIT

if [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null 2>&1; then SUDO=(sudo -n); else SUDO=(); fi

# The memcached every suite compares osmium with (tests/support/servers.py,
# the Rust tests' common::memcached_bin): built in step 1.
ORACLE_BIN="$PWD/.oracle/memcached-1.6.45/memcached"
export MEMCACHED_BIN="${MEMCACHED_BIN:-$ORACLE_BIN}"

# cargo may be installed by rustup without being on PATH in a non-login shell
if ! command -v cargo >/dev/null 2>&1 && [ -f "$HOME/.cargo/env" ]; then
    # shellcheck disable=SC1091
    . "$HOME/.cargo/env"
fi

STEP_NAMES=()
STEP_RESULTS=()
STEP_TIMES=()
STEP_CPU=()
TOTAL_START=$SECONDS

note() { printf '>>> %s\n' "$*"; }

# cpu_now: sets CPU_NOW to the CPU seconds (user + system) of this
# shell's children reaped so far (`times`' second line; written to a
# file and read here, not through $(...), whose subshell would count its
# own children only).
cpu_seconds() { # FILE: the seconds of the second line `times` wrote there
    local line re='^([0-9]+)m([0-9.]+)s ([0-9]+)m([0-9.]+)s$'
    line=$(tail -n 1 "$1" 2>/dev/null)
    if [[ $line =~ $re ]]; then
        awk -v a="${BASH_REMATCH[1]}" -v b="${BASH_REMATCH[2]}" \
            -v c="${BASH_REMATCH[3]}" -v d="${BASH_REMATCH[4]}" \
            'BEGIN { printf "%.0f", a * 60 + b + c * 60 + d }'
    else
        echo 0
    fi
}
cpu_now() {
    times >"$LOGDIR/times"
    CPU_NOW=$(cpu_seconds "$LOGDIR/times")
}

header() {
    printf '\n%s\n== [%s] %s\n%s\n' \
        "========================================================================" \
        "$1" "$2" \
        "========================================================================"
}

# Sum test counts from the step logs: cargo's "test result:" lines and
# pytest's closing line.
count_tests() {
    local passed=0 failed=0 skipped=0 f line n
    for f in "$LOGDIR"/*.log; do
        [ -e "$f" ] || continue
        while IFS= read -r line; do
            if [[ $line =~ ^test\ result:\ [A-Za-z]+\.\ ([0-9]+)\ passed\;\ ([0-9]+)\ failed\;\ ([0-9]+)\ ignored ]]; then
                passed=$((passed + BASH_REMATCH[1]))
                failed=$((failed + BASH_REMATCH[2]))
                skipped=$((skipped + BASH_REMATCH[3]))
            fi
        done < "$f"
        # pytest -q closing line, e.g. "3 failed, 101 passed, 2 skipped in 14.59s"
        line=$(grep -E '^(=+ )?[0-9]+ (passed|failed|skipped|error|errors|xfailed|xpassed|deselected)(, [0-9]+ [a-z]+)* in [0-9.]+s' "$f" | tail -n 1)
        if [ -n "$line" ]; then
            n=$(grep -oE '[0-9]+ passed' <<<"$line" | grep -oE '[0-9]+'); passed=$((passed + ${n:-0}))
            n=$(grep -oE '[0-9]+ failed' <<<"$line" | grep -oE '[0-9]+'); failed=$((failed + ${n:-0}))
            n=$(grep -oE '[0-9]+ errors?' <<<"$line" | grep -oE '[0-9]+'); failed=$((failed + ${n:-0}))
            n=$(grep -oE '[0-9]+ skipped' <<<"$line" | grep -oE '[0-9]+'); skipped=$((skipped + ${n:-0}))
        fi
    done
    if [ $((passed + failed + skipped)) -eq 0 ]; then
        return
    fi
    if [ "$1" -eq 0 ]; then
        printf 'tests: %d passed, %d failed, %d skipped\n' "$passed" "$failed" "$skipped"
    else
        printf 'tests run before the failing step stopped the run: %d passed, %d failed, %d skipped\n' \
            "$passed" "$failed" "$skipped"
    fi
}

summary() {
    local rc=$1 i
    printf '\n%s\n== SUMMARY\n%s\n' \
        "========================================================================" \
        "========================================================================"
    for i in "${!STEP_NAMES[@]}"; do
        printf '  %-7s %6ss %7s  %s\n' "${STEP_RESULTS[$i]}" "${STEP_TIMES[$i]}" \
            "${STEP_CPU[$i]:+${STEP_CPU[$i]}s cpu}" "${STEP_NAMES[$i]}"
    done
    printf '  total time: %ss\n' "$((SECONDS - TOTAL_START))"
    if [ "$rc" -eq 0 ]; then
        echo "RESULT: all steps passed"
    else
        echo "RESULT: FAILED at step: ${FAILED_STEPS[*]}"
    fi
    count_tests "$rc"
}

# The steps are numbered in the order they are declared; the arrays above
# are indexed by that number, so the summary lists a step that ran beside
# others (start_step) in its place.
STEP_NO=0
TOTAL_STEPS=10
FAILED_STEPS=()

# Whether step ID is to run: all of them unless ONLY lists some.
selected() {
    [ -z "${ONLY:-}" ] || [[ " ${ONLY//,/ } " == *" $1 "* ]]
}

# record_step NO NAME START RC [END]: a step's result in the summary's
# arrays (its time: from START to END, default now); a failure ends the
# script (after the steps still running beside it).
record_step() {
    local no=$1 name=$2 start=$3 rc=$4 end=${5:-$SECONDS}
    STEP_NAMES[no]=$name
    STEP_TIMES[no]=$((end - start))
    if [ "$rc" -eq 0 ]; then
        STEP_RESULTS[no]=ok
        note "step '$name' passed in $((end - start))s"
    elif [ "$rc" -eq 99 ]; then
        STEP_RESULTS[no]=skipped
        note "step '$name' skipped"
    else
        STEP_RESULTS[no]=FAILED
        note "step '$name' FAILED (exit $rc)"
        FAILED_STEPS+=("$name")
        finish_all_steps
        summary "$rc"
        exit "$rc"
    fi
}

# run_step ID "NAME" FUNCTION [ARGS...]: run FUNCTION with its output teed
# to its log; stop the whole script at the first failure.
run_step() {
    local id=$1 name=$2; shift 2
    STEP_NO=$((STEP_NO + 1))
    header "$STEP_NO/$TOTAL_STEPS" "$name"
    if ! selected "$id"; then
        note "not in ONLY=$ONLY"
        record_step "$STEP_NO" "$name" "$SECONDS" 99
        return
    fi
    local start=$SECONDS cpu rc
    cpu_now
    cpu=$CPU_NOW
    "$@" 2>&1 | tee "$LOGDIR/$(printf '%02d' "$STEP_NO").log"
    rc=${PIPESTATUS[0]}
    cpu_now
    STEP_CPU[STEP_NO]=$((CPU_NOW - cpu))
    record_step "$STEP_NO" "$name" "$start" "$rc"
}

# start_step ID "NAME" FUNCTION [ARGS...]: run FUNCTION in the background,
# beside the steps that follow, with its output in its own log (printed
# whole by finish_step ID, so two steps' lines never mix).
declare -A BG_PID BG_NO BG_NAME BG_START
start_step() {
    local id=$1 name=$2; shift 2
    STEP_NO=$((STEP_NO + 1))
    header "$STEP_NO/$TOTAL_STEPS" "$name (started: runs beside the next steps)"
    if ! selected "$id"; then
        note "not in ONLY=$ONLY"
        record_step "$STEP_NO" "$name" "$SECONDS" 99
        return
    fi
    BG_NO[$id]=$STEP_NO BG_NAME[$id]=$name BG_START[$id]=$SECONDS
    local log
    log="$LOGDIR/$(printf '%02d' "$STEP_NO").log"
    # (the step's own end, for its time in the summary: .end, not .log)
    # (its CPU: `times` in the background shell, whose children are the
    # step's own)
    {
        "$@"
        local rc=$?
        echo "$SECONDS" >"${log%.log}.end"
        times >"${log%.log}.times"
        return "$rc"
    } >"$log" 2>&1 &
    BG_PID[$id]=$!
    note "started in the background (PID ${BG_PID[$id]}); its output follows when it ends"
}

# finish_step ID: wait for a step start_step began, print its log, record it.
finish_step() {
    local id=$1 rc
    [ -n "${BG_PID[$id]:-}" ] || return 0
    wait "${BG_PID[$id]}"
    rc=$?
    unset "BG_PID[$id]"
    header "${BG_NO[$id]}/$TOTAL_STEPS" "${BG_NAME[$id]} (ended)"
    cat "$LOGDIR/$(printf '%02d' "${BG_NO[$id]}").log"
    STEP_CPU[${BG_NO[$id]}]=$(cpu_seconds "$LOGDIR/$(printf '%02d' "${BG_NO[$id]}").times")
    record_step "${BG_NO[$id]}" "${BG_NAME[$id]}" "${BG_START[$id]}" "$rc" \
        "$(cat "$LOGDIR/$(printf '%02d' "${BG_NO[$id]}").end" 2>/dev/null || echo "$SECONDS")"
}

# Every step still running in the background, waited for and recorded.
finish_all_steps() {
    local id
    for id in "${!BG_PID[@]}"; do
        finish_step "$id"
    done
}

# --------------------------------------------------------------------------
# Step 1: dependencies
# --------------------------------------------------------------------------
# libmemcached-dev (with pylibmc from tests/requirements.txt) is also what
# crates/bench/tests/bench/load.rs uses to check `load --targets` ketama placement
# against a real libmemcached client (that test prints SKIP without it).
# nutcracker (twemproxy) is what tests/cluster runs in front of osmium and
# memcached servers, beside osmium-proxy.
# openssl (the command) makes the certificates of tests/tls, of the
# conformance suite run over TLS, and of crates/server/tests/server/replication_tls.rs.
# memcached itself is not installed: the suites run the oracle built from
# tests/oracle/ (scripts/build-memcached.sh installs its own build
# dependencies, libsasl2-modules for SASL PLAIN among them).
# libssl-dev (with pkg-config) builds openssl-sys for the Rust `memcache`
# crate's TLS in crates/client-tests (a test-only crate: the osmium binary
# links no OpenSSL).
# tmux is the real terminal crates/tool/tests/tool/top.rs runs `osmium-tool top`
# in; liburi-perl (URI::Escape) lets crates/tool/tests/tool/memcached_tool.rs run
# memcached's own memcached-tool beside osmium-tool (both tests skip without
# them, and fail under CI=true); tests/exporter runs it too.
# prometheus gives /usr/bin/promtool and /usr/bin/prometheus to
# crates/server/tests/server/metrics.rs (`promtool check metrics` on /metrics, a
# Prometheus server scraping osmium on loopback); about 20 MB to fetch.
# adduser is what the osmium package's postinst makes its user with
# (tests/package installs the package built by scripts/build-deb.sh).
APT_PACKAGES=(libmemcached-tools libmemcached-dev pkg-config zlib1g-dev build-essential nutcracker openssl libssl-dev tmux liburi-perl prometheus adduser)

# The oracle: built unless it is there already (the script checks), or the
# memcached named by MEMCACHED_BIN.
build_oracle() {
    if [ "$MEMCACHED_BIN" = "$ORACLE_BIN" ]; then
        local start=$SECONDS
        bash scripts/build-memcached.sh >/dev/null || { echo "scripts/build-memcached.sh failed"; return 1; }
        note "oracle ready in $((SECONDS - start))s"
    fi
    [ -x "$MEMCACHED_BIN" ] || { echo "MEMCACHED_BIN=$MEMCACHED_BIN is not an executable"; return 1; }
    note "memcached (MEMCACHED_BIN): $MEMCACHED_BIN: $("$MEMCACHED_BIN" -V 2>&1)"
}

install_deps() {
    if [ "${SKIP_INSTALL:-}" = 1 ]; then
        note "SKIP_INSTALL=1: installing nothing but the oracle (if it is not built)"
        build_oracle
        return
    fi

    # --- apt ---------------------------------------------------------------
    local want=("${APT_PACKAGES[@]}") missing=() p
    command -v python3 >/dev/null 2>&1 || want+=(python3)
    if command -v python3 >/dev/null 2>&1 && ! python3 -m pip --version >/dev/null 2>&1; then
        want+=(python3-pip)
    fi
    for p in "${want[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
    done
    if [ ${#missing[@]} -gt 0 ]; then
        note "apt: installing ${missing[*]}"
        "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update || return 1
        "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
            "${missing[@]}" || return 1
    else
        note "apt: all of ${want[*]} already installed"
    fi

    # --- the oracle ----------------------------------------------------------
    build_oracle || return 1

    # --- Rust --------------------------------------------------------------
    if ! command -v cargo >/dev/null 2>&1; then
        echo "cargo not found: install Rust with rustup first (https://rustup.rs)"
        return 1
    fi
    note "$(cargo --version); $(rustc --version)"
    if ! cargo fmt --version >/dev/null 2>&1; then
        note "installing rustfmt"; rustup component add rustfmt || return 1
    fi
    if ! cargo clippy --version >/dev/null 2>&1; then
        note "installing clippy"; rustup component add clippy || return 1
    fi
    # cargo-deb builds the Debian package (step "Debian package"); 3.8.0
    # builds with Rust 1.95 in about 2.5 min on 2 cores. Without it that
    # step fails under CI=true and is skipped otherwise.
    if ! cargo deb --version >/dev/null 2>&1; then
        note "installing cargo-deb 3.8.0"
        cargo install cargo-deb --locked --version 3.8.0 ||
            note "WARNING: cargo-deb could not be installed: the Debian package step fails under CI=true"
    fi

    # --- Python ------------------------------------------------------------
    export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore
    if pinned_pip_packages_installed; then
        note "pip: every pin of tests/requirements.txt already installed"
    else
        note "pip: installing tests/requirements.txt into $(python3 --version 2>&1)"
        if ! python3 -m pip install -q -r tests/requirements.txt; then
            note "pip install failed; retrying with --break-system-packages (PEP 668 system Python)"
            python3 -m pip install -q --break-system-packages -r tests/requirements.txt || return 1
        fi
    fi
    python3 - <<'EOF' || return 1
import bmemcached, memcache, meta_memcache, meta_memcache_socket, pylibmc, pymemcache, pytest, xdist
from importlib.metadata import version
print(f">>> pytest {pytest.__version__} (pytest-xdist {xdist.__version__}), pymemcache {pymemcache.__version__}, "
      f"pylibmc {pylibmc.__version__} (libmemcached {pylibmc.libmemcached_version}), "
      f"python-memcached {memcache.__version__}, "
      f"python-binary-memcached {bmemcached.__version__}, "
      f"meta-memcache {meta_memcache.__version__} "
      f"(meta-memcache-socket {version('meta-memcache-socket')})")
EOF
    install_client_suites || return 1
}

# Whether every `name==version` line of tests/requirements.txt is installed
# at that version (then pip has nothing to do and is not run).
pinned_pip_packages_installed() {
    python3 - <<'EOF' 2>/dev/null
import re, sys
from importlib.metadata import version, PackageNotFoundError
for line in open("tests/requirements.txt"):
    m = re.match(r"\s*([A-Za-z0-9_.-]+)==([^\s#;]+)", line)
    if not m:
        continue
    try:
        if version(m.group(1)) != m.group(2):
            sys.exit(1)
    except PackageNotFoundError:
        sys.exit(1)
EOF
}

# The Go, Java and Node client-library suites (tests/clients/{go,java,node},
# driven by tests/clients/test_{go,java,node}.py): fetch their pinned
# dependencies now, so the pytest step only compiles and runs. A missing
# toolchain is not an install failure: those suites then fail under CI=true
# (skip otherwise) with a "toolchain missing" message.
install_client_suites() {
    local missing=()
    if command -v go >/dev/null 2>&1; then
        note "go: $(go version); go mod download (tests/clients/go)"
        (cd tests/clients/go && go mod download) ||
            { echo "go mod download failed in tests/clients/go (module proxy reachable? GOPROXY=$(go env GOPROXY))"; return 1; }
        # memcached_exporter's dependencies (its own source is kept in
        # tests/exporter/memcached_exporter; tests/exporter builds it).
        note "go mod download (tests/exporter/memcached_exporter)"
        (cd tests/exporter/memcached_exporter && go mod download) ||
            { echo "go mod download failed in tests/exporter/memcached_exporter (module proxy reachable? GOPROXY=$(go env GOPROXY))"; return 1; }
    else
        missing+=(go)
    fi
    if command -v mvn >/dev/null 2>&1 && command -v java >/dev/null 2>&1; then
        # (sed: Maven prints colour resets even in batch mode)
        note "$(mvn -B -v 2>/dev/null | head -n 1 | sed 's/\x1b\[[0-9;]*m//g'); $(java -version 2>&1 | head -n 1)"
        note "maven: fetching tests/clients/java dependencies and plugins, compiling the tests"
        # Running surefire with no matching test also fetches its JUnit
        # platform provider, which dependency:go-offline would miss.
        mvn -B -q -Dstyle.color=never -f tests/clients/java/pom.xml test \
            -Dtest=NoSuchTestClass -Dsurefire.failIfNoSpecifiedTests=false 2>&1 |
            sed 's/\x1b\[[0-9;]*m//g'
        [ "${PIPESTATUS[0]}" -eq 0 ] ||
            { echo "maven could not fetch or compile tests/clients/java (Maven Central reachable?)"; return 1; }
    else
        missing+=(mvn/java)
    fi
    if command -v npm >/dev/null 2>&1 && command -v node >/dev/null 2>&1; then
        # npm ci empties node_modules and fetches again: only when what is
        # installed does not match package-lock.json (npm ls says so).
        if (cd tests/clients/node && npm ls --all >/dev/null 2>&1); then
            note "node $(node --version): tests/clients/node/node_modules matches package-lock.json"
        else
            note "node $(node --version), npm $(npm --version 2>/dev/null): npm ci (tests/clients/node)"
            (cd tests/clients/node && npm ci --no-audit --no-fund) ||
                { echo "npm ci failed in tests/clients/node (npm registry reachable?)"; return 1; }
        fi
    else
        missing+=(node/npm)
    fi
    if [ ${#missing[@]} -gt 0 ]; then
        note "WARNING: toolchain(s) missing: ${missing[*]}: their client suites fail under CI=true"
    fi
}

# --------------------------------------------------------------------------
# Steps 2, 3, 5, 7 and 8: cargo
# --------------------------------------------------------------------------
# The test targets are built here with the libraries and binaries: a build
# of the libraries and binaries alone resolves the dependencies' features
# without the dev-dependencies (criterion, proptest turn on serde's derive,
# regex's defaults, ...), so `cargo test` would compile osmium-server, the
# binaries and their serde/regex dependencies a second time. Built this
# way, the binaries the tests run (and the Debian package holds) are the
# ones `cargo test` would build; the features added change no code path.
#
# The test build leaves out what only the shipped binaries need
# (TEST_PROFILE below): no link-time optimisation, no line tables, 16
# codegen units, so the ~60 binaries of the workspace's tests link in a
# fraction of the time. The tests measure no speed, and the code is the
# same; `cargo build --release` outside this script (and
# scripts/build-deb.sh run alone) keeps Cargo.toml's profile.
# OSMIUM_TEST_PROFILE=release tests with that profile instead.
cargo_build_release() {
    cargo build --release --workspace --lib --bins --tests --examples || return 1
    if [ ! -x target/release/osmium ]; then
        echo "cargo build --release --workspace succeeded but target/release/osmium does not exist"
        return 1
    fi
    note "built $(ls -l target/release/osmium)"
}

# --------------------------------------------------------------------------
# Step 4: the workspace's rust-version (Cargo.toml) is checked with that
# Rust, in target/msrv (the release build's target/release stays): every
# crate's library and binaries, what a user of that Rust builds. Tests,
# examples and benches are built by the suite's own Rust (some
# dev-dependencies need a newer one: the memcache crate's parking_lot
# 0.13), so checking them here would prove nothing a user needs.
# --------------------------------------------------------------------------
RUST_VERSION=$(sed -n 's/^rust-version = "\(.*\)"$/\1/p' Cargo.toml)
msrv_step() {
    local v=$RUST_VERSION
    [ -n "$v" ] || { echo "no rust-version in Cargo.toml's [workspace.package]"; return 1; }
    if ! command -v rustup >/dev/null 2>&1; then
        echo "rustup not found: Rust $v cannot be installed to check the rust-version"
        return 1
    fi
    if ! grep -q "^$v-" <<<"$(rustup toolchain list)"; then
        note "installing Rust $v (rustup --profile minimal)"
        rustup toolchain install "$v" --profile minimal || return 1
    fi
    note "$(rustup run "$v" rustc --version)"
    local check=(cargo "+$v" check --locked --target-dir target/msrv)
    "${check[@]}" --workspace --lib --bins
}

# --------------------------------------------------------------------------
# Step 6: the Debian package, from the release build (tests/package installs
# it with apt-get, runs its unit's ExecStart and purges it)
# --------------------------------------------------------------------------
deb_step() {
    if ! cargo deb --version >/dev/null 2>&1; then
        if [ "$CI" = true ]; then
            echo "cargo-deb is not installed (CI=true: a failure): cargo install cargo-deb --locked --version 3.8.0"
            return 1
        fi
        note "cargo-deb is not installed: no package (tests/package skips)"
        return 99
    fi
    note "$(cargo deb --version)"
    bash scripts/build-deb.sh
}

# --------------------------------------------------------------------------
# Step 9: fuzz
# --------------------------------------------------------------------------
# A target's libFuzzer seconds. request_framing_diff runs the server's
# text parser and the proxy's framer on every input (panics included) and
# compares them, so it takes its seconds from text_parser and proxy_parsers,
# which fuzz those parsers alone: they get half each.
fuzz_seconds_of() {
    case "$1" in
        text_parser | proxy_parsers) echo $(((FUZZ_SECONDS + 1) / 2)) ;;
        *) echo "$FUZZ_SECONDS" ;;
    esac
}

fuzz_step() {
    if [ ! -f fuzz/Cargo.toml ]; then
        note "no fuzz/Cargo.toml: nothing to fuzz"
        return 99
    fi
    if [ "${SKIP_FUZZ:-}" = 1 ]; then
        note "SKIP_FUZZ=1"
        return 99
    fi
    # Below the suites that run beside it (this step's shell: the build
    # and the targets inherit it).
    renice -n 10 -p "$BASHPID" >/dev/null 2>&1 || true
    # The targets are built at opt-level 1, not cargo-fuzz's 3: the build
    # (the step's critical path) took 332 CPU-s against 414-499, and a
    # target runs as fast (text_parser: 58,500 execs/s against 60,000; an
    # unoptimized build, 202 CPU-s, ran 2,200). FUZZ_OPT_LEVEL overrides.
    export CARGO_PROFILE_RELEASE_OPT_LEVEL="${FUZZ_OPT_LEVEL:-1}"
    if ! cargo fuzz --version >/dev/null 2>&1; then
        note "installing cargo-fuzz"
        cargo install cargo-fuzz --locked || return 1
    fi
    note "$(cargo fuzz --version)"

    # cargo-fuzz passes -Z flags (sanitizers, sancov) to rustc, which needs a
    # nightly compiler -- or any rustc with RUSTC_BOOTSTRAP=1, which is what we
    # use when no nightly toolchain is installed (no download needed).
    local fuzz=()
    if [ -n "${FUZZ_TOOLCHAIN:-}" ]; then
        fuzz=(env RUSTC_BOOTSTRAP=1 cargo "+$FUZZ_TOOLCHAIN" fuzz)
    elif rustup run nightly rustc --version >/dev/null 2>&1; then
        fuzz=(cargo +nightly fuzz)
    else
        fuzz=(env RUSTC_BOOTSTRAP=1 cargo fuzz)
    fi
    note "fuzz command: ${fuzz[*]}"

    # fuzz/ is a workspace of its own: nothing else checks that its lock
    # file follows the crates' dependencies (a stale one is rewritten by
    # the build, leaving the tree changed).
    if ! (cd fuzz && cargo metadata --locked --format-version 1 >/dev/null); then
        echo "fuzz/Cargo.lock is out of date: run 'cargo metadata --format-version 1' in fuzz/ and commit it"
        return 1
    fi

    local targets
    targets=$("${fuzz[@]}" list) || return 1
    if [ -z "$targets" ]; then
        echo "fuzz/Cargo.toml exists but declares no fuzz targets"
        return 1
    fi
    note "fuzz targets: $(tr '\n' ' ' <<<"$targets")"

    local san=()
    if ! "${fuzz[@]}" build; then
        note "build with AddressSanitizer failed; retrying with --sanitizer none"
        san=(--sanitizer none)
        "${fuzz[@]}" build "${san[@]}" || return 1
    fi

    # The targets run FUZZ_JOBS at a time (default 2: this machine's cores),
    # each with its output in a file of its own, printed whole when it ends
    # (its last lines when it passed). Every target runs, even after one
    # failed; the step fails if any did.
    local jobs=${FUZZ_JOBS:-2} out="$LOGDIR/fuzz" t
    mkdir -p "$out"
    for t in $targets; do
        while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n; done
        fuzz_one "$t" "$out" "${fuzz[@]}" -- "${san[@]}" &
    done
    wait
    local failed=()
    for t in $targets; do
        if [ "$(cat "$out/$t.rc" 2>/dev/null)" != 0 ]; then
            failed+=("$t")
        fi
    done
    if [ ${#failed[@]} -gt 0 ]; then
        echo "fuzz target(s) FAILED: ${failed[*]}; reproducers (if any) in fuzz/artifacts/TARGET/"
        return 1
    fi
}

# fuzz_one TARGET OUTDIR FUZZ-COMMAND... -- SANITIZER-ARGS...: fuzz one
# target for its seconds; its output in OUTDIR/TARGET.out (printed when it
# ends), its exit status in OUTDIR/TARGET.rc.
fuzz_one() {
    local t=$1 out=$2; shift 2
    local fuzz=() san=() corpus=() seconds start=$SECONDS rc
    while [ "$1" != -- ]; do fuzz+=("$1"); shift; done
    shift
    san=("$@")
    seconds=$(fuzz_seconds_of "$t")
    # A target's committed seeds (fuzz/seeds/TARGET) are read beside its
    # corpus (fuzz/corpus/TARGET, not committed), where new inputs go.
    if [ -d "fuzz/seeds/$t" ]; then
        mkdir -p "fuzz/corpus/$t"
        corpus=("fuzz/corpus/$t" "fuzz/seeds/$t")
    fi
    "${fuzz[@]}" run "${san[@]}" "$t" "${corpus[@]}" -- \
        -max_total_time="$seconds" -timeout=10 -print_final_stats=1 >"$out/$t.out" 2>&1
    rc=$?
    echo "$rc" >"$out/$t.rc"
    # The report is written whole, under a lock: two targets ending at once
    # do not mix their lines.
    {
        if [ "$rc" -eq 0 ]; then
            note "fuzz target $t: ${seconds}s, passed (in $((SECONDS - start))s); its last lines:"
            grep -E '^(#[0-9]+|stat::|Done)' "$out/$t.out" | tail -n 12
        else
            note "fuzz target $t FAILED (exit $rc); its output:"
            cat "$out/$t.out"
            echo "fuzz target $t FAILED; reproducer (if any) in fuzz/artifacts/$t/"
        fi
    } >"$out/$t.report"
    flock "$out/print.lock" cat "$out/$t.report"
}

# --------------------------------------------------------------------------
# Step 10: pytest
# --------------------------------------------------------------------------
pytest_step() {
    # The osmium binary was just built: a missing binary is an error, not a skip.
    export OSMIUM_REQUIRED=1
    local args=(tests -q -rfEs)
    if python3 -c 'import pytest_timeout' >/dev/null 2>&1; then
        args+=(--timeout=300)
    fi
    # PYTEST_WORKERS processes (pytest-xdist; default 2), each given whole
    # files (--dist loadfile): a file's module fixtures (a built client, a
    # proxy and its servers) are made once, on one worker. Each server
    # a test starts takes a free port of its own (tests/support/servers.py).
    local workers=${PYTEST_WORKERS:-2}
    if [ "$workers" != 1 ] && python3 -c 'import xdist' >/dev/null 2>&1; then
        args+=(-n "$workers" --dist loadfile)
    elif [ "$workers" != 1 ]; then
        note "pytest-xdist is not installed: the suites run in one process"
    fi
    # shellcheck disable=SC2206
    args+=(${PYTEST_ARGS:-})
    python3 -m pytest "${args[@]}"
    local rc=$?
    if [ "$rc" -eq 5 ]; then
        echo "pytest collected no tests (exit 5): treated as a failure"
    fi
    return "$rc"
}

run_step install "install dependencies, build the memcached oracle" install_deps
run_step fmt "cargo fmt --all -- --check" cargo fmt --all -- --check
# The rust-version check runs beside clippy and the release build: its own
# toolchain and target dir (target/msrv), and it fills the cores those
# leave idle (their last crates compile and link one at a time).
start_step msrv "cargo +$RUST_VERSION check (the workspace rust-version)" msrv_step
run_step clippy "cargo clippy --workspace --all-targets -- -D warnings" \
    cargo clippy --workspace --all-targets -- -D warnings
# From here on, every cargo command that builds the release profile uses
# the test build's settings (see cargo_build_release), so the test steps
# compile nothing again.
if [ "${OSMIUM_TEST_PROFILE:-test}" != release ]; then
    export CARGO_PROFILE_RELEASE_LTO=off
    export CARGO_PROFILE_RELEASE_DEBUG=0
    export CARGO_PROFILE_RELEASE_CODEGEN_UNITS=16
fi
run_step build "cargo build --release --workspace --lib --bins --tests --examples" cargo_build_release
finish_step msrv
run_step deb "Debian package (scripts/build-deb.sh)" deb_step
# The suites run side by side: cargo test keeps under half of the two
# cores busy (its servers and clients mostly wait on each other over
# loopback), pytest about a third; the fuzz targets fill what they leave,
# at a lower priority (nice 10). Every server any of them starts takes a
# free port of its own. PARALLEL=0 runs them one after another.
if [ "${PARALLEL:-1}" = 1 ]; then
    start_step fuzz "cargo fuzz (${FUZZ_SECONDS}s per target, text_parser and proxy_parsers half; ${FUZZ_JOBS:-2} at a time; nice 10)" fuzz_step
    start_step pytest "python3 -m pytest tests -q" pytest_step
fi
run_step test "cargo test --workspace --release" cargo test --workspace --release
# --workspace, not -p osmium-proxy: the same feature set as the step
# before, so nothing is compiled again (-p rebuilt the dependencies: 430 s).
# `--test proxy` is osmium-proxy's one integration binary; the filters pick
# its placement, serving, stats and tls modules.
run_step reloaded "proxy suites through a reloaded proxy" \
    env OSMIUM_PROXY_TESTS_RELOADED=1 cargo test --workspace --release \
    --test proxy -- placement:: serving:: stats:: tls::
if [ "${PARALLEL:-1}" = 1 ]; then
    finish_step pytest
    finish_step fuzz
else
    run_step fuzz "cargo fuzz (${FUZZ_SECONDS}s per target, text_parser and proxy_parsers half; ${FUZZ_JOBS:-2} at a time; nice 10)" fuzz_step
    run_step pytest "python3 -m pytest tests -q" pytest_step
fi
summary 0
exit 0
