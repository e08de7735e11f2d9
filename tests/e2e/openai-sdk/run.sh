#!/usr/bin/env bash
# Starts two glmc serve instances on the tiny fixture's CPU plans at free ports (the main one, and
# a one-slot one with a one-request waiting queue for the overload test), runs the SDK tests
# (chat and completions, then the Responses API), stops them.
# Usage: run.sh GLMC FIXTURES_DIR WORK_DIR
set -euo pipefail
glmc=$1 fixtures=$2 work=$3
here=$(cd "$(dirname "$0")" && pwd)
if [[ ! -d "$here/node_modules/openai" || ! -d "$here/node_modules/ajv" ]]; then
  echo "openai SDK or ajv missing: run scripts/install-deps.sh (npm ci in tests/e2e/openai-sdk)" >&2
  exit 1
fi
mkdir -p "$work"
servers=()
trap 'for s in "${servers[@]}"; do kill -TERM $s 2>/dev/null; done; wait 2>/dev/null || true' EXIT

# serve NAME MAX_SEQS [serve options...]: compiles a plan, serves it, and sets $port once ready.
serve() {
  local name=$1 seqs=$2
  shift 2
  "$glmc" compile "$fixtures/glm53-tiny" -o "$work/$name.glmp" --target cpu --precision f32 \
    --tp 1 --max-seqs "$seqs" --max-context 4096 2>/dev/null
  # Emptied here, not only by the redirection below: that one runs in the background job, which
  # may start after the loop below has read the last run's ready line (and its stale port).
  : > "$work/$name.log"
  "$glmc" serve "$work/$name.glmp" --model "$fixtures/glm53-tiny" --port 0 --served-name tiny \
    --api-key e2e-key "$@" > "$work/$name.log" 2>&1 &
  local pid=$!
  servers+=($pid)
  port=
  # The ready line names the port; give the server at most 30 s to print it.
  for _ in $(seq 300); do
    port=$(sed -n 's|.*ready on http://127.0.0.1:\([0-9]*\).*|\1|p' "$work/$name.log")
    [[ -n "$port" ]] && return 0
    kill -0 $pid 2>/dev/null || { cat "$work/$name.log" >&2; exit 1; }
    sleep 0.1
  done
  echo "glmc serve did not become ready" >&2
  cat "$work/$name.log" >&2
  exit 1
}

serve main 4
main=$port
serve busy 1 --max-waiting 1
busy=$port
status=0
node "$here/sdk.test.mjs" "http://127.0.0.1:$main/v1" tiny \
  "$fixtures/../reference/openai-openapi.yaml" e2e-key "http://127.0.0.1:$busy/v1" || status=1
node "$here/responses.test.mjs" "http://127.0.0.1:$main/v1" tiny \
  "$fixtures/../reference/openai-openapi.yaml" e2e-key || status=1
exit $status
