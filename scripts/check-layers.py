#!/usr/bin/env python3
"""Checks that the project's layers only point down (DESIGN.md §1): every #include "a/b/..." of
every source file must go to a folder its layer may use, and the folders must form no cycle.
Exits non-zero, naming each offending include, otherwise prints a one-line summary.

  scripts/check-layers.py [ROOT]
"""
import os
import re
import sys

# Each layer, by path prefix (the longest match wins), and the layers it may include. A layer
# may always include itself. tools/ and tests/ may include anything.
LAYERS = {
    "base": [],
    "kernels": ["base"],
    "runtime/schema": ["base"],
    "runtime/api": ["base"],
    "runtime/cuda": ["base"],
    "runtime/plan": ["base", "kernels", "runtime/schema"],  # kernels: the DenseFormats.h sizes
    "runtime/weights": ["base", "kernels", "runtime/schema"],
    "runtime/comm": ["base", "kernels", "runtime/cuda"],
    "runtime/engine": ["base", "kernels", "runtime/schema", "runtime/api", "runtime/cuda",
                       "runtime/plan", "runtime/weights", "runtime/comm"],
    "server/chat": ["base"],
    "server/tokenizer": ["base"],
    # The protocol validates requests against the engine API's limits (top_logprobs, logit_bias).
    "server/openai": ["base", "runtime/api"],
    # Anthropic's Messages API translates into the OpenAI protocol's chat requests.
    "server/anthropic": ["base", "runtime/api", "server/openai"],
    # The grammar engine compiles schemas to automata and token masks over the vocabulary's bytes.
    "server/grammar": ["base", "runtime/api"],
    "server/http": ["base", "runtime/api", "server/chat", "server/tokenizer", "server/openai",
                    "server/anthropic", "server/grammar"],
    "ir": ["mlir", "llvm"],
    "models": ["base", "kernels", "runtime/weights", "ir", "mlir", "llvm"],
    # The compiler links nothing of runtime/ but the schema and the weights reader it needs for
    # formats (DESIGN.md §1): not the engines, the plan reader, the communicators or CUDA.
    "compiler": ["base", "kernels", "runtime/schema", "runtime/weights", "ir", "models", "mlir",
                 "llvm"],
    "tools": None,
    "tests": None,
}
SOURCES = (".h", ".cpp", ".cuh", ".inc")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def layer_of(path):
    best = None
    for layer in LAYERS:
        if path == layer or path.startswith(layer + "/"):
            if best is None or len(layer) > len(best):
                best = layer
    return best


def folder_of(path):
    parts = path.split("/")
    return "/".join(parts[:2]) if len(parts) > 2 else parts[0]


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else
                           os.path.join(os.path.dirname(__file__), ".."))
    errors, edges, files = [], {}, 0
    for top in LAYERS:
        base = os.path.join(root, top)
        if not os.path.isdir(base) or "/" in top and layer_of(top) != top:
            continue
        for dirpath, dirnames, filenames in os.walk(base):
            dirnames[:] = [d for d in dirnames if d not in ("node_modules",)]
            for name in filenames:
                if not name.endswith(SOURCES):
                    continue
                path = os.path.relpath(os.path.join(dirpath, name), root)
                src = layer_of(path)
                if src is None:
                    continue
                files += 1
                with open(os.path.join(root, path), errors="replace") as f:
                    for number, line in enumerate(f, 1):
                        m = INCLUDE.match(line)
                        if not m or "/" not in m.group(1):
                            continue
                        target = m.group(1)
                        dst = layer_of(target) or target.split("/")[0]
                        if folder_of(path) != folder_of(target):
                            edges.setdefault(folder_of(path), set()).add(folder_of(target))
                        allowed = LAYERS[src]
                        if allowed is None or dst == src or dst in allowed:
                            continue
                        errors.append(f"{path}:{number}: {src} includes {target} ({dst}), "
                                      f"which is not below it")
    # No cycle between folders (a cycle inside one layer is as much a tangle as one across).
    colour, stack = {}, []

    def visit(node):
        colour[node] = 1
        stack.append(node)
        for nxt in sorted(edges.get(node, ())):
            if colour.get(nxt) == 1:
                cycle = stack[stack.index(nxt):] + [nxt]
                errors.append("folder cycle: " + " -> ".join(cycle))
            elif colour.get(nxt) is None:
                visit(nxt)
        stack.pop()
        colour[node] = 2

    for node in sorted(edges):
        if colour.get(node) is None:
            visit(node)
    for e in errors:
        print(e)
    if errors:
        print(f"check-layers: {len(errors)} upward include(s) or cycle(s)")
        return 1
    print(f"check-layers: {files} files, every include points down, no folder cycle")
    return 0


if __name__ == "__main__":
    sys.exit(main())
