#!/usr/bin/env bash
# Serves the tiny fixture's CPU plan with glmc serve at a free port, runs the Anthropic SDK tests
# against /v1/messages, stops it. Usage: run.sh GLMC FIXTURES_DIR WORK_DIR
set -euo pipefail
glmc=$1 fixtures=$2 work=$3
here=$(cd "$(dirname "$0")" && pwd)
if [[ ! -d "$here/node_modules/@anthropic-ai/sdk" ]]; then
  echo "@anthropic-ai/sdk missing: run scripts/install-deps.sh (npm ci in tests/e2e/anthropic-sdk)" >&2
  exit 1
fi
mkdir -p "$work"
server=
trap '[[ -n "$server" ]] && kill -TERM $server 2>/dev/null; wait 2>/dev/null || true' EXIT
"$glmc" compile "$fixtures/glm53-tiny" -o "$work/anthropic.glmp" --target cpu --precision f32 \
  --tp 1 --max-seqs 4 --max-context 4096 2>/dev/null
: > "$work/anthropic.log"
"$glmc" serve "$work/anthropic.glmp" --model "$fixtures/glm53-tiny" --port 0 --served-name tiny \
  --api-key e2e-key > "$work/anthropic.log" 2>&1 &
server=$!
port=
# The ready line names the port; give the server at most 30 s to print it.
for _ in $(seq 300); do
  port=$(sed -n 's|.*ready on http://127.0.0.1:\([0-9]*\).*|\1|p' "$work/anthropic.log")
  [[ -n "$port" ]] && break
  kill -0 $server 2>/dev/null || { cat "$work/anthropic.log" >&2; exit 1; }
  sleep 0.1
done
if [[ -z "$port" ]]; then
  echo "glmc serve did not become ready" >&2
  cat "$work/anthropic.log" >&2
  exit 1
fi
node "$here/sdk.test.mjs" "http://127.0.0.1:$port" tiny e2e-key
