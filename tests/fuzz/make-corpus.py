#!/usr/bin/env python3
"""Writes the seed corpora of tests/fuzz/corpus/<target>/ from the fixtures and the unit tests.

Usage: tests/fuzz/make-corpus.py [--fixtures DIR]

Seeds are small, real-world-shaped inputs: pieces of the glm53-tiny checkpoint, its configs, a
cut-down tokenizer.json, the templates of tests/unit/JinjaTest.cpp and the fixture's own, requests
shaped as clients send them. The plan
targets' seeds are compiled by scripts/fuzz.sh at each run, never committed.
Re-running it rewrites the same files; fuzzers add their own finds to the corpora they are given,
not to these directories (scripts/fuzz.sh copies them first).
"""
import argparse
import json
import pathlib
import re
import struct
import subprocess
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[2]
CORPUS = ROOT / "tests" / "fuzz" / "corpus"


def write(target, name, data):
    d = CORPUS / target
    d.mkdir(parents=True, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    (d / name).write_bytes(data)


def safetensors(tensors, metadata=None, pad=True):
    """tensors: [(name, dtype, shape, bytes)] -> a .safetensors file."""
    header, blob = {}, b""
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dtype, shape, data in tensors:
        header[name] = {"dtype": dtype, "shape": shape,
                        "data_offsets": [len(blob), len(blob) + len(data)]}
        blob += data
    text = json.dumps(header, separators=(",", ":")).encode()
    if pad:  # the Hub's writer pads the header to 8 bytes with spaces
        text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + blob


def safetensors_seeds(tiny):
    raw = (tiny / "model.safetensors").read_bytes()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]

    def tensor(name):
        e = header[name]
        b, f = e["data_offsets"]
        return (name, e["dtype"], e["shape"], data[b:f])

    small = sorted((k for k in header if k != "__metadata__"),
                   key=lambda k: header[k]["data_offsets"][1] - header[k]["data_offsets"][0])
    picked = [k for k in small if ".layers.3." in k][:10]
    write("safetensors_header", "tiny_layer3",
          safetensors([tensor(k) for k in picked], header.get("__metadata__")))
    write("safetensors_header", "tiny_norms_unpadded",
          safetensors([tensor(k) for k in small[:4]], None, pad=False))
    every = [("t." + d, d, [2], bytes(range(2 * s))) for d, s in
             [("F32", 4), ("BF16", 2), ("F16", 2), ("F8_E4M3", 1), ("I8", 1), ("I16", 2),
              ("I32", 4), ("I64", 8), ("U8", 1), ("BOOL", 1)]]
    write("safetensors_header", "every_dtype", safetensors(every, {"format": "pt"}))
    write("safetensors_header", "empty_and_scalar",
          safetensors([("e", "F32", [0, 3], b""), ("s", "F32", [], b"\0\0\x80\x3f"),
                       ("experts.7.down_proj.weight", "BF16", [2, 2], bytes(8))]))
    write("safetensors_header", "empty_header", safetensors([]))


def config_seeds(fixtures):
    tiny = json.loads((fixtures / "glm53-tiny" / "config.json").read_text())
    flash = json.loads((fixtures / "glm53-flash" / "config.json").read_text())
    write("glm53_config", "tiny.json", json.dumps(tiny, indent=1))
    write("glm53_config", "flash.json", json.dumps(flash, indent=1))
    bare = dict(tiny["text_config"])
    write("glm53_config", "tiny_text_only.json", json.dumps(bare, indent=1))
    fp8 = json.loads(json.dumps(tiny))
    fp8["quantization_config"] = {"quant_method": "fp8", "fmt": "e4m3",
                                  "weight_block_size": [128, 128], "activation_scheme": "dynamic"}
    write("glm53_config", "tiny_fp8.json", json.dumps(fp8, indent=1))
    exl3 = json.loads(json.dumps(bare))
    exl3["quantization_config"] = {"quant_method": "exl3", "version": "0.0.18", "bits": 4.0,
                                   "head_bits": 6, "codebook": "mcg", "out_scales": "auto"}
    exl3["num_nextn_predict_layers"] = 1
    write("glm53_config", "tiny_exl3_mtp.json", json.dumps(exl3, indent=1))


def tokenizer_seeds(tiny):
    full = json.loads((tiny / "tokenizer.json").read_text())
    write("tokenizer_json", "tiny_full.json", json.dumps(full, ensure_ascii=False))
    cut = json.loads(json.dumps(full))
    vocab = cut["model"]["vocab"]
    keep = {k: v for k, v in vocab.items() if v < 256}
    merges = []
    for m in full["model"]["merges"]:
        a, b = m if isinstance(m, list) else m.split(" ")
        if a in keep and b in keep and len(merges) < 64:
            merges.append([a, b])
            keep.setdefault(a + b, 256 + len(merges))
    cut["model"]["vocab"] = keep
    cut["model"]["merges"] = merges
    # Added tokens not in the vocab are numbered from its size on, as tokenizers numbers them.
    cut["added_tokens"] = [dict(t, id=len(keep) + i)
                           for i, t in enumerate(full["added_tokens"][:12])]
    write("tokenizer_json", "cut.json", json.dumps(cut, ensure_ascii=False, indent=1))
    old = json.loads(json.dumps(cut))
    old["model"]["merges"] = [a + " " + b for a, b in merges]
    old["pre_tokenizer"] = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                            "use_regex": True}
    old["post_processor"] = {"type": "Sequence", "processors": [
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
        {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "[gMASK]", "type_id": 0}},
                                                   {"Sequence": {"id": "A", "type_id": 0}}],
         "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
         "special_tokens": {"[gMASK]": {"id": "[gMASK]", "ids": [len(keep) + 2], "tokens": ["[gMASK]"]}}}]}
    write("tokenizer_json", "cut_string_merges_bytelevel.json",
          json.dumps(old, ensure_ascii=False, indent=1))


def c_string_literals(text):
    """The C++ string literals of `text`, in order, adjacent ones joined, decoded to bytes."""
    out, i, current, last_end = [], 0, None, -1
    while i < len(text):
        c = text[i]
        if c == '"':
            j, buf = i + 1, bytearray()
            while text[j] != '"':
                if text[j] == "\\":
                    e = text[j + 1]
                    simple = {"n": 10, "t": 9, "r": 13, "\\": 92, '"': 34, "'": 39, "0": 0,
                              "a": 7, "b": 8, "f": 12, "v": 11, "?": 63}
                    if e == "x":
                        m = re.match(r"[0-9a-fA-F]+", text[j + 2:])
                        buf.append(int(m.group(0), 16) & 0xFF)
                        j += 2 + len(m.group(0))
                        continue
                    if e in "01234567" and re.match(r"[0-7]{2,3}", text[j + 1:]):
                        m = re.match(r"[0-7]{1,3}", text[j + 1:])
                        buf.append(int(m.group(0), 8) & 0xFF)
                        j += 1 + len(m.group(0))
                        continue
                    buf.append(simple[e])
                    j += 2
                else:
                    buf += text[j].encode()
                    j += 1
            if current is not None and text[last_end:i].strip() == "":
                current += buf
            else:
                if current is not None:
                    out.append(bytes(current))
                current = buf
            last_end = j + 1
            i = j + 1
        elif c == "/" and text[i + 1] == "/":
            i = text.index("\n", i)
        else:
            i += 1
    if current is not None:
        out.append(bytes(current))
    return out


def chat_template_seeds(tiny):
    write("chat_template", "glm53_chat_template.jinja", (tiny / "chat_template.jinja").read_bytes())
    src = (ROOT / "tests" / "unit" / "JinjaTest.cpp").read_text()
    start = src.index("const RenderCase kRenderCases[] = {")
    body = src[start:src.index("\n};", start)]
    # Entries are {name, source, variables, expected}: every fourth literal, from the second.
    literals = c_string_literals(body)
    seen = set()
    for k in range(0, len(literals) - 3, 4):
        name, source = literals[k].decode(), literals[k + 1]
        if source in seen or len(source) > 2000:
            continue
        seen.add(source)
        write("chat_template", "jinja_" + re.sub(r"[^A-Za-z0-9_]", "_", name), source)


def tool_call_seeds():
    calls = [
        b"\0Let me check.<tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value>"
        b"<arg_key>days</arg_key><arg_value>2</arg_value></tool_call>",
        b"\0\n<tool_call>get_weather\n<arg_key>units</arg_key>\n<arg_value>[\"c\", \"f\"]</arg_value>\n"
        b"<arg_key>verbose</arg_key><arg_value>true</arg_value><arg_key>ratio</arg_key>"
        b"<arg_value>null</arg_value></tool_call>\n<tool_call>search_docs<arg_key>q</arg_key>"
        b"<arg_value>caf\xc3\xa9 \xc2\xabx\xc2\xbb</arg_value></tool_call>",
        b"\0<tool_call>get_weather<arg_key>opts</arg_key><arg_value>{\"a\": [1, {\"b\": 2}]}"
        b"</arg_value><arg_key>mode</arg_key><arg_value>1</arg_value></tool_call>tail <tool_call>cut",
        b"\0text only, a < b > c, </tool_call> stray <tool_call></tool_call><tool_call>x y</tool_call>",
        b"\x02<tool_call>f<arg_key>k</arg_key><arg_value>v</arg_value><arg_key>k</arg_key>"
        b"<arg_value>w</arg_value></tool_call>",
        b"\x01[{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": {\"type\": "
        b"\"object\", \"properties\": {\"n\": {\"type\": \"integer\"}, \"x\": {\"type\": [\"number\", "
        b"\"string\"]}, \"o\": {\"oneOf\": [{\"type\": \"object\"}, {\"type\": \"array\"}]}}}}}]\0"
        b"<tool_call>f<arg_key>n</arg_key><arg_value>3.0</arg_value><arg_key>x</arg_key>"
        b"<arg_value>1e3</arg_value><arg_key>o</arg_key><arg_value>[1]</arg_value></tool_call>",
    ]
    for i, c in enumerate(calls):
        write("tool_call_parser", f"calls_{i}", c)


def openai_seeds():
    tools = [{"type": "function", "function": {"name": "get_weather", "description": "Weather",
              "parameters": {"type": "object", "properties": {"city": {"type": "string"},
                             "days": {"type": "integer"}}, "required": ["city"]}}}]
    chat = [
        {"model": "glm-5.3", "messages": [{"role": "user", "content": "Hello!"}]},
        {"model": "glm-5.3", "stream": True, "stream_options": {"include_usage": True},
         "messages": [{"role": "system", "content": "Be terse."},
                      {"role": "user", "content": "What's the weather in Paris?"},
                      {"role": "assistant", "content": None, "tool_calls": [
                          {"id": "call_0", "type": "function", "function": {
                              "name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
                      {"role": "tool", "tool_call_id": "call_0", "content": "18C"}],
         "tools": tools, "tool_choice": "auto", "temperature": 0.7, "top_p": 0.9, "top_k": 40,
         "min_p": 0.05, "max_tokens": 64, "seed": 42, "stop": ["\n\n", "</s>"], "n": 2,
         "logprobs": True, "top_logprobs": 3, "presence_penalty": 0.5, "frequency_penalty": 0.1,
         "repetition_penalty": 1.1, "logit_bias": {"100": -100, "7": 5}},
        {"model": "glm53-tiny", "messages": [
            {"role": "user", "content": [{"type": "text", "text": "Describe "},
                                         {"type": "text", "text": "this."}]},
            {"role": "assistant", "content": "ok", "reasoning_content": "think"},
            {"role": "user", "content": "日本語 🙂"}],
         "reasoning_effort": "low", "chat_template_kwargs": {"enable_thinking": False},
         "max_completion_tokens": 16, "response_format": {"type": "text"}, "user": "u1"},
        {"model": "glm-5.3", "prompt": "Once upon a time", "max_tokens": 8, "echo": True,
         "logprobs": 2, "stream": True, "min_tokens": 2, "ignore_eos": True},
        {"model": "glm-5.3", "prompt": [990, 992, 994, 701, 349], "max_tokens": 4, "echo": True,
         "temperature": 0},
        {"model": "other", "messages": []},
    ]
    for i, r in enumerate(chat):
        write("openai_request", f"request_{i}.json", json.dumps(r, ensure_ascii=False))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fixtures", default=str(ROOT.parent / "shared" / "fixtures"))
    args = ap.parse_args()
    fixtures = pathlib.Path(args.fixtures)
    tiny = fixtures / "glm53-tiny"
    safetensors_seeds(tiny)
    config_seeds(fixtures)
    tokenizer_seeds(tiny)
    chat_template_seeds(tiny)
    tool_call_seeds()
    openai_seeds()


if __name__ == "__main__":
    main()
