#!/usr/bin/env bash
# The main job, until the server lands: build glmc, synthesize the tiny demo model, describe it.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh
build/bin/glmc synth --preset tiny --seed 1 -o build/demo/glm53-tiny
build/bin/glmc info build/demo/glm53-tiny
