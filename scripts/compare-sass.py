"""Whether two cubins hold the same machine code: every kernel's .text section, its .nv.info and
.nv.constant0 contents and its shared-memory size. A refactor of a kernel whose cubins (from
`build/bin/glm-nvrtc-compile ARCH SOURCE NAME -o OUT.cubin`, before and after) compare equal
changes nothing the GPU runs, which can be checked on a machine without a GPU.

Usage: compare-sass.py BEFORE.cubin AFTER.cubin   (exit 0: identical; 1: the differing sections)"""
import struct
import sys


def sections(path):
    data = open(path, 'rb').read()
    (shoff,) = struct.unpack_from('<Q', data, 0x28)  # ELF64 section header table
    shentsize, shnum, shstrndx = struct.unpack_from('<HHH', data, 0x3A)
    headers = [struct.unpack_from('<IIQQQQIIQQ', data, shoff + i * shentsize) for i in range(shnum)]
    names = headers[shstrndx][4]

    def name(offset):
        start = names + offset
        return data[start:data.index(b'\0', start)].decode()

    out = {}
    for h in headers:
        n, offset, size = name(h[0]), h[4], h[5]
        if n.startswith('.nv.shared'):
            out[n] = size  # NOBITS: only the size means anything
        elif n.startswith(('.text.', '.nv.info.', '.nv.constant0')):
            out[n] = data[offset:offset + size]
    return out


before, after = sections(sys.argv[1]), sections(sys.argv[2])
differ = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
print('identical' if not differ else 'different: ' + ', '.join(differ))
sys.exit(1 if differ else 0)
