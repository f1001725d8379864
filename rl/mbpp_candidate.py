# The MBPP candidate-side server: runs the candidate's program inside the candidate's sandbox as
# `python3 -I -B -c SOURCE` and answers the judge's requests (rl/mbpp_judge.py: wire format of values;
# protocol at mbpp_candidate_source() in rl/mbpp_harness.h). Everything here is in the candidate's reach
# and therefore untrusted. Compiled into the binary as that function's text (cmake/embed_text.cmake);
# tests/rl/test_mbpp_harness.cpp checks the text equals this file and that python3 compiles it.
import os, sys, json, builtins, collections
def _pulse_serve():
    type_, len_ = type, len
    requests = os.fdopen(3, "rb", buffering=1 << 16)
    def send(obj):
        try:
            data = (json.dumps(obj) + "\n").encode()
        except BaseException as e:
            data = (json.dumps({"raise": type_(e).__name__}) + "\n").encode()
        view = memoryview(data)
        try:
            while view:
                view = view[os.write(4, view):]
        except OSError:
            os._exit(0)
    def recv():
        line = requests.readline()
        if not line:
            os._exit(0)
        return json.loads(line)
    send({"hello": 1})
    job = recv()
    refs = []
    Counter, OrderedDict = collections.Counter, collections.OrderedDict
    defaultdict, deque = collections.defaultdict, collections.deque
    def enc(x, depth=0):
        t = type_(x)
        if t is int or t is str or t is bool or t is float or x is None:
            return x
        if depth < 100:
            if t is list:
                return [enc(e, depth + 1) for e in x]
            if t is tuple:
                return {"t": [enc(e, depth + 1) for e in x]}
            if t is set or t is frozenset:
                return {"s" if t is set else "fs": [enc(e, depth + 1) for e in x]}
            if t is dict or t is defaultdict or t is Counter or t is OrderedDict:
                tag = "ctr" if t is Counter else "od" if t is OrderedDict else "d"
                return {tag: [[enc(k, depth + 1), enc(v, depth + 1)] for k, v in dict.items(x)]}
            if t is deque:
                return {"dq": [[enc(e, depth + 1) for e in x], x.maxlen]}
            if t is bytes or t is bytearray:
                return {"b" if t is bytes else "ba": x.hex()}
            if t is complex:
                return {"c": [x.real, x.imag]}
        refs.append(x)
        return {"r": len_(refs) - 1}
    def dec(x):
        t = type_(x)
        if t is list:
            return [dec(e) for e in x]
        if t is not dict:
            return x
        (tag, v), = x.items()
        if tag == "r":
            return refs[v]
        if tag == "t":
            return tuple(dec(e) for e in v)
        if tag in ("s", "fs"):
            return (set if tag == "s" else frozenset)(dec(e) for e in v)
        if tag in ("d", "ctr", "od"):
            d = {dec(k): dec(e) for k, e in v}
            return d if tag == "d" else Counter(d) if tag == "ctr" else OrderedDict(d)
        if tag == "dq":
            return deque([dec(e) for e in v[0]], v[1])
        if tag in ("b", "ba"):
            return (bytes if tag == "b" else bytearray).fromhex(v)
        if tag == "c":
            return complex(v[0], v[1])
        if tag == "bi":
            return getattr(builtins, v)
        raise ValueError(tag)
    def guarded(fn):
        try:
            return {"v": enc(fn())}
        except SystemExit:
            return {"exit": 1}
        except BaseException as e:
            return {"raise": type_(e).__name__}
    try:
        prog = compile(job["code"], "<candidate>", "exec")
        setup = compile(job["setup"], "<setup>", "exec")
    except BaseException as e:
        send({"syntax": type_(e).__name__})
        os._exit(3)
    g = {"__name__": "__main__", "__builtins__": builtins}
    del job
    r = guarded(lambda: exec(prog, g))
    if "v" in r:
        r = guarded(lambda: exec(setup, g))
    if "v" not in r:
        send(r)
        os._exit(5)
    del r
    refs.clear()
    send({"ready": 1})
    def handle(q):
        op = q["op"]
        o = refs[q["r"]]
        if op == "call":
            return o(*[dec(a) for a in q["a"]], **{k: dec(v) for k, v in q["k"]})
        if op == "attr":
            return getattr(o, q["name"])
        if op == "iter":
            return iter(o)
        if op == "next":
            return next(o)
        if op == "len":
            return len(o)
        if op == "item":
            return o[dec(q["key"])]
        if op == "str":
            return str(o)
        if op == "repr":
            return repr(o)
        raise ValueError(op)
    while True:
        q = recv()
        if q["op"] == "get":
            send(guarded(lambda: g[q["name"]]) if q["name"] in g else {"missing": 1})
        else:
            send(guarded(lambda: handle(q)))
_pulse_serve()
