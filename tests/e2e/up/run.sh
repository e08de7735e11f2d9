#!/usr/bin/env bash
# `glmc up` end to end, with this machine as its own worker through a real ssh: an sshd the test
# starts on a free loopback port (its own host key, authorized key and config), a CPU TP 2 plan of
# the tiny fixture. Up, a request, status, restarts whose settings fail their checks (the old
# server keeps serving), a good restart, logs, stop, --foreground ending when rank 1 dies, and
# the refusals of checks that can be staged here. Usage: run.sh GLMC FIXTURES_DIR WORK_DIR
set -euo pipefail
glmc=$1 fixtures=$2 work=$3
model="$fixtures/glm53-tiny"
fail() {
  echo "up e2e: FAIL: $*" >&2
  exit 1
}
# Nothing is skipped: a missing tool fails the test, naming what to install.
[[ -x /usr/sbin/sshd ]] || fail "/usr/sbin/sshd is missing: run scripts/install-deps.sh (openssh-server)"
for tool in ssh ssh-keygen curl python3; do
  command -v "$tool" >/dev/null || fail "$tool is missing: run scripts/install-deps.sh"
done
rm -rf "$work"
mkdir -p "$work"
work=$(cd "$work" && pwd)

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# ---------------------------------------------------------------- sshd
ssh-keygen -q -t ed25519 -N '' -f "$work/host_key"
ssh-keygen -q -t ed25519 -N '' -f "$work/client_key"
cp "$work/client_key.pub" "$work/authorized_keys"
chmod 600 "$work/authorized_keys" "$work/client_key"
ssh_port=$(free_port)
cat >"$work/sshd_config" <<CONFIG
ListenAddress 127.0.0.1
HostKey $work/host_key
AuthorizedKeysFile $work/authorized_keys
PidFile $work/sshd.pid
StrictModes no
UsePAM no
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
AllowUsers $(id -un)
CONFIG
# sshd started as root wants its privilege-separation directory.
if [[ $(id -u) == 0 ]]; then
  mkdir -p /run/sshd
  chmod 755 /run/sshd
fi
/usr/sbin/sshd -D -e -f "$work/sshd_config" -p "$ssh_port" 2>"$work/sshd.log" &
sshd_pid=$!
listener_pid=
foreground_pid=
cleanup() {
  "$glmc" up stop >/dev/null 2>&1 || true
  for pid in $foreground_pid $listener_pid $sshd_pid; do
    kill "$pid" 2>/dev/null || true
  done
  wait 2>/dev/null || true
}
trap cleanup EXIT

export GLMC_SSH_OPTIONS="-F /dev/null -p $ssh_port -i $work/client_key -o IdentitiesOnly=yes -o UserKnownHostsFile=$work/known_hosts -o StrictHostKeyChecking=accept-new -o LogLevel=ERROR"
ready=0
for _ in $(seq 100); do
  # shellcheck disable=SC2086
  if ssh -o BatchMode=yes $GLMC_SSH_OPTIONS localhost true 2>/dev/null; then
    ready=1
    break
  fi
  kill -0 "$sshd_pid" 2>/dev/null || fail "sshd exited: $(cat "$work/sshd.log")"
  sleep 0.1
done
((ready)) || fail "sshd on port $ssh_port does not take the test's key: $(cat "$work/sshd.log")"

# ---------------------------------------------------------------- settings: file, then environment
api_port=$(free_port)
tp_port=$(free_port)
cat >"$work/glmc-up.env" <<SETTINGS
# the test's settings file: the environment overrides it
GLMC_WORKER=localhost
GLMC_TARGET=cpu
GLMC_PORT=1
GLMC_SERVED_NAME="tiny-up"
SETTINGS
export GLMC_ENV_FILE="$work/glmc-up.env"
export GLMC_PORT=$api_port GLMC_TP_PORT=$tp_port
export GLMC_RUN_DIR="$work/run" GLMC_WORKER_RUN_DIR="$work/worker-run" GLMC_CACHE_DIR="$work/cache"
export GLMC_MEMORY_RESERVE=64M GLMC_WAIT_TIMEOUT=120 GLMC_TP_TIMEOUT=60

chat() {
  curl -sf --max-time 60 "http://127.0.0.1:$api_port/v1/chat/completions" \
    -H 'Content-Type: application/json' \
    -d '{"model": "tiny-up", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4}'
}
# Whether a process runs (a zombie not yet reaped has ended).
alive() { [[ -e /proc/$1 ]] && ! grep -q ') Z ' "/proc/$1/stat" 2>/dev/null; }
state() { python3 -c "import json,sys; print(json.load(open('$work/run/up.json'))[sys.argv[1]])" "$1"; }

# ---------------------------------------------------------------- up
"$glmc" up "$model" >"$work/up.out" 2>&1 || fail "glmc up failed: $(cat "$work/up.out")"
grep -q "^LIVE http://127.0.0.1:$api_port/v1 model 'tiny-up'" "$work/up.out" ||
  fail "no LIVE line with the endpoint and the served name: $(cat "$work/up.out")"
grep -q "tokens through both ranks" "$work/up.out" || fail "no smoke reply: $(cat "$work/up.out")"
grep -q "rank 1 | .*joined rank 0" "$work/up.out" || fail "rank 1's log not relayed: $(cat "$work/up.out")"
grep -q "rank 0 | .*ready on" "$work/up.out" || fail "rank 0's log not relayed: $(cat "$work/up.out")"
[[ $(stat -c %a "$work/run/head.secret") == 600 && $(stat -c %a "$work/worker-run/worker.secret") == 600 ]] ||
  fail "the TP secret files are not mode 0600"
chat | grep -q '"choices"' || fail "a chat request to the live server failed"
head_pid=$(state head_pid)
worker_pid=$(state worker_pid)
alive "$head_pid" && alive "$worker_pid" || fail "rank 0 ($head_pid) or rank 1 ($worker_pid) is not running"

"$glmc" up status >"$work/status.out" || fail "glmc up status failed: $(cat "$work/status.out")"
grep -q "running: http://127.0.0.1:$api_port/v1 model 'tiny-up'" "$work/status.out" ||
  fail "status does not say running: $(cat "$work/status.out")"
"$glmc" up "$model" >"$work/again.out" 2>&1 || fail "a second glmc up failed"
grep -q "already running" "$work/again.out" || fail "a second up did not say it runs: $(cat "$work/again.out")"

# ---------------------------------------------------------------- restarts whose checks fail
expect_refused() { # NAME PATTERN glmc-up-args...
  local name=$1 pattern=$2
  shift 2
  if "$glmc" up "$@" >"$work/$name.out" 2>&1; then
    fail "$name: glmc up $* succeeded: $(cat "$work/$name.out")"
  fi
  grep -q -- "$pattern" "$work/$name.out" || fail "$name: no '$pattern' in: $(cat "$work/$name.out")"
}
expect_refused restart-memory "Not even the smallest window fits" \
  restart --memory-reserve 1000T
grep -q "keeps serving" "$work/restart-memory.out" || fail "the refused restart does not say the server keeps serving"
chat | grep -q '"choices"' || fail "the server stopped serving after a refused restart"
# A pool of 4e8 tokens (128 GB a rank at the tiny model's 320 bytes a token) does not fit here: the
# refusal names the pool that does.
expect_refused restart-pool "The largest pool that fits is --pool-tokens [0-9]" restart --pool-tokens 400000000
expect_refused restart-compile "glmc compile refused these settings" restart --max-context 999999999
expect_refused restart-value "must be an integer" restart --smoke-tokens many
chat | grep -q '"choices"' || fail "the server stopped serving after refused restarts"
[[ $(state head_pid) == "$head_pid" ]] || fail "a refused restart replaced rank 0"
alive "$head_pid" && alive "$worker_pid" || fail "a refused restart stopped a rank"

# Refusals of checks that can be staged on one machine (the restart path: nothing changes).
expect_refused worker-checkpoint "does not exist" restart --worker-model "$work/no-such-checkpoint"
expect_refused no-ssh "cannot ssh to localhost" restart --ssh-options "-F /dev/null -p 1 -o ConnectTimeout=2"
busy_port=$(free_port)
python3 -c 'import socket,sys,time; s=socket.socket(); s.bind(("0.0.0.0", int(sys.argv[1]))); s.listen(); print("listening", flush=True); time.sleep(600)' \
  "$busy_port" >"$work/listener.out" &
listener_pid=$!
for _ in $(seq 50); do
  grep -q listening "$work/listener.out" && break
  sleep 0.1
done
expect_refused port-busy "port $busy_port (--port (GLMC_PORT)) is already in use" restart --port "$busy_port"
kill "$listener_pid"
listener_pid=
chat | grep -q '"choices"' || fail "the server stopped serving after refused restarts"

# ---------------------------------------------------------------- a good restart, logs, stop
"$glmc" up restart --smoke-tokens 3 >"$work/restart.out" 2>&1 || fail "glmc up restart failed: $(cat "$work/restart.out")"
grep -q "^LIVE " "$work/restart.out" || fail "the restart printed no LIVE line: $(cat "$work/restart.out")"
alive "$head_pid" && fail "the restart left the old rank 0 ($head_pid) running"
chat | grep -q '"choices"' || fail "a request after the restart failed"
"$glmc" up logs --lines 200 | grep -q "ready on" || fail "glmc up logs lacks rank 0's ready line"
"$glmc" up logs worker --lines 200 | grep -q "joined rank 0" || fail "glmc up logs worker lacks rank 1's join"
head_pid=$(state head_pid)
worker_pid=$(state worker_pid)
"$glmc" up stop >"$work/stop.out" || fail "glmc up stop failed: $(cat "$work/stop.out")"
alive "$head_pid" && fail "rank 0 ($head_pid) still runs after stop"
alive "$worker_pid" && fail "rank 1 ($worker_pid) still runs after stop"
chat >/dev/null && fail "the API still answers after stop"
if "$glmc" up status >"$work/status-stopped.out"; then fail "status after stop exited 0"; fi
grep -q "not running" "$work/status-stopped.out" || fail "status after stop: $(cat "$work/status-stopped.out")"

# ---------------------------------------------------------------- --foreground ends with a rank
"$glmc" up "$model" --foreground >"$work/foreground.out" 2>&1 &
foreground_pid=$!
for _ in $(seq 600); do
  grep -q "^LIVE " "$work/foreground.out" && break
  kill -0 "$foreground_pid" 2>/dev/null || fail "glmc up --foreground exited early: $(cat "$work/foreground.out")"
  sleep 0.1
done
grep -q "^LIVE " "$work/foreground.out" || fail "glmc up --foreground never went live"
head_pid=$(state head_pid)
kill -KILL "$(state worker_pid)"
code=0
wait "$foreground_pid" || code=$?
foreground_pid=
[[ $code == 1 ]] || fail "--foreground exited $code after rank 1 died, not 1: $(cat "$work/foreground.out")"
grep -q "rank 1 on localhost exited: stopping rank 0" "$work/foreground.out" || fail "no word of rank 1's end"
alive "$head_pid" && fail "--foreground left rank 0 running after rank 1 died"
echo "up e2e: all passed"
