#!/usr/bin/env bash
# Builds glmc and runs the tests CI runs: unit and lit (gpu and slow need a GPU or time: -L gpu).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh
ctest --test-dir build --output-on-failure -j "$(nproc)" -LE 'gpu|slow'
