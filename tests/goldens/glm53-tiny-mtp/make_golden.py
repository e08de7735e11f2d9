"""Reference outputs of GLM-5.3's MTP head (reference/glm53_arch.md §2.8) for a synthetic checkpoint.

transformers has no MTP head (it drops layers.<num_hidden_layers>.*), so this script assembles it from
transformers' own glm5_next modules and nothing else: a deep copy of a DSA layer's attention (with its
indexer) and of an MoE layer's MLP, loaded with the MTP layer's tensors, and the model's own RMSNorm,
embedding and lm_head. The glue is §2.8:

    e  = embed_tokens[token after position p]   (zero at position 0, as vLLM does)
    u  = cat(enorm(e), hnorm(h_p)) @ eh_proj^T  (h_p: the trunk's output after its final norm)
    u  = u + attn(input_layernorm(u));  u = u + mlp(post_attention_layernorm(u))
    logits = lm_head(shared_head.norm(u))

The token after position p is the next input token inside the sequence and the trunk's greedy token
after the last one, which is what a prefill and then serial greedy decode steps give the head.

Usage (where transformers >= 5.16 with glm5_next and torch are installed; no GPU needed):
    glmc synth --preset tiny --seed 7 -o CKPT        # on a machine with glmc
    python3 make_golden.py CKPT OUTDIR
"""
import copy, hashlib, json, os, sys

import torch
from safetensors.torch import load_file, save_file

ckpt, out = sys.argv[1], sys.argv[2]
PROMPT_TOKENS, DECODE_STEPS, PROMPT_SEED = 40, 8, 1234
os.makedirs(out, exist_ok=True)
torch.set_grad_enabled(False)

# torch.topk leaves the order of equal values unspecified, and the indexer's ReLU makes exact ties
# (pools every head scores zero) common on random weights: the goldens break them toward the lower
# index, the rule glmc serves with (glm53_arch.md §6.9), so that a tie at the top-k boundary picks
# the same pools on both sides.
_topk = torch.topk
def lower_index_first_topk(x, k, dim=-1, largest=True, sorted=True, *, out=None):
    assert out is None
    values, indices = torch.sort(x, dim=dim, descending=largest, stable=True)
    return torch.return_types.topk((values.narrow(dim, 0, k), indices.narrow(dim, 0, k)))
torch.topk = lower_index_first_topk
torch.Tensor.topk = lambda self, k, dim=-1, largest=True, sorted=True: \
    lower_index_first_topk(self, k, dim, largest, sorted)

import transformers
from transformers import Glm5NextForConditionalGeneration

model = Glm5NextForConditionalGeneration.from_pretrained(
    ckpt, dtype=torch.float32, attn_implementation="eager").eval()
lm = model.model.language_model
cfg = lm.config
L = cfg.num_hidden_layers
sd = load_file(os.path.join(ckpt, "model.safetensors"))
p = f"model.language_model.layers.{L}."
assert any(k.startswith(p) for k in sd), f"the checkpoint has no MTP layer ({p}*)"
mtp = {k[len(p):]: v.float() for k, v in sd.items() if k.startswith(p)}
print("MTP tensors:", len(mtp))

# The prompt: deterministic ids below the special tokens.
g = torch.Generator().manual_seed(PROMPT_SEED)
special = min(cfg.eos_token_id) if isinstance(cfg.eos_token_id, list) else cfg.eos_token_id
prompt = torch.randint(0, special, (PROMPT_TOKENS,), generator=g).tolist()

def trunk(ids):
    """The trunk's logits and its output after the final norm, [S, V] and [S, H]."""
    x = torch.tensor([ids])
    logits = model(input_ids=x, use_cache=False).logits[0]
    o = lm(input_ids=x, use_cache=False)
    h = o.last_hidden_state[0]
    if h.dim() == 3:  # the residual streams, before their mean and the final norm
        h = lm.norm(h.mean(1))
    err = ((model.lm_head(h) - logits).norm() / logits.norm()).item()
    assert err < 1e-5, f"lm_head(h) is not the model's logits ({err})"
    return logits, h

# Greedy continuation, recomputed from scratch each step (no cache: the plain causal forward).
ids = list(prompt)
for _ in range(DECODE_STEPS):
    logits, _ = trunk(ids)
    ids.append(int(logits[-1].argmax()))
logits, h = trunk(ids)
greedy = ids[PROMPT_TOKENS:] + [int(logits[-1].argmax())]
nxt = ids[1:] + [greedy[-1]]
S = len(ids)

# The MTP layer from the modules of the last layer that has DSA attention and an MoE.
layer = max(i for i in range(L)
            if "sparse" in cfg.layer_types[i] and cfg.mlp_layer_types[i] == "sparse")
captured = {}
def capture(module, args, kwargs):
    captured["args"], captured["kwargs"] = args, dict(kwargs)
hook = lm.layers[layer].self_attn.register_forward_pre_hook(capture, with_kwargs=True)
trunk(ids)
hook.remove()

def load(module, prefix):
    state = {}
    for k, v in module.state_dict().items():
        name = prefix + k
        if k.endswith("experts.gate_up_proj"):
            E = v.shape[0]
            w = torch.stack([torch.cat([mtp[f"mlp.experts.{e}.gate_proj.weight"],
                                        mtp[f"mlp.experts.{e}.up_proj.weight"]], 0) for e in range(E)])
        elif k.endswith("experts.down_proj"):
            w = torch.stack([mtp[f"mlp.experts.{e}.down_proj.weight"] for e in range(v.shape[0])])
        else:
            assert name in mtp, f"no MTP tensor for {type(module).__name__}.{k} (looked for {name})"
            w = mtp[name]
        if w.shape != v.shape and w.dim() == 3 and w.transpose(1, 2).shape == v.shape:
            w = w.transpose(1, 2)
        assert w.shape == v.shape, f"{name}: checkpoint {tuple(w.shape)}, module {tuple(v.shape)}"
        state[k] = w.to(v.dtype)
    module.load_state_dict(state, strict=True)
    return module

attn = load(copy.deepcopy(lm.layers[layer].self_attn), "self_attn.")
mlp = load(copy.deepcopy(lm.layers[layer].mlp), "mlp.")
def norm(name):
    n = copy.deepcopy(lm.norm)
    n.weight.copy_(mtp[name])
    return n
enorm, hnorm = norm("enorm.weight"), norm("hnorm.weight")
attn_norm, ffn_norm = norm("input_layernorm.weight"), norm("post_attention_layernorm.weight")
head_norm = norm("shared_head.norm.weight")
eh = torch.nn.Linear(2 * cfg.hidden_size, cfg.hidden_size, bias=False)
eh.weight.copy_(mtp["eh_proj.weight"])

selections = []
for m in attn.modules():
    if type(m).__name__ == "Glm5NextTextIndexer":
        m.register_forward_hook(lambda mod, a, o: selections.append(o.detach().clone()))

e = lm.embed_tokens(torch.tensor([nxt]))
e[:, 0] = 0  # vLLM's convention at position 0 (glm53_arch.md §6.14)
u = eh(torch.cat([enorm(e), hnorm(h[None])], -1))
args, kwargs = captured["args"], dict(captured["kwargs"])
if args:
    y = attn(attn_norm(u), *args[1:], **kwargs)
else:
    kwargs["hidden_states"] = attn_norm(u)
    y = attn(**kwargs)
u = u + (y[0] if isinstance(y, tuple) else y)
u = u + mlp(ffn_norm(u))
mtp_logits = model.lm_head(head_norm(u))[0]
assert len(selections) == 1, f"the MTP indexer ran {len(selections)} times"

gold = {
    "input_ids": torch.tensor(prompt, dtype=torch.int32),
    "greedy_tokens": torch.tensor(greedy, dtype=torch.int32),
    "prefill_logits": logits[:PROMPT_TOKENS].contiguous(),
    "hidden": h.contiguous(),
    "mtp_logits": mtp_logits.contiguous(),
    "mtp_topk": selections[0][0].to(torch.int32).contiguous(),
}
save_file(gold, os.path.join(out, "golden.safetensors"))
def sha256(name):
    return hashlib.sha256(open(os.path.join(ckpt, name), "rb").read()).hexdigest()
json.dump({"generator": "tests/goldens/glm53-tiny-mtp/make_golden.py",
           "checkpoint": "glmc synth --preset tiny --seed 7",
           "model.safetensors sha256": sha256("model.safetensors"),
           "config.json sha256": sha256("config.json"),
           "transformers": transformers.__version__, "torch": torch.__version__,
           "prompt_tokens": PROMPT_TOKENS, "decode_steps": DECODE_STEPS, "layer_modules_from": layer,
           "mtp_agrees_with_trunk": sum(int(mtp_logits[i].argmax()) == nxt[i + 1] for i in range(S - 1)),
           "rows": S, "topk_ties": "lower index first"},
          open(os.path.join(out, "golden.json"), "w"), indent=1)
print("greedy", greedy, "MTP argmax == the trunk's next", json.load(open(os.path.join(out, "golden.json")))["mtp_agrees_with_trunk"], "of", S - 1)
