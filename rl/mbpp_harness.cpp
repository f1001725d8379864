// The MBPP harness source; kept as one raw string so the binary needs no data files.
#include "rl/mbpp_harness.h"

namespace pulse::rl {

const char* mbpp_harness_source() {
  return R"PY(
import os, sys, json, ast, builtins, operator
def _pulse_harness():
    rd, wr, cl, ex = os.read, os.write, os.close, os._exit
    buf = []
    while True:
        b = rd(3, 1 << 16)
        if not b:
            break
        buf.append(b)
    cl(3)
    job = json.loads(b"".join(buf).decode("utf-8"))
    del buf
    token = ("OK " + job.pop("nonce") + " " + str(len(job["tests"])) + "\n").encode()
    def say(msg):
        try:
            wr(4, (msg + "\n").encode("utf-8", "replace"))
        except OSError:
            pass
    type_, id_, len_, isinstance_, bool_ = type, id, len, isinstance, bool
    BaseException_, SystemExit_ = BaseException, SystemExit
    import collections
    scalars = {int, float, complex, bool, str, bytes, type(None)}
    # dict subclasses the stdlib returns (Counter, defaultdict, OrderedDict) compare as the plain dict
    # of their items, read with dict.items itself (a class the candidate patched cannot lie here).
    dict_types = {dict, collections.Counter, collections.defaultdict, collections.OrderedDict}
    dict_items, tuple_, list_, set_, frozenset_ = dict.items, tuple, list, set, frozenset
    ops = {ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
           ast.Gt: operator.gt, ast.GtE: operator.ge, ast.Is: operator.is_, ast.IsNot: operator.is_not,
           ast.In: lambda a, b: operator.contains(b, a), ast.NotIn: lambda a, b: not operator.contains(b, a)}
    class NotPlain(Exception):
        pass
    def canon(x, depth=0):
        # A copy made only of built-in types, or NotPlain: user classes could override __eq__/__bool__.
        t = type_(x)
        if t in scalars:
            return x
        if depth > 200:
            raise NotPlain()
        if t in dict_types:
            return {canon(k, depth + 1): canon(v, depth + 1) for k, v in dict_items(x)}
        if t is list:
            return [canon(e, depth + 1) for e in x]
        if t is tuple:
            return tuple_(canon(e, depth + 1) for e in x)
        if t is set:
            return set_(canon(e, depth + 1) for e in x)
        if t is frozenset:
            return frozenset_(canon(e, depth + 1) for e in x)
        raise NotPlain()
    try:
        prog = compile(job["code"], "<candidate>", "exec")
    except BaseException_ as e:
        say("SYNTAX " + type_(e).__name__)
        ex(3)
    setup = compile(job["setup"], "<setup>", "exec")
    checks = []
    for src in job["tests"]:
        tree = ast.parse(src.strip())
        if len_(tree.body) == 1 and isinstance_(tree.body[0], ast.Assert):
            t = tree.body[0].test
            if isinstance_(t, ast.Compare) and all(type_(o) in ops for o in t.ops):
                parts = [t.left] + list(t.comparators)
                checks.append(("cmp", [compile(ast.Expression(p), "<test>", "eval") for p in parts],
                               [ops[type_(o)] for o in t.ops]))
            else:
                checks.append(("truth", [compile(ast.Expression(t), "<test>", "eval")], []))
        else:
            checks.append(("stmt", [compile(tree, "<test>", "exec")], []))
    pristine = dict(builtins.__dict__)
    g = {"__name__": "__main__", "__builtins__": builtins}
    say("START")
    try:
        exec(prog, g)
        exec(setup, g)
    except SystemExit_ as e:
        say("EARLY_EXIT")
        ex(4)
    except BaseException_ as e:
        say("RUNTIME " + type_(e).__name__)
        ex(5)
    tg = dict(g)
    tg["__builtins__"] = pristine
    for i, (kind, code, cmp_ops) in enumerate(checks):
        try:
            if kind == "stmt":
                exec(code[0], tg)
                continue
            try:
                vals = [canon(eval(c, tg)) for c in code]
            except NotPlain:
                say("FAIL %d not_plain_value" % i)
                ex(6)
            if kind == "truth":
                ok = bool_(vals[0])
            else:
                ok = True
                for k, op in enumerate(cmp_ops):
                    if not bool_(op(vals[k], vals[k + 1])):
                        ok = False
                        break
            if ok is not True:
                say("FAIL %d assert" % i)
                ex(6)
        except SystemExit_:
            say("EARLY_EXIT")
            ex(4)
        except BaseException_ as e:
            say("ERROR %d %s" % (i, type_(e).__name__))
            ex(5)
    try:
        wr(4, token)
    except OSError:
        ex(7)
    ex(0)
_pulse_harness()
)PY";
}

}  // namespace pulse::rl
