#!/usr/bin/env bash
# Prepares what a GPU machine needs to run the GPU tests and benchmarks, in .cache/gpu (ignored by
# git), for a machine that has the NVIDIA driver and CUDA 13's NVRTC but none of this project's
# build dependencies (LLVM, cpp-httplib): glmc itself links libLLVM, so plans are compiled here.
#
#   scripts/gpu-bundle.sh [ARCH]        ARCH: sm_90a (default) or sm_121a
#
# It builds the GPU test executables, a compiler-less glmc (build-runtime/), the tiny fixture's
# test plans (what tests/gpu/CudaEngine*Test compile, named as they expect), the fixture, the
# shared libraries glmc needs that such a machine lacks, and the NVRTC cache. On the GPU machine,
# from the repository root:
#
#   export GLM_FIXTURES_DIR=$PWD/.cache/gpu/fixtures GLM_TEST_PLANS=$PWD/.cache/gpu/plans \
#          GLM_KERNEL_CACHE=$PWD/.cache/gpu/kernels LD_LIBRARY_PATH=$PWD/.cache/gpu/lib \
#          GLM_GOLDENS_DIR=$PWD/tests/goldens \
#          GLM_GLMC=$PWD/.cache/gpu/glmc   # the worker processes lockstep_gpu_test starts
#   for t in build/tests/bin/*gpu_test; do $t; done
#   .cache/gpu/glmc bench .cache/gpu/plans/bench_bf16.glmp --model .cache/gpu/fixtures/glm53-tiny
set -euo pipefail
cd "$(dirname "$0")/.."
arch="${1:-sm_90a}"
out="${GLM_GPU_BUNDLE:-.cache/gpu}" # another folder keeps a bundle being run elsewhere intact
fixture=../shared/fixtures/glm53-tiny
rm -rf "$out" && mkdir -p "$out/plans" "$out/lib" "$out/fixtures"
export GLM_KERNEL_CACHE="$PWD/$out/kernels"

scripts/build.sh
ninja -C build $(ninja -C build -t targets all | sed -n 's/^\([a-z_]*gpu_test\):.*/\1/p') glm-kernel-bench
if [ ! -f build-runtime/build.ninja ]; then
  cmake -G Ninja -S . -B build-runtime -DGLM_BUILD_COMPILER=OFF -DGLM_BUILD_TESTS=OFF > /dev/null
fi
ninja -C build-runtime glmc
cp build-runtime/bin/glmc "$out/glmc"

# The plans tests/gpu/CudaEngineTest.cpp compiles, under the names it reads from GLM_TEST_PLANS.
# Weights as stored (a GPU bf16 plan's default quantizes them); the quantized plans follow.
common=(--tp 1 --max-seqs 2 --max-context 2048 --decode 1x1,2x1 --prefill-logits all --dense bf16 --head bf16)
build/bin/glmc compile "$fixture" -o "$out/plans/cpu_f32.glmp" "${common[@]}" --target cpu --precision f32 --prefill 1152
build/bin/glmc compile "$fixture" -o "$out/plans/gpu_f32.glmp" "${common[@]}" --target "$arch" --precision f32 --prefill 1152
build/bin/glmc compile "$fixture" -o "$out/plans/gpu_f32_prefill64.glmp" "${common[@]}" --target "$arch" --precision f32 --prefill 64
build/bin/glmc compile "$fixture" -o "$out/plans/gpu_bf16.glmp" "${common[@]}" --target "$arch" --precision bf16 --prefill 1152
build/bin/glmc compile "$fixture" -o "$out/plans/gpu_bf16_unfused.glmp" "${common[@]}" --target "$arch" --precision bf16 --prefill 1152 --fuse-mhc off --fuse-mhc-norm off --fuse-kda-norm off --fuse-linear-add off
# What glmc serve runs: each prefill chunk's last row alone (--prefill-logits last, the default).
serving=(--tp 1 --max-seqs 2 --max-context 2048 --decode 1x1,2x1 --prefill 64 --target "$arch" --dense bf16 --head bf16)
build/bin/glmc compile "$fixture" -o "$out/plans/gpu_f32_serving.glmp" "${serving[@]}" --precision f32
build/bin/glmc compile "$fixture" -o "$out/plans/gpu_bf16_serving.glmp" "${serving[@]}" --precision bf16
# The verify-window plans of tests/gpu/CudaEngineVerifyTest.cpp (the EXL3 one after its checkpoint).
verify=(--tp 1 --max-seqs 2 --max-context 2048 --decode 1x1,2x1,1x2,1x4,1x8,1x16,2x2,2x8 --prefill 64 --target "$arch")
build/bin/glmc compile "$fixture" -o "$out/plans/gpu_f32_verify.glmp" "${verify[@]}" --precision f32 --dense bf16 --head bf16
build/bin/glmc compile "$fixture" -o "$out/plans/gpu_bf16_verify.glmp" "${verify[@]}" --precision bf16 --dense bf16 --head bf16
build/bin/glmc compile "$fixture" -o "$out/plans/gpu_bf16_q4_verify.glmp" "${verify[@]}" --precision bf16
build/bin/glmc compile "$fixture" -o "$out/plans/gpu_bf16_pool_verify.glmp" --tp 1 --max-seqs 2 --max-context 256 --pool-tokens 256 \
  --target "$arch" --precision bf16 --dense bf16 --head bf16 --decode 1x1,2x1,1x8,2x4 --prefill 64
# The tensor-parallel plans tests/gpu/CudaEngineTpTest.cpp reads (every rank a thread on one GPU).
tp=(--max-seqs 2 --max-context 2048 --decode 1x1,2x1 --prefill 1152 --prefill-logits all --target "$arch" --dense bf16 --head bf16)
build/bin/glmc compile "$fixture" -o "$out/plans/gpu_f32_tp2.glmp" "${tp[@]}" --tp 2 --precision f32
build/bin/glmc compile "$fixture" -o "$out/plans/gpu_f32_tp4.glmp" "${tp[@]}" --tp 4 --precision f32
build/bin/glmc compile "$fixture" -o "$out/plans/gpu_bf16_tp2.glmp" "${tp[@]}" --tp 2 --precision bf16
# The quantized plans and the FP8 checkpoint of tests/gpu/CudaEngineTest.cpp's CudaEngineQuantized.
quant=(--tp 1 --max-seqs 2 --max-context 2048 --decode 1x1,2x1 --prefill 1152 --prefill-logits all)
build/bin/glmc compile "$fixture" -o "$out/plans/cpu_f32_q4.glmp" "${quant[@]}" --target cpu --precision f32 --dense q4 --head fp8
build/bin/glmc compile "$fixture" -o "$out/plans/gpu_f32_q4.glmp" "${quant[@]}" --target "$arch" --precision f32 --dense q4 --head fp8
build/bin/glmc compile "$fixture" -o "$out/plans/gpu_bf16_q4.glmp" "${quant[@]}" --target "$arch" --precision bf16 --dense q4 --head fp8
build/bin/glmc synth --preset tiny --dense fp8 -o "$out/fixtures/glm53-tiny-fp8" > /dev/null 2>&1
build/bin/glmc compile "$out/fixtures/glm53-tiny-fp8" -o "$out/plans/cpu_f32_fp8ck.glmp" "${quant[@]}" --target cpu --precision f32
build/bin/glmc compile "$out/fixtures/glm53-tiny-fp8" -o "$out/plans/gpu_f32_fp8ck.glmp" "${quant[@]}" --target "$arch" --precision f32
# A plan for `glmc bench`: the default programs (decode 1 and 4 sequences, 512-row prefill).
build/bin/glmc compile "$fixture" -o "$out/plans/bench_bf16.glmp" --target "$arch" --tp 1 --max-seqs 4 --max-context 8192

# The tiny fixture for the engine tests, and both configs the kernel tests read their sizes from.
cp -r "$fixture" ../shared/fixtures/glm53-flash "$out/fixtures/"
chmod -R u+w "$out/fixtures"
# The tiny fixture quantized to EXL3 and its dequantized twin, and their plans (CudaEngineExl3).
build/bin/glmc quantize "$fixture" -o "$out/fixtures/glm53-tiny-exl3" --bits 4 --codebook mcg > /dev/null
build/bin/glmc dequantize "$out/fixtures/glm53-tiny-exl3" -o "$out/fixtures/glm53-tiny-exl3-dense" > /dev/null
for model in exl3 exl3-dense; do
  for precision in f32 bf16; do
    build/bin/glmc compile "$out/fixtures/glm53-tiny-$model" -o "$out/plans/${model//-/_}_$precision.glmp" \
      "${common[@]}" --target "$arch" --precision "$precision" --prefill 1152
  done
done
build/bin/glmc compile "$out/fixtures/glm53-tiny-exl3" -o "$out/plans/exl3_bf16_verify.glmp" "${verify[@]}" --precision bf16
# A tiny checkpoint with an MTP layer (the goldens' of tests/goldens/glm53-tiny-mtp) and its verify plans.
build/bin/glmc synth --preset tiny --seed 7 -o "$out/fixtures/glm53-tiny-mtp" > /dev/null 2>&1
build/bin/glmc compile "$out/fixtures/glm53-tiny-mtp" -o "$out/plans/mtp_f32_verify.glmp" "${verify[@]}" --precision f32 --dense bf16 --head bf16
build/bin/glmc compile "$out/fixtures/glm53-tiny-mtp" -o "$out/plans/mtp_bf16_verify.glmp" "${verify[@]}" --precision bf16
golden=(--tp 1 --max-seqs 2 --max-context 2048 --decode 1x1 --target "$arch" --precision f32 --dense bf16 --head bf16)
build/bin/glmc compile "$out/fixtures/glm53-tiny-mtp" -o "$out/plans/mtp_f32_golden.glmp" "${golden[@]}" --prefill 64
build/bin/glmc compile "$out/fixtures/glm53-tiny-mtp" -o "$out/plans/mtp_f32_golden_c16.glmp" "${golden[@]}" --prefill 16
# The shared libraries the compiler-less glmc needs beyond the C library, OpenSSL and zlib.
for lib in $(ldd "$out/glmc" | awk '/=> \// {print $3}' | grep -E 'httplib|brotli|pcre2'); do
  cp -L "$lib" "$out/lib/"
done
du -sh "$out"
