// MBPP sandbox: real MBPP references pass, wrong programs fail, hazards are contained and score 0.
#include <catch2/catch.hpp>

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "datasets/loaders.h"
#include "rl/grader.h"
#include "rl/mbpp_sandbox.h"
#include "tests/test_paths.h"

using namespace pulse::rl;

namespace {

Problem add_one_task() {
  Problem p;
  p.kind = TaskKind::Code;
  p.id = "test/add_one";
  p.tests = {"assert add_one(1) == 2", "assert add_one(-1) == 0", "assert add_one(41) == 42"};
  return p;
}

const std::vector<Problem>& mbpp() {
  static const std::vector<Problem> tasks =
      pulse::datasets::load_mbpp_jsonl(pulse::test::shared_path("datasets/mbpp.jsonl"));
  return tasks;
}

bool exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

// Processes left running under the sandbox uids (>= 1000000) after a grade.
int sandbox_processes() {
  int n = 0;
  DIR* d = ::opendir("/proc");
  while (dirent* e = d ? ::readdir(d) : nullptr) {
    struct stat st;
    std::string p = std::string("/proc/") + e->d_name;
    if (e->d_name[0] >= '0' && e->d_name[0] <= '9' && ::stat(p.c_str(), &st) == 0 && st.st_uid >= 1000000) {
      std::ifstream status(p + "/status");
      std::string line;
      bool zombie = false;
      while (std::getline(status, line))
        if (line.rfind("State:", 0) == 0) zombie = line.find('Z') != std::string::npos;
      if (!zombie) ++n;
    }
  }
  if (d) ::closedir(d);
  return n;
}

}  // namespace

TEST_CASE("extract_code takes the first python fence", "[grader][mbpp]") {
  CHECK(extract_code("Here:\n```python\ndef f():\n    return 1\n```\nand ```python\nprint(2)\n```") ==
        "def f():\n    return 1\n");
  CHECK(extract_code("```\nx = 1\n```") == "x = 1\n");
  CHECK(extract_code("def f(): return 1") == "def f(): return 1");
}

TEST_CASE("extract_code ends the program at the few-shot format's [DONE]", "[grader][mbpp]") {
  CHECK(extract_code("def f():\n    return 1\n[DONE]\nYou are an expert Python programmer") ==
        "def f():\n    return 1\n");
  CHECK(extract_code("```python\nx = 1\n```\n[DONE]\n```python\ny = 2\n```") == "x = 1\n");
  CHECK(extract_code("[DONE]") == "");
  // A few-shot response graded end to end: the continuation after [DONE] never runs.
  REQUIRE(sandbox_available());
  Problem t = add_one_task();
  CHECK(grade(t, "def add_one(x):\n    return x + 1\n[DONE]\nraise SystemExit(3)\n").score == 1.0);
}

TEST_CASE("a correct program passes and wrong ones fail", "[grader][mbpp]") {
  REQUIRE(sandbox_available());
  Problem t = add_one_task();
  auto ok = grade_mbpp("def add_one(x):\n    print('hello')\n    return x + 1\n", t);
  CHECK(ok.score == 1.0);
  CHECK(ok.reason == "passed");
  CHECK_FALSE(ok.infrastructure_error);
  auto wrong = grade_mbpp("def add_one(x):\n    return x + 2\n", t);
  CHECK(wrong.score == 0.0);
  CHECK(wrong.reason == "assert_failed");
  auto partly = grade_mbpp("def add_one(x):\n    return 2 if x == 1 else 0\n", t);  // first assert only
  CHECK(partly.score == 0.0);
  CHECK(grade_mbpp("def add_one(x) return x", t).reason == "syntax_error");
  CHECK(grade_mbpp("def add_one(x):\n    return undefined_name\n", t).reason == "runtime_error");
  Problem none = t;
  none.tests.clear();
  CHECK(grade_mbpp("def add_one(x):\n    return x + 1\n", none).reason == "no_tests");
}

TEST_CASE("early exits, disabled asserts and forged equality cannot pass", "[grader][mbpp][hazard]") {
  REQUIRE(sandbox_available());
  Problem t = add_one_task();
  const std::vector<std::pair<std::string, std::string>> cheats = {
      {"sys.exit(0) before the asserts", "import sys\nsys.exit(0)\n"},
      {"exit(0) before the asserts", "exit(0)\n"},
      {"os._exit(0) before the asserts", "import os\nos._exit(0)\n"},
      {"exit inside the tested function", "def add_one(x):\n    raise SystemExit(0)\n"},
      {"os._exit inside the tested function", "import os\ndef add_one(x):\n    os._exit(0)\n"},
      {"AssertionError replaced",
       "import builtins\nbuiltins.AssertionError = type('E', (Exception,), {})\ndef add_one(x):\n    return "
       "0\n"},
      {"always-equal object",
       "class A:\n    def __eq__(self, o):\n        return True\ndef add_one(x):\n    return A()\n"},
      {"int subclass that equals everything",
       "class I(int):\n    def __eq__(self, o):\n        return True\ndef add_one(x):\n    return I(0)\n"},
      {"builtins patched",
       "import builtins\nbuiltins.len = lambda *a: 0\nbuiltins.bool = lambda *a: True\ndef add_one(x):\n    "
       "return 0\n"},
      {"output forged on stdout", "print('OK 0 3')\nimport os\nos._exit(0)\n"},
      {"status pipe forged", "import os\nos.write(4, b'START\\nOK 0000 3\\n')\nos._exit(0)\n"},
  };
  for (const auto& [name, code] : cheats) {
    INFO(name);
    auto r = grade_mbpp(code, t);
    CHECK(r.score == 0.0);
    CHECK_FALSE(r.infrastructure_error);
  }
}

TEST_CASE("hazards are contained within the limits and score 0", "[grader][mbpp][hazard]") {
  REQUIRE(sandbox_available());
  Problem t = add_one_task();
  SandboxLimits lim;
  lim.cpu_seconds = 2;
  lim.wall_seconds = 4;
  lim.memory_bytes = 256ull << 20;
  lim.output_bytes = 64 << 10;
  std::string host_tmp = "/tmp/pulse_hazard_" + std::to_string(::getpid());
  std::string repo_file = pulse::test::source_path("pulse_hazard_written");
  const std::vector<std::pair<std::string, std::string>> hazards = {
      {"infinite loop", "while True:\n    pass\n"},
      {"sleeping forever (wall clock, not CPU)", "import time\ntime.sleep(1000)\n"},
      {"memory bomb", "x = bytearray(8 << 30)\n"},
      {"growing memory", "xs = []\nwhile True:\n    xs.append(' ' * (1 << 20))\n"},
      {"fork bomb",
       "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"},
      {"write to /etc", "open('/etc/pulse_hazard', 'w').write('x')\n"},
      {"write to the repo", "open('" + repo_file + "', 'w').write('x')\n"},
      {"write to the host /tmp", "open('" + host_tmp + "', 'w').write('x')\n"},
      {"fill the private /tmp", "f = open('/tmp/big', 'wb')\nwhile True:\n    f.write(b'x' * (1 << 20))\n"},
      {"network connection",
       "import socket\nsocket.create_connection(('1.1.1.1', 80), timeout=2)\ndef add_one(x):\n    return x + "
       "1\n"},
      {"stdout flood", "while True:\n    print('x' * 10000)\n"},
      {"deep recursion", "import sys\nsys.setrecursionlimit(10**7)\ndef g(n):\n    return g(n + 1)\ng(0)\n"},
      {"thread spawning",
       "import threading, time\nwhile True:\n    threading.Thread(target=time.sleep, args=(100,)).start()\n"},
  };
  for (const auto& [name, code] : hazards) {
    INFO(name);
    auto t0 = std::chrono::steady_clock::now();
    auto r = grade_mbpp(code, t, lim);
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    INFO("reason " << r.reason << " after " << s << " s");
    CHECK(r.score == 0.0);
    CHECK_FALSE(r.infrastructure_error);
    CHECK(s < lim.wall_seconds + 3.0);
  }
  CHECK_FALSE(exists("/etc/pulse_hazard"));
  CHECK_FALSE(exists(repo_file));
  CHECK_FALSE(exists(host_tmp));
  // Nothing started by the sandboxes is still running.
  int left = 0;
  for (int i = 0; i < 20 && (left = sandbox_processes()) > 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  CHECK(left == 0);
}

TEST_CASE("a flood of stdout or stderr past the cap is graded output_limit, whatever its size",
          "[grader][mbpp][hazard]") {
  REQUIRE(sandbox_available());
  const Problem t = add_one_task();
  SandboxLimits lim;
  lim.output_bytes = 1 << 20;
  // Once graded "judge_error: exit 137": reads of output still buffered after the kill, with the judge
  // gone by then, overwrote the verdict (5 MB and more, or many small writes).
  for (const std::string stream : {"stdout", "stderr"})
    for (const std::string amount : {"'x' * 2000000", "'x' * 5000000", "'x' * 20000000"}) {
      const std::string code =
          "import sys\nsys." + stream + ".write(" + amount + ")\ndef add_one(x):\n    return x + 1\n";
      INFO(stream << " " << amount);
      const auto r = grade_mbpp(code, t, lim);
      CHECK(r.reason == "output_limit");
      CHECK(r.score == 0.0);
    }
  const auto many = grade_mbpp(
      "import sys\nfor i in range(3000):\n    sys.stdout.write('x' * 1000)\ndef add_one(x):\n    return x + "
      "1\n",
      t, lim);
  CHECK(many.reason == "output_limit");
}

TEST_CASE("a sandbox that cannot start is an infrastructure error, never a run", "[grader][mbpp]") {
  Problem t = add_one_task();
  SandboxLimits no_bwrap;
  no_bwrap.bwrap = "/nonexistent/bwrap";
  auto r = grade_mbpp("def add_one(x):\n    return x + 1\n", t, no_bwrap);
  CHECK(r.infrastructure_error);
  CHECK(r.score == 0.0);
  SandboxLimits no_python;
  no_python.python = "/usr/bin/nonexistent-python3";
  auto q = grade_mbpp("def add_one(x):\n    return x + 1\n", t, no_python);
  CHECK(q.infrastructure_error);
  CHECK(q.score == 0.0);
}

TEST_CASE("MBPP sample: references pass, wrong programs fail", "[grader][mbpp][real]") {
  REQUIRE(sandbox_available());
  const auto& tasks = mbpp();
  REQUIRE(tasks.size() == 974);
  std::vector<const Problem*> sample;
  std::vector<std::string> refs, wrongs;
  for (size_t i = 0; i < tasks.size(); i += 10) {  // 98 tasks, fixed
    sample.push_back(&tasks[i]);
    refs.push_back(tasks[i].solution);
    wrongs.push_back(tasks[(i + 1) % tasks.size()].solution);  // another task's program
  }
  auto ok = grade_batch(sample, refs, 2);
  auto bad = grade_batch(sample, wrongs, 2);
  int passed = 0, wrong_passed = 0;
  for (size_t i = 0; i < sample.size(); ++i) {
    INFO(sample[i]->id << ": " << ok[i].reason);
    CHECK(ok[i].score == 1.0);
    passed += ok[i].score == 1.0;
    wrong_passed += bad[i].score == 1.0;
  }
  CHECK(passed == static_cast<int>(sample.size()));
  CHECK(wrong_passed == 0);
}

// Every reference solution of ../shared's MBPP against its asserts in the sandbox: ~36 s on 2 cores, so it
// runs with the rest (it was a hidden tag that CTest never ran).
TEST_CASE("MBPP full sweep: all 974 references pass", "[grader][mbpp][real]") {
  REQUIRE(sandbox_available());
  const auto& tasks = mbpp();
  std::vector<const Problem*> all;
  std::vector<std::string> refs;
  for (const auto& t : tasks) {
    all.push_back(&t);
    refs.push_back(t.solution);
  }
  auto res = grade_batch(all, refs, 0);
  int passed = 0;
  for (size_t i = 0; i < res.size(); ++i) {
    INFO(all[i]->id << ": " << res[i].reason);
    CHECK(res[i].score == 1.0);
    passed += res[i].score == 1.0;
  }
  CHECK(passed == 974);
}

TEST_CASE("grade_batch dispatches by kind and keeps order", "[grader]") {
  REQUIRE(sandbox_available());
  Problem m;
  m.kind = TaskKind::Math;
  m.answer = "\\frac{1}{2}";
  Problem c = add_one_task();
  std::vector<const Problem*> ps = {&m, &c, &m, &c};
  std::vector<std::string> rs = {"\\boxed{0.5}", "```python\ndef add_one(x):\n    return x + 1\n```",
                                 "\\boxed{2}", "def add_one(x):\n    return x\n"};
  auto out = grade_batch(ps, rs, 2);
  REQUIRE(out.size() == 4);
  CHECK(out[0].score == 1.0);
  CHECK(out[1].score == 1.0);
  CHECK(out[2].score == 0.0);
  CHECK(out[3].score == 0.0);
  for (size_t i = 0; i < ps.size(); ++i) CHECK(grade(*ps[i], rs[i]).score == out[i].score);
  CHECK_THROWS_AS(grade_batch(ps, {"x"}, 1), std::invalid_argument);
}

TEST_CASE("grade_batch grades each distinct program of a problem once", "[grader][mbpp][dedup]") {
  REQUIRE(sandbox_available());
  Problem c = add_one_task();
  Problem c2 = add_one_task();  // same text, another problem object: graded on its own
  // Passes or fails by a coin flip inside the sandbox: 16 separate grades would all agree with
  // probability 2^-15; duplicates sharing one grade always agree.
  const std::string coin =
      "```python\nimport random\nk = 1 if random.random() < 0.5 else 2\ndef add_one(x):\n    return x + "
      "k\n```";
  const std::string same_program_other_text = "Here it is.\n" + coin + "\nDone.";
  std::vector<const Problem*> ps;
  std::vector<std::string> rs;
  for (int i = 0; i < 16; ++i) {
    ps.push_back(&c);
    rs.push_back(i % 2 ? coin : same_program_other_text);
  }
  ps.push_back(&c);
  rs.push_back("def add_one(x):\n    return x + 1\n");
  ps.push_back(&c2);
  rs.push_back("def add_one(x):\n    return x\n");
  auto out = grade_batch(ps, rs, 2);
  REQUIRE(out.size() == 18);
  for (int i = 1; i < 16; ++i) {
    CHECK(out[i].score == out[0].score);
    CHECK(out[i].reason == out[0].reason);
    CHECK(out[i].extracted == out[0].extracted);
  }
  CHECK((out[0].reason == "passed" || out[0].reason == "assert_failed"));
  CHECK(out[16].score == 1.0);
  CHECK(out[17].score == 0.0);
  CHECK(out[17].reason == "assert_failed");
}

TEST_CASE("a program killed by a signal is a runtime_error naming the signal", "[grader][mbpp][signal]") {
  REQUIRE(sandbox_available());
  Problem t = add_one_task();
  const std::vector<std::tuple<std::string, std::string, std::string>> crashes = {
      {"SIGSEGV from deep recursion in C code (str of a deeply nested list)",
       "import sys\nsys.setrecursionlimit(10**7)\nl = []\nfor i in range(10**6):\n    l = [l]\nstr(l)\n",
       "runtime_error: killed by signal 11 (SIGSEGV)"},
      {"SIGSEGV from ctypes inside the tested function",
       "import ctypes\ndef add_one(x):\n    return ctypes.string_at(0)\n",
       "runtime_error: killed by signal 11 (SIGSEGV)"},
      {"SIGKILL sent to itself", "import os\nos.kill(os.getpid(), 9)\n",
       "runtime_error: killed by signal 9 (SIGKILL)"},
      {"SIGABRT inside the tested function after a passing assert",
       "import os\ndef add_one(x):\n    if x != 1:\n        os.abort()\n    return x + 1\n",
       "runtime_error: killed by signal 6 (SIGABRT)"},
  };
  for (const auto& [name, code, reason] : crashes) {
    INFO(name);
    auto r = grade_mbpp(code, t);
    CHECK(r.score == 0.0);
    CHECK_FALSE(r.infrastructure_error);
    CHECK(r.reason == reason);
  }
  // A clean os._exit during an assert is the program ending itself, not a crash.
  CHECK(grade_mbpp("import os\ndef add_one(x):\n    os._exit(0)\n", t).reason == "early_exit");
}

TEST_CASE("the judge is out of the candidate's reach: nonce hunting cannot pass", "[grader][mbpp][hazard]") {
  REQUIRE(sandbox_available());
  Problem t = add_one_task();
  // The program answers correctly only if it finds a secret: a 32-hex-digit string (the nonce's shape),
  // an "OK " status line or the asserts' source anywhere in its interpreter (frames of every thread,
  // their locals and globals, every object on the gc heap, inspect's view of the stack) or in its
  // inherited fds; forge() writes the judge's status lines (with every nonce found, and guesses) to
  // every fd it can and to stdout. An in-process harness holding the nonce fails this test.
  const std::string hunter = R"PY(
import gc, sys, os, re, inspect
secret = re.compile(r"\b[0-9a-f]{32}\b|assert\s+add_one\(")
found = []
def look(v):
    if isinstance(v, bytes):
        v = v.decode("latin-1")
    if isinstance(v, str):
        for m in secret.finditer(v):
            if m.group().startswith("assert") or (re.search("[a-f]", m.group()) and re.search("[0-9]", m.group())):
                found.append(m.group())
def walk(frame):
    while frame is not None:
        for d in (frame.f_locals, frame.f_globals):
            for k, v in list(d.items()):
                look(k); look(v)
        for c in frame.f_code.co_consts:
            look(c)
        frame = frame.f_back
def hunt():
    for f in sys._current_frames().values():
        walk(f)
    walk(sys._getframe())
    for info in inspect.stack():
        walk(info.frame)
    for o in gc.get_objects():
        look(o)
        if isinstance(o, dict):
            for k, v in list(o.items()):
                look(k); look(v)
        elif isinstance(o, (list, tuple)):
            for v in list(o):
                look(v)
    for fd in range(64):
        try:
            was = os.get_blocking(fd)
        except OSError:
            continue
        try:
            os.set_blocking(fd, False)
            look(os.read(fd, 1 << 16))
        except (OSError, ValueError):
            pass
        finally:
            os.set_blocking(fd, was)
def forge():
    lines = ["START\n"] + ["OK %s 3\n" % n for n in found] + ["OK 0 3\n", "OK %s 3\n" % ("0" * 32)]
    for fd in range(64):
        for line in lines:
            try:
                os.write(fd, line.encode())
            except OSError:
                pass
    print("".join(lines))
)PY";
  auto run = [&](const std::string& tail) {
    auto r = grade_mbpp(hunter + tail, t);
    INFO("reason " << r.reason);
    CHECK_FALSE(r.infrastructure_error);
    return r;
  };
  // Forging everywhere, correct only with a secret: scores 0 (the forged lines reach the judge only as
  // garbage on the answer pipe, a protocol error; pulse never sees them).
  auto forger = run(
      "hunt()\nforge()\ndef add_one(x):\n    hunt()\n    forge()\n    return x + 1 if found else x + 7\n");
  CHECK(forger.score == 0.0);
  // Hunting alone, correct only with a secret: it ran every assert and found nothing.
  auto seeker = run("hunt()\ndef add_one(x):\n    hunt()\n    return x + 1 if found else x + 7\n");
  CHECK(seeker.score == 0.0);
  CHECK(seeker.reason == "assert_failed");
  // The same hunting with a correct answer passes: the hunting itself breaks nothing.
  auto honest = run("hunt()\ndef add_one(x):\n    hunt()\n    return x + 1\n");
  CHECK(honest.score == 1.0);
  CHECK(honest.reason == "passed");
}

TEST_CASE("the judge evaluates usual MBPP assert shapes itself", "[grader][mbpp]") {
  REQUIRE(sandbox_available());
  auto task = [](std::vector<std::string> tests, std::string setup = "") {
    Problem p;
    p.kind = TaskKind::Code;
    p.id = "test/shapes";
    p.tests = std::move(tests);
    p.test_setup_code = std::move(setup);
    return p;
  };
  struct Case {
    std::string name, code;
    Problem task;
    bool pass;
  };
  const std::vector<Case> cases = {
      {"set() of the result", "def uniq(xs):\n    return list(dict.fromkeys(xs))\n",
       task({"assert set(uniq([3, 1, 3, 2])) == set([1, 2, 3])", "assert set(uniq([])) == set()"}), true},
      {"math.isclose as the whole assert", "def half(x):\n    return x / 2\n",
       task({"assert math.isclose(half(5), 2.5, rel_tol=1e-9)", "assert math.isclose(half(1), 0.5)"}), true},
      {"math.isclose on a wrong value", "def half(x):\n    return x / 3\n",
       task({"assert math.isclose(half(5), 2.5, rel_tol=1e-9)"}), false},
      {"tuple, dict, bytes, complex, None, nested",
       "def many():\n    return ((1, 2.5), {'a': [1, {2, 3}]}, b'\\x00x', 1+2j, None, frozenset({1}))\n",
       task({"assert many() == ((1, 2.5), {'a': [1, {2, 3}]}, b'\\x00x', 1+2j, None, frozenset({1}))"}),
       true},
      {"a generator consumed by list()", "def evens(n):\n    return (i for i in range(n) if i % 2 == 0)\n",
       task({"assert list(evens(7)) == [0, 2, 4, 6]", "assert sorted(evens(5), reverse=True) == [4, 2, 0]"}),
       true},
      {"a generator is not a list", "def evens(n):\n    return (i for i in range(n) if i % 2 == 0)\n",
       task({"assert evens(7) == [0, 2, 4, 6]"}), false},
      {"Counter and deque results",
       "from collections import Counter, deque\ndef count(s):\n    return Counter(s)\ndef dq(xs):\n    "
       "return deque(xs)\n",
       task({"assert count('abca') == {'a': 2, 'b': 1, 'c': 1}",
             "assert dq([1, 2]) == collections.deque([1, 2])"}),
       true},
      {"the built-in type as an argument (MBPP 533)",
       "def drop(xs, t):\n    return [x for x in xs if not isinstance(x, t)]\n",
       task({"assert drop((4, 5, 7.7, 1.2), int) == [7.7, 1.2]", "assert drop((7, 'SR'), str) == [7]"}),
       true},
      {"objects built by the test setup with the candidate's class",
       "class Node:\n    def __init__(self, v):\n        self.v = v\n        self.left = self.right = None\n"
       "def height(n):\n    return 0 if n is None else 1 + max(height(n.left), height(n.right))\n",
       task({"assert height(root) == 3", "assert root.left.left.v == 4", "assert height(Node(9)) == 1"},
            "root = Node(1)\nroot.left = Node(2)\nroot.left.left = Node(4)\n"),
       true},
      {"a built-in name the program redefines as the function under test (MBPP 126)",
       "def sum(a, b):\n    return a + b + 1\n", task({"assert sum(1, 2) == 4"}), true},
      {"a redefined set() cannot decide the expected side",
       "def set(*a):\n    return 0\ndef uniq(xs):\n    return xs\n",
       task({"assert set(uniq([3, 1, 3])) == set([1, 3])"}), false},
      {"a fake math module cannot decide a truth assert",
       "class _M:\n    def isclose(self, *a, **k):\n        return True\nmath = _M()\ndef half(x):\n    "
       "return 0\n",
       task({"assert math.isclose(half(5), 2.5)"}), false},
      {"an object of the program is never truthy for the judge",
       "class T:\n    def __bool__(self):\n        return True\ndef is_even(n):\n    return T()\n",
       task({"assert is_even(4)"}), false},
      {"`in` iterates the program's object; its __contains__ is never asked",
       "class C:\n    def __contains__(self, x):\n        return True\n    def __iter__(self):\n        "
       "return "
       "iter([])\ndef f():\n    return C()\n",
       task({"assert 5 in f()"}), false},
      {"`in` over a generator", "def evens(n):\n    return (i for i in range(n) if i % 2 == 0)\n",
       task({"assert 4 in evens(5)", "assert 3 not in evens(5)"}), true},
      {"a plain True is", "def is_even(n):\n    return n % 2 == 0\n", task({"assert is_even(4)"}), true},
      {"a list of the program's objects compares as not plain",
       "class E:\n    def __eq__(self, o):\n        return True\ndef f():\n    return [E(), E()]\n",
       task({"assert f() == [1, 2]"}), false},
  };
  for (const auto& c : cases) {
    INFO(c.name);
    auto r = grade_mbpp(c.code, c.task);
    INFO("reason " << r.reason);
    CHECK(r.score == (c.pass ? 1.0 : 0.0));
    CHECK_FALSE(r.infrastructure_error);
  }
}
