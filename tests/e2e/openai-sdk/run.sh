#!/usr/bin/env bash
# Starts glmc serve on the tiny fixture's CPU plan at a free port, runs the SDK tests, stops it.
# Usage: run.sh GLMC FIXTURES_DIR WORK_DIR
set -euo pipefail
glmc=$1 fixtures=$2 work=$3
here=$(cd "$(dirname "$0")" && pwd)
if [[ ! -d "$here/node_modules/openai" || ! -d "$here/node_modules/ajv" ]]; then
  echo "openai SDK or ajv missing: run scripts/install-deps.sh (npm ci in tests/e2e/openai-sdk)" >&2
  exit 1
fi
mkdir -p "$work"
"$glmc" compile "$fixtures/glm53-tiny" -o "$work/tiny.glmp" --target cpu --precision f32 --tp 1 \
  --max-seqs 4 --max-context 4096 2>/dev/null
"$glmc" serve "$work/tiny.glmp" --model "$fixtures/glm53-tiny" --port 0 --served-name tiny --api-key e2e-key \
  > "$work/serve.log" 2>&1 &
server=$!
trap 'kill -TERM $server 2>/dev/null; wait $server 2>/dev/null || true' EXIT
# The ready line names the port; give the server at most 30 s to print it.
for _ in $(seq 300); do
  port=$(sed -n 's|.*ready on http://127.0.0.1:\([0-9]*\).*|\1|p' "$work/serve.log")
  [[ -n "$port" ]] && break
  kill -0 $server 2>/dev/null || { cat "$work/serve.log" >&2; exit 1; }
  sleep 0.1
done
[[ -n "${port:-}" ]] || { echo "glmc serve did not become ready" >&2; cat "$work/serve.log" >&2; exit 1; }
node "$here/sdk.test.mjs" "http://127.0.0.1:$port/v1" tiny \
  "$fixtures/../reference/openai-openapi.yaml" e2e-key
