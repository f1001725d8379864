# Writes base.safetensors and target.safetensors: the inputs tests/assets/sync_format_v2_patch.pulse was
# encoded from by pulse before format version 3 (commit 11d8d10: `pulse sync diff base.safetensors
# target.safetensors -o v2.pulse --base-version 1 --target-version 2 --model-id format-v2-fixture`).
# tests/sync/test_format_v2_fixture.cpp builds the same bytes itself; this file records their origin.
import json, struct, sys
T = [("a.weight","BF16",[300,400],2),("b.bias","BF16",[100],2),("c.f32","F32",[70000],4),("d.tail","BF16",[32800],2)]
def tensor_bytes(ti, n, w, target):
    b = bytearray(((j * 2654435761 + ti * 40503) >> 13) & 0xff for j in range(n * w))
    if target:
        for e in range(n):
            if (e * 7919 + ti) % 97 == 0: b[e * w] ^= 1
    return bytes(b)
def write(path, target):
    header = {}; data = b""
    for ti,(name,dt,shape,w) in enumerate(T):
        n = 1
        for d in shape: n *= d
        tb = tensor_bytes(ti, n, w, target)
        header[name] = {"dtype": dt, "shape": shape, "data_offsets": [len(data), len(data)+len(tb)]}
        data += tb
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    open(path,"wb").write(struct.pack("<Q", len(h)) + h + data)
write("base.safetensors", False); write("target.safetensors", True)
