#!/usr/bin/env bash
# Builds glmc and runs the tests CI runs: unit and lit (gpu and slow need a GPU or time: -L gpu),
# then the fuzz targets for a bounded time (scripts/fuzz.sh --ci).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh
ctest --test-dir build --output-on-failure -j "$(nproc)" -LE 'gpu|slow'
# The libFuzzer targets (clang, ASan + UBSan): saved crashes replayed, then 8 s of fuzzing each.
scripts/fuzz.sh --ci
