#!/usr/bin/env bash
# Build the test oracle, genuine memcached 1.6.45, from the release source
# vendored in tests/oracle/, into the git-ignored folder .oracle/:
#
#     bash scripts/build-memcached.sh        # prints the binary's path last
#     .oracle/memcached-1.6.45/memcached -V  # memcached 1.6.45
#
# Every suite that compares osmium with memcached uses this binary unless
# MEMCACHED_BIN names another (tests/support/servers.py, the Rust tests'
# common::memcached_bin(), osmium-bench's default). scripts/test-all.sh runs
# this script in its first step.
#
# Idempotent: nothing is done when the binary exists, `-V` prints
# "memcached 1.6.45" and it was built from the same tarball with the same
# configure options (recorded in .oracle/memcached-1.6.45/BUILD-INFO).
#
# Configured with TLS (-Z), SASL (-S) and SASL's plain password file
# (--enable-sasl-pwdb: MEMCACHED_SASL_PWDB=FILE with `user:password` lines,
# see tests/support/sasl.py); extstore and restartable memory (-e) are on by
# default. Installs the apt build dependencies that are missing (as root, or
# with sudo -n). About a minute on 2 cores.
#
# Knobs (environment):
#   ORACLE_FORCE=1   rebuild even if the binary is up to date
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
VERSION=1.6.45
TARBALL="$ROOT/tests/oracle/memcached-$VERSION-src.tar.gz"
DEST="$ROOT/.oracle/memcached-$VERSION"
BIN="$DEST/memcached"
CONFIGURE_ARGS=(--enable-tls --enable-sasl --enable-sasl-pwdb)
# libsasl2-modules: the PLAIN mechanism, loaded by memcached at run time.
APT_PACKAGES=(build-essential autoconf automake libtool pkg-config libevent-dev libssl-dev
              libsasl2-dev libsasl2-modules)

note() { printf '>>> %s\n' "$*" >&2; }

[ -f "$TARBALL" ] || { echo "missing $TARBALL" >&2; exit 1; }
TARBALL_SHA=$(sha256sum "$TARBALL" | cut -d' ' -f1)
BUILD_INFO="tarball sha256 $TARBALL_SHA; configure ${CONFIGURE_ARGS[*]}"

up_to_date() {
    [ -x "$BIN" ] || return 1
    [ "$("$BIN" -V 2>/dev/null || true)" = "memcached $VERSION" ] || return 1
    [ -f "$DEST/BUILD-INFO" ] && [ "$(cat "$DEST/BUILD-INFO")" = "$BUILD_INFO" ]
}

if [ "${ORACLE_FORCE:-}" != 1 ] && up_to_date; then
    note "oracle up to date: $BIN ($("$BIN" -V))"
    echo "$BIN"
    exit 0
fi

# --- apt build dependencies ----------------------------------------------------
missing=()
for p in "${APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    if [ "$(id -u)" -eq 0 ]; then
        sudo=()
    elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
        sudo=(sudo -n)
    else
        echo "missing build dependencies: ${missing[*]}" >&2
        echo "install them (apt-get install ${missing[*]}) or run this script as root" >&2
        exit 1
    fi
    note "apt: installing ${missing[*]}"
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q >&2
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
        "${missing[@]}" >&2
fi

# --- build ---------------------------------------------------------------------
# Outside the repository: memcached's version scripts ask `git describe`, which
# inside this repository would describe osmium.
WORK=$(mktemp -d "${TMPDIR:-/tmp}/osmium-oracle-build.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
note "building memcached $VERSION (${CONFIGURE_ARGS[*]}) in $WORK"
start=$SECONDS
tar xzf "$TARBALL" -C "$WORK"
cd "$WORK/memcached-$VERSION"
# The release source has no git history: write the version autogen.sh would
# have asked git for.
sed -i "s/^perl version.pl\$/echo 'm4_define([VERSION_NUMBER], [$VERSION])' > version.m4/" autogen.sh
grep -q "VERSION_NUMBER], \[$VERSION\]" autogen.sh || { echo "autogen.sh: version line not patched" >&2; exit 1; }
log="$WORK/build.log"
run() {
    if ! "$@" >>"$log" 2>&1; then
        echo "failed: $*; the last lines of the build log:" >&2
        tail -n 40 "$log" >&2
        exit 1
    fi
}
run ./autogen.sh
run ./configure "${CONFIGURE_ARGS[@]}"
run make -j"$(nproc)" memcached
[ "$(./memcached -V)" = "memcached $VERSION" ] || { echo "built binary says: $(./memcached -V)" >&2; exit 1; }

mkdir -p "$DEST"
cp memcached "$BIN.tmp"
mv -f "$BIN.tmp" "$BIN"
printf '%s\n' "$BUILD_INFO" >"$DEST/BUILD-INFO"
note "built $BIN ($("$BIN" -V)) in $((SECONDS - start))s"
echo "$BIN"
