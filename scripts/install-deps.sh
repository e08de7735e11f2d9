#!/usr/bin/env bash
# Installs every Debian package glmc needs to build and test; the one place they are named.
# Idempotent: packages already present are left as they are. Run as root (or with sudo).
set -euo pipefail

# The CUDA 13 toolkit (nvcc, NVRTC, NCCL headers) is not a Debian package: it is used where it is
# found at /usr/local/cuda, and the runtime reaches the driver through dlopen, so machines without
# it still build glmc and run every CPU test.
PACKAGES=(
  # toolchain
  g++ cmake ninja-build pkg-config python3
  # MLIR/LLVM 22 (bookworm-security); libmlir-22-dev alone lacks mlir-tblgen, LLVMConfig.cmake
  # and FileCheck/lit, hence all four. They conflict with the -19 packages.
  libmlir-22-dev mlir-22-tools llvm-22-dev llvm-22-tools
  # formatting: 22 knows InsertBraces, the machine's default 14 does not
  clang-format-22
  # plan file schema (flatc generates at build time)
  flatbuffers-compiler libflatbuffers-dev
  # server: HTTP, JSON, the tokenizer's pre-tokenizer regex
  libcpp-httplib-dev nlohmann-json3-dev libpcre2-dev
  # RDMA transport for tensor parallelism
  libibverbs-dev
  # tests (openssh-server: `glmc up`'s end-to-end test runs its own sshd as the worker's ssh)
  libgtest-dev libgmock-dev curl openssh-server openssh-client
  # fuzzing (scripts/fuzz.sh): clang with libFuzzer and the sanitizer runtimes (a recommendation
  # of clang, so named here), llvm-symbolizer for readable stacks
  clang libclang-rt-dev llvm
)

if [[ $(id -u) -ne 0 ]]; then
  SUDO=sudo
else
  SUDO=
fi

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q '^install ok installed$'; then
    missing+=("$p")
  fi
done

# The end-to-end tests drive the server with the official OpenAI SDK on Node (20 on the machine
# image; Debian's nodejs otherwise).
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  missing+=(nodejs npm)
fi

if ((${#missing[@]} == 0)); then
  echo "install-deps: all ${#PACKAGES[@]} packages present"
else
  echo "install-deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# The SDKs at the versions their package-lock.json pins, into tests/e2e/*/node_modules: the
# OpenAI one, and Anthropic's for /v1/messages.
sdk="$(dirname "$0")/../tests/e2e/openai-sdk"
if [[ ! -d "$sdk/node_modules/openai" ]]; then
  npm ci --prefix "$sdk" --no-audit --no-fund --loglevel=error
fi
sdk="$(dirname "$0")/../tests/e2e/anthropic-sdk"
if [[ ! -d "$sdk/node_modules/@anthropic-ai/sdk" ]]; then
  npm ci --prefix "$sdk" --no-audit --no-fund --loglevel=error
fi
