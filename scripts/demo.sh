#!/usr/bin/env bash
# The main job: build glmc, synthesize the tiny demo model, describe it, compile it for the CPU
# backend and serve it with the OpenAI API on port 8888 (Ctrl-C stops it).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh
model=build/demo/glm53-tiny
build/bin/glmc synth --preset tiny --seed 1 -o "$model"
build/bin/glmc info "$model"
build/bin/glmc compile "$model" -o build/demo/glm53-tiny.glmp --target cpu --precision f32 --tp 1
exec build/bin/glmc serve build/demo/glm53-tiny.glmp --model "$model" --port "${PORT:-8888}" \
  --served-name glm53-tiny
