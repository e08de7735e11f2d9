"""How far Hugging Face's own bf16 run of a checkpoint is from its f32 run, on the golden cases'
prompts: per case, the share of prefill positions whose top-1 token agrees and the per-row relative
L2 error of the logits (median, p90, max). This is the yardstick for a bf16 plan's agreement with
its f32 plan (tests/gpu/CudaEngineTest): a faithful bf16 implementation cannot be expected to agree
more often than the reference's own bf16 run does.

Needs torch with a GPU (or the CPU, slowly) and transformers with glm5_next.
Usage: hf-bf16-agreement.py MODEL_DIR   (MODEL_DIR holds golden.safetensors and golden.json)"""
import json
import sys

import torch
from safetensors.torch import load_file
from transformers import Glm5NextForConditionalGeneration

model_dir = sys.argv[1]
device = "cuda" if torch.cuda.is_available() else "cpu"
torch.backends.cuda.matmul.allow_tf32 = False  # f32 means f32
golden = load_file(f"{model_dir}/golden.safetensors")
cases = [c["name"] for c in json.load(open(f"{model_dir}/golden.json"))["cases"]]


def load(dtype):
    return Glm5NextForConditionalGeneration.from_pretrained(
        model_dir, dtype=dtype, attn_implementation="eager").eval().to(device)


models = {"f32": load(torch.float32), "bf16": load(torch.bfloat16)}
total = agree = 0
for name in cases:
    ids = golden[f"{name}.input_ids"].long()[None].to(device)
    with torch.no_grad():
        logits = {k: m(input_ids=ids).logits[0].float() for k, m in models.items()}
    f32, bf16 = logits["f32"], logits["bf16"]
    gold = golden[f"{name}.prefill_logits"].to(device)
    same = (f32.argmax(-1) == bf16.argmax(-1))
    err = ((bf16 - f32).norm(dim=-1) / f32.norm(dim=-1)).sort().values
    gold_err = ((f32 - gold).norm(dim=-1) / gold.norm(dim=-1)).max()
    n = ids.shape[1]
    total += n
    agree += int(same.sum())
    print(f"{name}: HF bf16 top-1 agrees with HF f32 on {int(same.sum())} of {n} positions; "
          f"row error median {err[n // 2]:.3g}, p90 {err[n * 9 // 10]:.3g}, max {err[-1]:.3g} "
          f"(HF f32 on {device} vs golden: max row error {gold_err:.2g})")
print(f"all: {agree} of {total} = {agree / total:.1%}")
