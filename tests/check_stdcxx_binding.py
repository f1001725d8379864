#!/usr/bin/env python3
"""Fails when a built LibTorch executable would bind the C++ standard library's symbols elsewhere.

    tests/check_stdcxx_binding.py [--run EXE] EXE...

For each EXE (an ELF executable linking LibTorch): its DT_NEEDED entries (`readelf -d`) must name
libstdc++.so.6 ahead of every LibTorch library (libtorch*, libc10*). The dynamic linker searches the
executable's DT_NEEDED libraries in that order, so libstdc++ then provides std::filesystem & co. even where a
LibTorch build exports copies of its own (pip's libtorch.so does: pulse's calls bound to its
std::filesystem::remove_all and crashed, issue 30). CMakeLists.txt's pulse_link_stdcxx_first sets the order.

--run EXE also runs `EXE --version` with LD_DEBUG=bindings and LD_BIND_NOW=1 (every symbol bound at
start-up) and checks that each std::filesystem symbol the executable itself uses binds to libstdc++.so.6;
with this machine's LibTorch that exports none, the check still proves the bindings are read and seen.

Exit status 0 when every check passes, 1 with one line per failure (binary, what, where) otherwise.
CTest runs it as `stdcxx_binding` (CMakeLists.txt).
"""
import os
import re
import subprocess
import sys

TORCH_LIB = re.compile(r'^lib(torch|c10)[^/]*\.so')
STDCXX = 'libstdc++.so.6'
# std::filesystem's mangled names: functions (_ZNSt10filesystem...), const members (_ZNKSt10filesystem...).
FILESYSTEM = re.compile(r'^_ZNK?St10filesystem')
BINDING = re.compile(r"binding file (\S*) \[\d+\] to (\S+) \[\d+\]: normal symbol `([^']+)'")


def needed(path):
    """The DT_NEEDED sonames of `path`, in their order in the dynamic section."""
    out = subprocess.run(['readelf', '-d', '--wide', path], capture_output=True, text=True, check=True).stdout
    return re.findall(r'\(NEEDED\)\s+Shared library: \[([^\]]+)\]', out)


def check_order(path):
    libs = needed(path)
    torch = [i for i, lib in enumerate(libs) if TORCH_LIB.match(lib)]
    if not torch:
        return [f'{path}: no LibTorch library among DT_NEEDED {libs} (not a LibTorch executable?)']
    if STDCXX not in libs:
        return [f'{path}: {STDCXX} is not among DT_NEEDED {libs}']
    at = libs.index(STDCXX)
    if at > torch[0]:
        return [f'{path}: DT_NEEDED names {STDCXX} at position {at}, after {libs[torch[0]]} at {torch[0]} '
                f'(order: {libs}): the C++ standard library may bind to LibTorch\'s copies']
    print(f'ok   {path}: {STDCXX} at DT_NEEDED position {at}, first LibTorch library {libs[torch[0]]} at '
          f'{torch[0]}')
    return []


def check_bindings(path):
    env = dict(os.environ, LD_DEBUG='bindings', LD_BIND_NOW='1')
    r = subprocess.run([path, '--version'], env=env, capture_output=True, text=True, errors='replace',
                       timeout=60)
    if r.returncode != 0:
        return [f'{path} --version exited {r.returncode}: {r.stderr[-500:]}']
    exe = os.path.basename(path)
    seen, wrong = 0, []
    for line in r.stderr.splitlines():
        m = BINDING.search(line)
        if not m or os.path.basename(m.group(1)) != exe or not FILESYSTEM.match(m.group(3)):
            continue
        seen += 1
        if os.path.basename(m.group(2)) != STDCXX:
            wrong.append(f'{path}: {m.group(3)} binds to {m.group(2)}, not {STDCXX}')
    if not seen:
        return [f'{path}: LD_DEBUG=bindings showed no std::filesystem binding of the executable (is '
                f'LD_DEBUG ignored here, or does it use no std::filesystem?)']
    if not wrong:
        print(f'ok   {path}: all {seen} std::filesystem bindings go to {STDCXX}')
    return wrong


def main(argv):
    if not argv or argv[0] in ('-h', '--help'):
        print(__doc__)
        return 0 if argv else 2
    run = []
    while len(argv) >= 2 and argv[0] == '--run':
        run.append(argv[1])
        argv = argv[2:]
    failures = []
    for path in dict.fromkeys(run + argv):  # each once, in order
        if not os.path.isfile(path):
            failures.append(f'{path}: not found (build it first)')
            continue
        failures += check_order(path)
    for path in run:
        if os.path.isfile(path):
            failures += check_bindings(path)
    for f in failures:
        print('FAIL ' + f)
    return 1 if failures else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
