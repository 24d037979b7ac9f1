#!/usr/bin/env bash
# CI's container step (called by .ci/run before the tests): install and start a Docker engine, make
# the Debian base from the host's mirror (no registry needed; reused when present), build the `cpu`
# and `cpu-nocc` images from docker/lock-cpu.txt, run the lab's smoke profile inside each with the
# results folder mounted (in `cpu` its toolchain and Inductor-on-CPU experiments), compile one function with Inductor in each, check each image (packages
# against the lock, apt caches and sources, bare run, unwritable /out: `python -m lab image-check`),
# resolve the cuda image's lock (no GPU here), and build against a base that cannot be pulled.
# tests/e2e/test_docker_results.py then asserts on what lands in $LAB_DOCKER_RESULTS.
#
#   LAB_DOCKER_RESULTS=DIR .ci/docker.sh     (default DIR: build/docker-ci)
set -euo pipefail
cd "$(dirname "$0")/.."
RESULTS="${LAB_DOCKER_RESULTS:-$PWD/build/docker-ci}"
PY="${PYTHON:-python3}"
SUDO=""
[ "$(id -u)" = 0 ] || SUDO="sudo"
T0=$SECONDS
LAST=$SECONDS
mkdir -p "$RESULTS"
: > "$RESULTS/steps.tsv"
step() {  # record how long the previous step took, announce the next
    if [ -n "${STEP:-}" ]; then printf '%s\t%s\n' "$STEP" "$((SECONDS - LAST))" >> "$RESULTS/steps.tsv"; fi
    STEP="$1"; LAST=$SECONDS
    echo "== [$((SECONDS - T0)) s] $1"
}

step "install docker.io and debootstrap"
if ! command -v dockerd >/dev/null 2>&1 || ! command -v debootstrap >/dev/null 2>&1; then
    $SUDO apt-get update -qq
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io debootstrap >/dev/null
fi

step "start dockerd"
if ! docker info >/dev/null 2>&1; then
    $SUDO sh -c 'nohup dockerd > /tmp/lab-dockerd.log 2>&1 &'
    for _ in $(seq 60); do docker info >/dev/null 2>&1 && break; sleep 1; done
    docker info >/dev/null 2>&1 || { echo "dockerd did not start:"; tail -20 /tmp/lab-dockerd.log; exit 1; }
fi

step "base image (debootstrap from the host's apt mirror, reused if present)"
$SUDO "$PY" -m lab base-image

step "build cpu and cpu-nocc (windows-msvc is listed NOT_RUN on Linux)"
"$PY" -m lab images cpu cpu-nocc windows-msvc --report "$RESULTS/images.json"

# graph-lab:cpu runs the smoke profile's toolchain and Inductor-on-CPU experiments (the catalogue's ids
# that need `inductor` or `cxx`: what the image is for; the rest of the smoke profile runs in the image
# in tests/e2e/test_fleet_slurm.py); graph-lab:cpu-nocc runs all of it (most of it NOT_RUN at once, and
# nothing may FAILED for want of a compiler).
INDUCTOR_IDS="$("$PY" -c "from lab.contract.catalogue import CATALOGUE; print(','.join(s.id for s in CATALOGUE if {'inductor', 'cxx'} & set(s.needs)))")"
for variant in cpu cpu-nocc; do
    step "smoke profile in graph-lab:$variant"
    rm -rf "${RESULTS:?}/$variant"
    only=()
    [ "$variant" = cpu ] && only=(--only "toolchain,$INDUCTOR_IDS")
    "$PY" -m lab image-run --variant "$variant" --profile smoke "${only[@]}" --require-container --out "$RESULTS/$variant"
    step "inductor probe in graph-lab:$variant"
    docker run --rm --network none -v "$RESULTS/$variant:/out" "graph-lab:$variant" \
        inductor-probe --out /out/inductor_probe.json
    step "image check of graph-lab:$variant"
    "$PY" -m lab image-check "$variant" --out "$RESULTS/$variant/image-check.json" \
        || echo "image-check found problems in graph-lab:$variant (the tests report them)"
done

step "cuda image: its lock resolved from metadata with --require-hashes (no multi-GB download)"
"$PY" -m lab images cuda-resolve --report "$RESULTS/images-cuda.json" \
    || echo "cuda-resolve failed: see $RESULTS/images-cuda.json (the tests report it)"

step "a base image that cannot be pulled: NOT_RUN base_image_unavailable, pointing at base-image"
"$PY" -m lab images cpu-nocc --base-image graph-lab-nowhere:none --report "$RESULTS/images-no-base.json" || true

step "done"
echo "docker CI: $((SECONDS - T0)) s in all; per step:"
cat "$RESULTS/steps.tsv"
