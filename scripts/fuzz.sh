#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz (clang, ASan + UBSan), replays every saved crash in
# tests/fuzz/regressions/<target>/, then fuzzes each target for a bounded time over its seed
# corpus. Fails if a regression input or a fuzz run crashes. docs/fuzzing.md has the details.
#
#   scripts/fuzz.sh [options] [TARGET...]     (no TARGET: every target the build has)
#     --ci             what scripts/test.sh runs: every target but plan_engine (whose build is
#                      the CPU engine and kernels: minutes), 8 s each, two at a time
#     --time S         seconds per target (default 60)     --runs N   at most N inputs per target
#     --jobs J         targets fuzzed at once (default 1)
#     --keep-going     long runs: libFuzzer's fork mode (-fork=1), which records every crash,
#                      timeout and OOM under fuzz-work/<target>/ and fuzzes on
#     --replay-only    only replay tests/fuzz/regressions/ (what ctest's fuzz_regressions.* run)
#     --no-replay      skip the replay             --no-build   use the binaries as they are
#     --build-dir D    (default build-fuzz; configured once: -O1, ASan + UBSan, no MLIR)
#     --bin-dir D      where the binaries are (default <build-dir>/fuzz)
#     -- ARGS          passed to every libFuzzer run (e.g. -- -dict=... -only_ascii=1)
#
# New corpus entries go to <build-dir>/fuzz-work/<target>/corpus (the seeds in tests/fuzz/corpus
# stay as they are); crashes to <build-dir>/fuzz-work/<target>/crash-*. A crash is reproduced with
# `<bin-dir>/<target> FILE`, and becomes a regression test by copying FILE to
# tests/fuzz/regressions/<target>/<short-name>.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"

ALL_TARGETS=(safetensors_header glm53_config tokenizer_json chat_template tool_call_parser
             openai_request plan_file plan_engine)
ci=0 keep_going=0 time_s=60 runs="" jobs=1 replay=1 fuzz=1 build=1 build_dir="" bin_dir=""
targets=() extra=()
while (($#)); do
  case "$1" in
    --ci) ci=1 ;;
    --time) time_s="$2"; shift ;;
    --runs) runs="$2"; shift ;;
    --jobs) jobs="$2"; shift ;;
    --keep-going) keep_going=1 ;;
    --replay-only) fuzz=0 build=0 ;;
    --no-replay) replay=0 ;;
    --no-build) build=0 ;;
    --build-dir) build_dir="$2"; shift ;;
    --bin-dir) bin_dir="$2"; shift ;;
    --) shift; extra=("$@"); break ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    -*) echo "fuzz.sh: unknown option $1" >&2; exit 2 ;;
    *) targets+=("$1") ;;
  esac
  shift
done
named_targets=${#targets[@]}
if ((ci)); then
  time_s=8 jobs=2
  ((${#targets[@]})) || targets=("${ALL_TARGETS[@]/plan_engine}")
fi
build_dir="${build_dir:-build-fuzz}"
bin_dir="${bin_dir:-$build_dir/fuzz}"
mapfile -t targets < <(printf '%s\n' "${targets[@]}" | sed '/^$/d')

if ((build)); then
  if [[ ! -f "$build_dir/CMakeCache.txt" ]]; then
    # The fuzz build needs neither MLIR nor gtest: only the libraries the targets link. -O1 with
    # line tables: -O0 compiles in half the time but runs the targets 3-30x slower; no NDEBUG, so
    # assertions hold too.
    cmake -S . -B "$build_dir" -G Ninja -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
      -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -gline-tables-only" \
      "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O1 -gline-tables-only" \
      -DGLM_BUILD_COMPILER=OFF -DGLM_BUILD_TESTS=OFF \
      -DGLM_SANITIZE=address,undefined -DGLM_FUZZ=ON >/dev/null
  fi
  if ((${#targets[@]})); then
    cmake --build "$build_dir" -j "${GLM_FUZZ_BUILD_JOBS:-$(nproc)}" --target "${targets[@]}"
  else
    cmake --build "$build_dir" -j "${GLM_FUZZ_BUILD_JOBS:-$(nproc)}" --target glm_fuzz
  fi
fi
if ((${#targets[@]} == 0)); then
  for t in "${ALL_TARGETS[@]}"; do
    [[ -x "$bin_dir/$t" ]] && targets+=("$t")
  done
fi

export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=0}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
fixtures="${GLM_FIXTURES_DIR:-$root/../shared/fixtures}"

# Per-target libFuzzer options: plans are ~250 KB and their mutants grow; the engine runs a model.
seeds_of() {
  case "$1" in
  plan_file | plan_engine) echo "$plan_seeds" ;;
  *) echo "tests/fuzz/corpus/$1" ;;
  esac
}
options_of() {
  case "$1" in
    plan_file) echo "-max_len=1048576 -timeout=10" ;;
    plan_engine) echo "-max_len=1048576 -timeout=30" ;;
    # A render may run to the interpreter's step budget: a second in release, tens under ASan.
    chat_template) echo "-timeout=60" ;;
    *) echo "-timeout=10" ;;
  esac
  # A dictionary of the format's tokens, where there is one.
  [[ -f "$root/tests/fuzz/dicts/$1.dict" ]] && echo "-dict=$root/tests/fuzz/dicts/$1.dict"
  return 0
}

# The first line that says what went wrong, and the frame of our code nearest the top.
why() {
  local log="$1" what line frame=""
  what="$(grep -m1 -E 'ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer)|runtime error:|contract broken|terminate called|Assertion .* failed|died of signal' "$log" || true)"
  line="$(grep -E '^ +#[0-9]+ 0x[0-9a-f]+ in .* '"$root"'/[^ ]+:[0-9]+' "$log" |
          grep -v -E ' '"$root"'/tests/fuzz/' | head -1 || true)"
  if [[ -n "$line" ]]; then
    frame="$(sed -E 's/.* in ([^(]+).*/\1/' <<<"$line") $(grep -oE '[^ ]+$' <<<"$line" |
             sed -E "s|^$root/||; s/:[0-9]+$//")"
  fi
  echo "${what:-exit $2}${frame:+  [at $frame]}"
}

status=0

# --- Replay: each saved input once, reported one by one -------------------------------------
if ((replay)); then
  fails=0 total=0
  # Every target's regressions unless targets were named: plan_engine's too in CI, which does not
  # build that target (they go through glmc generate then).
  replay_targets=("${targets[@]}")
  ((named_targets)) || replay_targets=("${ALL_TARGETS[@]}")
  for t in "${replay_targets[@]}"; do
    dir="tests/fuzz/regressions/$t"
    [[ -d "$dir" ]] || continue
    for f in "$dir"/*; do
      [[ -f "$f" && "$(basename "$f")" != README* ]] || continue
      total=$((total + 1))
      log="$(mktemp)"
      if [[ -x "$bin_dir/$t" ]]; then
        # shellcheck disable=SC2046
        if "$bin_dir/$t" $(options_of "$t") -runs=1 "$f" >"$log" 2>&1; then rc=0; else rc=$?; fi
      elif [[ "$t" == plan_engine && -x build/bin/glmc ]]; then
        # Without the engine fuzzer (CI does not build it): the same plan through `glmc generate`
        # of the main build, where a signal is the failure and a refusal is a pass.
        echo "990 992 994 701 349" >"$log.ids"
        if build/bin/glmc generate "$f" --model "$fixtures/glm53-tiny" --prompt-ids "$log.ids" \
             --max-tokens 2 --greedy >"$log" 2>&1; then rc=0; else rc=$?; fi
        rm -f "$log.ids"
        if ((rc > 128)); then
          echo "glmc generate died of signal $((rc - 128))" >>"$log"
        else
          rc=0
        fi
      else
        echo "fuzz.sh: replay  SKIP $f (no $bin_dir/$t)"
        total=$((total - 1))
        rm -f "$log"
        continue
      fi
      if ((rc == 0)); then
        echo "fuzz.sh: replay  ok   $f"
      else
        echo "fuzz.sh: replay  FAIL $f: $(why "$log" "$rc")"
        fails=$((fails + 1))
      fi
      rm -f "$log"
    done
  done
  echo "fuzz.sh: replay: $((total - fails)) of $total regression inputs pass"
  ((fails == 0)) || status=1
fi

# --- Fuzz: each target for a bounded time over a copy of its corpus -------------------------
# The plan seeds are compiled here, by the main build's glmc (the fuzz build has no compiler),
# so that they always have the plan format of the code being fuzzed; they are never committed.
plan_seeds="$build_dir/fuzz-seeds/plan_file"
if ((fuzz)); then
  mkdir -p "$plan_seeds"
  if [[ -x build/bin/glmc ]]; then
    for tp in 1 2; do
      build/bin/glmc compile "$fixtures/glm53-tiny" -o "$plan_seeds/cpu_f32_tp$tp.glmp" \
        --target cpu --precision f32 --tp "$tp" --max-seqs 1 --max-context 256 --decode 1x1 \
        --prefill 16 >/dev/null 2>&1 || { echo "fuzz.sh: glmc compile of the plan seeds failed"; exit 1; }
    done
    # A plan with the MTP head (its ops, its DraftIds slot), from a synthetic checkpoint: the tiny
    # fixture has no MTP layer.
    mtp_checkpoint="$build_dir/fuzz-seeds/mtp-checkpoint"
    { build/bin/glmc synth --preset tiny -o "$mtp_checkpoint" &&
      build/bin/glmc compile "$mtp_checkpoint" -o "$plan_seeds/cpu_f32_mtp.glmp" --target cpu \
        --precision f32 --tp 1 --max-seqs 1 --max-context 256 --decode 1x1,1x2 --prefill 16
    } >/dev/null 2>&1 || { echo "fuzz.sh: the MTP plan seed failed"; exit 1; }
  else
    echo "fuzz.sh: no build/bin/glmc (scripts/build.sh): the plan targets start from no seed"
  fi
  summary="$(mktemp)"
  run_one() {
    local t="$1" work="$build_dir/fuzz-work/$1" log rc
    mkdir -p "$work/corpus"
    log="$work/last.log"
    local limits=(-max_total_time="$time_s")
    [[ -n "$runs" ]] && limits+=(-runs="$runs")
    ((keep_going)) && limits+=(-fork=1 -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1)
    local start=$SECONDS
    # shellcheck disable=SC2046
    if "$bin_dir/$t" $(options_of "$t") "${limits[@]}" -rss_limit_mb=2560 -print_final_stats=1 \
         -artifact_prefix="$work/" "${extra[@]}" "$work/corpus" \
         "$(seeds_of "$t")" >"$log" 2>&1; then rc=0; else rc=$?; fi
    local execs crashes
    execs="$(grep -m1 -o 'stat::number_of_executed_units: [0-9]*' "$log" | awk '{print $2}' || true)"
    if ((keep_going)); then
      # Fork mode prints "#EXECS: cov: ... oom/timeout/crash: O/T/C ..." lines instead.
      execs="$( (grep -E '^#[0-9]+: cov:' "$log" || true) | tail -1 | sed -E 's/^#([0-9]+):.*/\1/')"
      crashes="$( (grep -E '^#[0-9]+: cov:' "$log" || true) | tail -1 |
                 sed -E 's|.*oom/timeout/crash: ([0-9/]+).*|\1|')"
      printf '%-20s %10s execs %5ss  oom/timeout/crash %s  (%s)\n' "$t" "${execs:-?}" \
        $((SECONDS - start)) "${crashes:-?}" "$work" >>"$summary"
      [[ "${crashes:-0/0/0}" == 0/0/0 ]] || echo "$t CRASH" >>"$summary.crashed"
      return 0
    fi
    if ((rc == 0)); then
      printf '%-20s %10s execs %5ss  ok\n' "$t" "${execs:-?}" $((SECONDS - start)) >>"$summary"
    else
      printf '%-20s %10s execs %5ss  CRASH %s: %s\n' "$t" "${execs:-?}" $((SECONDS - start)) \
        "$( (grep -m1 -o "artifact_prefix=[^;]*; Test unit written to [^ ]*" "$log" || true) |
           sed 's/.*written to //')" "$(why "$log" "$rc")" >>"$summary"
    fi
  }
  running=0
  for t in "${targets[@]}"; do
    if [[ ! -x "$bin_dir/$t" ]]; then
      echo "fuzz.sh: no $bin_dir/$t" >&2
      status=1
      continue
    fi
    run_one "$t" &
    running=$((running + 1))
    if ((running >= jobs)); then
      wait -n || true
      running=$((running - 1))
    fi
  done
  wait || true
  echo "fuzz.sh: fuzzing (${time_s}s a target${runs:+, at most $runs runs}):"
  sed 's/^/  /' "$summary"
  if grep -q CRASH "$summary" || [[ -f "$summary.crashed" ]]; then
    status=1
  fi
  rm -f "$summary" "$summary.crashed"
fi
exit "$status"
