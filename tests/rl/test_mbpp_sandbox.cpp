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

TEST_CASE("MBPP full sweep: all 974 references pass", "[grader][mbpp][real][.slow]") {
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
