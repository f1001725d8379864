# The MBPP judge: the trusted half of an MBPP grade. pulse runs it as `python3 -I -B -S -c SOURCE` in a
# sandbox of its own, never in the candidate's (rl/mbpp_sandbox.h: threat model and passing rule). The
# protocol is documented at mbpp_judge_source() in rl/mbpp_harness.h; this file is compiled into the
# binary as that function's text (cmake/embed_text.cmake), and tests/rl/test_mbpp_harness.cpp checks both
# that the text equals this file and that python3 compiles it.
#
# Wire format of a value between judge and candidate server (rl/mbpp_candidate.py), both ways: JSON
# null/bool/int/float/str/list as themselves, every other value as a one-key object: {"t": [..]} tuple,
# {"s": [..]} set, {"fs": [..]} frozenset, {"d": [[k, v], ..]} dict (and defaultdict), {"ctr": [[k, v], ..]}
# Counter, {"od": [[k, v], ..]} OrderedDict, {"dq": [[..], maxlen]} deque, {"b": hex} bytes, {"ba": hex}
# bytearray, {"c": [re, im]} complex, {"bi": name} a built-in type or function (judge to candidate only:
# the judge never rebuilds one from an answer), {"r": n} a reference to object n held by the candidate
# server (anything not plain data).
import os, sys, json, ast, builtins, collections, importlib
def _pulse_judge():
    type_, len_, str_, isinstance_ = type, len, str, isinstance
    def say(msg):
        try:
            os.write(4, (msg + "\n").encode("utf-8", "replace"))
        except OSError:
            pass
    say("JUDGE")
    buf = []
    while True:
        b = os.read(3, 1 << 16)
        if not b:
            break
        buf.append(b)
    os.close(3)
    job = json.loads(b"".join(buf).decode("utf-8"))
    del buf
    nonce, tests = job["nonce"], job["tests"]
    answers = os.fdopen(6, "rb", buffering=1 << 16)
    MAX_LINE = 16 << 20
    Counter, OrderedDict = collections.Counter, collections.OrderedDict
    defaultdict, deque = collections.defaultdict, collections.deque
    # Outcomes raised through the judge's own evaluation. BaseException subclasses, so that no built-in
    # the assert calls (hasattr, getattr with a default, ...) can swallow them.
    class Gone(BaseException): pass        # the candidate's process ended (EOF on its answers)
    class Exited(BaseException): pass      # SystemExit inside the candidate
    class NotPlain(BaseException): pass    # a value the judge will not compare or send
    class Protocol(BaseException): pass    # an answer that is not well-formed
    class Raised(BaseException):           # an exception inside the candidate (its type's name)
        def __init__(self, name):
            self.name = name
    MISSING = object()
    def clean(name):
        s = "".join(c for c in str_(name)[:64] if c.isalnum() or c in "_.")
        return s or "Exception"
    def send(obj):
        view = memoryview((json.dumps(obj) + "\n").encode())
        try:
            while view:
                view = view[os.write(5, view):]
        except OSError:
            raise Gone()
    def recv():
        line = answers.readline(MAX_LINE)
        if not line:
            raise Gone()
        if not line.endswith(b"\n"):
            raise Protocol()
        try:
            obj = json.loads(line)
        except (ValueError, RecursionError, MemoryError):
            raise Protocol()
        if type_(obj) is not dict:
            raise Protocol()
        return obj
    scalars = (int, float, str, bool, type(None))
    builtin_ids = {id(v): k for k, v in vars(builtins).items() if k[:1] != "_"}
    def pairs(v, depth):
        if type_(v) is not list:
            raise Protocol()
        out = []
        for e in v:
            if type_(e) is not list or len_(e) != 2:
                raise Protocol()
            out.append((dec(e[0], depth + 1), dec(e[1], depth + 1)))
        return out
    def dec(x, depth=0):
        # An answer's value rebuilt from exact built-in types only (or Remote references).
        t = type_(x)
        if t in scalars:
            return x
        if depth > 200:
            raise NotPlain()
        if t is list:
            return [dec(e, depth + 1) for e in x]
        if t is not dict or len_(x) != 1:
            raise Protocol()
        (tag, v), = x.items()
        if tag == "r":
            if type_(v) is not int:
                raise Protocol()
            return Remote(v)
        if tag in ("b", "ba"):
            if type_(v) is not str:
                raise Protocol()
            return (bytes if tag == "b" else bytearray).fromhex(v)
        if tag == "c":
            if type_(v) is not list or len_(v) != 2 or not all(type_(e) in (int, float) for e in v):
                raise Protocol()
            return complex(v[0], v[1])
        if tag in ("d", "ctr", "od"):
            kv = pairs(v, depth)
            return dict(kv) if tag == "d" else Counter(dict(kv)) if tag == "ctr" else OrderedDict(kv)
        if tag == "dq":
            if type_(v) is not list or len_(v) != 2 or type_(v[0]) is not list:
                raise Protocol()
            if v[1] is not None and type_(v[1]) is not int:
                raise Protocol()
            return deque([dec(e, depth + 1) for e in v[0]], v[1])
        if type_(v) is not list:
            raise Protocol()
        items = [dec(e, depth + 1) for e in v]
        if tag == "t":
            return tuple(items)
        if tag == "s":
            return set(items)
        if tag == "fs":
            return frozenset(items)
        raise Protocol()
    def enc(x, depth=0):
        # An argument for the candidate: plain data or one of its own references, nothing else.
        t = type_(x)
        if t in scalars:
            return x
        if t is Remote:
            return {"r": object.__getattribute__(x, "_pulse_ref")}
        if depth > 200:
            raise NotPlain()
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
        k = builtin_ids.get(id(x))
        if k is not None and vars(builtins).get(k) is x:
            return {"bi": k}  # a built-in type or function (e.g. `int` in MBPP 533), by name
        raise NotPlain()
    def rpc(q):
        send(q)
        a = recv()
        if len_(a) != 1:
            raise Protocol()
        if "v" in a:
            try:
                return dec(a["v"])
            except (TypeError, ValueError, RecursionError, MemoryError, OverflowError):
                raise NotPlain()
        if "raise" in a:
            name = clean(a["raise"])
            if name == "StopIteration" and q["op"] == "next":
                raise StopIteration
            raise Raised(name)
        if "exit" in a:
            raise Exited()
        if "missing" in a and q["op"] == "get":
            return MISSING
        raise Protocol()
    def checked(v, t):
        if type_(v) is not t:
            raise NotPlain()
        return v
    class Remote:
        # An object that lives in the candidate's process. Calls, attribute reads, iteration, len,
        # indexing, str and repr are requests; truth, comparison and hashing are refused, so an object
        # of the candidate's can never decide an assert. No __contains__: `x in obj` iterates the
        # object and the judge compares each element itself (a remote `in` would be told the value).
        __slots__ = ("_pulse_ref",)
        def __init__(self, ref):
            object.__setattr__(self, "_pulse_ref", ref)
        def _q(self, op, **kw):
            kw.update(op=op, r=object.__getattribute__(self, "_pulse_ref"))
            return rpc(kw)
        def __getattr__(self, name):
            if name[:2] == "__":
                raise AttributeError(name)
            return self._q("attr", name=name)
        def __setattr__(self, name, value):
            raise NotPlain()
        def __call__(self, *args, **kwargs):
            return self._q("call", a=[enc(x) for x in args], k=[[k, enc(v)] for k, v in kwargs.items()])
        def __iter__(self):
            return self._q("iter")
        def __next__(self):
            return self._q("next")
        def __len__(self):
            try:
                return checked(self._q("len"), int)
            except Raised as e:
                if e.name == "TypeError":  # no len(): list() and friends fall back to iterating
                    raise TypeError("len")
                raise
        def __getitem__(self, key):
            return self._q("item", key=enc(key))
        def __str__(self):
            return checked(self._q("str"), str)
        def __repr__(self):
            return checked(self._q("repr"), str)
        def _refuse(self, *a):
            raise NotPlain()
        __bool__ = __eq__ = __ne__ = __lt__ = __le__ = __gt__ = __ge__ = __hash__ = _refuse
    MODULES = {"math", "cmath", "re", "sys", "collections", "itertools", "functools", "heapq", "bisect",
               "operator", "string", "statistics", "decimal", "fractions", "datetime", "copy", "array",
               "struct", "random"}
    judge_names = set(dir(builtins)) | MODULES
    ns = {"__builtins__": builtins, "__name__": "__pulse_judge__"}
    def name(n, shadow=False):
        # A name of the candidate's program; `shadow`: a built-in it may redefine (the called function
        # of an assert's first operand, e.g. MBPP's own `def sum`).
        v = rpc({"op": "get", "name": n})
        if v is MISSING:
            if shadow:
                return ns[n] if n in ns else getattr(builtins, n)
            raise NameError(n)
        return v
    ns["__pulse_name__"] = name
    class Rewrite(ast.NodeTransformer):
        def __init__(self, bound, subject):
            self.bound, self.subject = bound, subject
        def visit_Name(self, node):
            if type_(node.ctx) is not ast.Load or node.id in self.bound:
                return node
            known = node.id in judge_names
            if known and node.id in MODULES and node.id not in ns:
                try:
                    ns[node.id] = importlib.import_module(node.id)
                except ImportError:
                    pass
            if known and node is not self.subject:
                return node
            args = [ast.Constant(node.id)] + ([ast.Constant(True)] if known else [])
            return ast.copy_location(ast.Call(ast.Name("__pulse_name__", ast.Load()), args, []), node)
    def prepare(src):
        tree = ast.parse(src.strip())
        bound = {n.id for n in ast.walk(tree) if isinstance_(n, ast.Name) and type_(n.ctx) is not ast.Load}
        bound |= {a.arg for a in ast.walk(tree) if isinstance_(a, ast.arg)}
        if len_(tree.body) == 1 and isinstance_(tree.body[0], ast.Assert):
            test = tree.body[0].test
            subject = None
            if isinstance_(test, ast.Compare) and isinstance_(test.left, ast.Call) and \
                    isinstance_(test.left.func, ast.Name):
                subject = test.left.func
            expr = ast.fix_missing_locations(ast.Expression(Rewrite(bound, subject).visit(test)))
            return "eval", compile(expr, "<test>", "eval"), bound
        tree = ast.fix_missing_locations(Rewrite(bound, None).visit(tree))
        return "exec", compile(tree, "<test>", "exec"), bound
    try:
        if recv() != {"hello": 1}:
            raise Protocol()
    except (Gone, Protocol):
        say("NOSTART")
        os._exit(9)
    try:
        send({"code": job["code"], "setup": job["setup"]})
        a = recv()
    except Gone:
        say("GONE -1")
        os._exit(8)
    except Protocol:
        say("RUNTIME protocol")
        os._exit(5)
    if "syntax" in a:
        say("SYNTAX " + clean(a["syntax"]))
        os._exit(3)
    if "exit" in a:
        say("EARLY_EXIT")
        os._exit(4)
    if a != {"ready": 1}:
        say("RUNTIME " + clean(a.get("raise", "protocol")))
        os._exit(5)
    say("START")
    for i, src in enumerate(tests):
        try:
            kind, code, bound = prepare(src)
            if kind == "exec":
                exec(code, ns)
                judge_names.update(bound)
                continue
            ok = eval(code, ns)
            if type_(ok) is not bool:
                ok = bool(ok)
            if ok is not True:
                say("FAIL %d assert" % i)
                os._exit(6)
        except Gone:
            say("GONE %d" % i)
            os._exit(8)
        except Exited:
            say("EARLY_EXIT")
            os._exit(4)
        except NotPlain:
            say("FAIL %d not_plain_value" % i)
            os._exit(6)
        except Protocol:
            say("FAIL %d protocol" % i)
            os._exit(6)
        except Raised as e:
            say("ERROR %d %s" % (i, e.name))
            os._exit(5)
        except BaseException as e:
            say("ERROR %d %s" % (i, type_(e).__name__))
            os._exit(5)
    say("OK %s %d" % (nonce, len_(tests)))
    os._exit(0)
_pulse_judge()
