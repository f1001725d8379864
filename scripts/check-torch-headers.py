#!/usr/bin/env python3
"""Compiles (syntax only) every LibTorch-using source of build/ against another LibTorch's headers.

    scripts/check-torch-headers.py [--no-pch] [--cxxflag=FLAG ...] [-jN] INCLUDE_DIR [SOURCE_SUBSTRING ...]

INCLUDE_DIR is a LibTorch 2.x `include/` folder (pip torch's `torch/include`, or an extracted wheel); the
`build/` folder beside this script's folder supplies the compile commands (build/compile_commands.json,
written by scripts/build.sh). SOURCE_SUBSTRINGs pick the sources whose path contains one of them. Each
torch-using source is compiled with -fsyntax-only and the build's flags, the Debian LibTorch include path
swapped for INCLUDE_DIR (and INCLUDE_DIR/torch/csrc/api/include) and <torch/torch.h> force-included as
the build's precompiled header does. --no-pch leaves that out (finds sources that compile only thanks to
the PCH). A source that pulls a header of the Debian LibTorch (/usr/include/{ATen,c10,torch,caffe2})
instead is reported as a leak. --cxxflag=FLAG adds FLAG to every compile (e.g. -DUSE_C10D_NCCL, which a
CUDA LibTorch's targets define; scripts/check-libtorch2.sh passes it); -jN runs N compiles at once (default:
the CPU count). Exit status 1 when any source fails.

Why: a GPU machine builds against pip LibTorch 2.x, which this machine cannot install; this finds API
breaks before a GPU session spends its time on them. NCCL sources need a CUDA (not ROCm) header set.
"""
import json
import os
import re
import shlex
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

DEBIAN_API_INCLUDE = '/usr/include/torch/csrc/api/include'


def main():
    if any(a in ('-h', '--help') for a in sys.argv[1:]):
        print(__doc__)
        return 0
    options = [a for a in sys.argv[1:] if a.startswith('-')]
    args = [a for a in sys.argv[1:] if not a.startswith('-')]
    pch = '--no-pch' not in options
    cxxflags = [a[len('--cxxflag='):] for a in options if a.startswith('--cxxflag=')]
    jobs_at_once = next((int(a[2:]) for a in options if re.fullmatch(r'-j[0-9]+', a)), os.cpu_count() or 1)
    unknown = [a for a in options if a != '--no-pch' and not a.startswith('--cxxflag=')
               and not re.fullmatch(r'-j[0-9]+', a)]
    if unknown:
        print(f'check-torch-headers: unknown option {unknown[0]}', file=sys.stderr)
        return 2
    if not args:
        print(__doc__, file=sys.stderr)
        return 2
    include, only = os.path.abspath(args[0]), args[1:]
    for header in ('torch/csrc/api/include/torch/torch.h', 'ATen/ATen.h'):
        if not os.path.isfile(os.path.join(include, header)):
            print(f'check-torch-headers: {include} is not a LibTorch include folder: it has no {header}',
                  file=sys.stderr)
            return 2
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    database = os.path.join(root, 'build', 'compile_commands.json')
    if not os.path.isfile(database):
        print(f'check-torch-headers: {database} not found: configure the build first (scripts/build.sh)',
              file=sys.stderr)
        return 2
    commands = json.load(open(database))
    extra = ['-isystem', include, '-isystem', include + '/torch/csrc/api/include']
    if os.path.isdir('/usr/local/cuda/include'):
        extra += ['-isystem', '/usr/local/cuda/include']
    extra += cxxflags
    if pch:
        extra += ['-include', 'torch/torch.h']
    jobs = []
    for c in commands:
        if DEBIAN_API_INCLUDE not in c['command'] or 'cmake_pch' in c['file']:
            continue
        if only and not any(o in c['file'] for o in only):
            continue
        argv, out, skip = shlex.split(c['command']), [], False
        for i, a in enumerate(argv):
            if skip:
                skip = False
            elif a in ('-include', '-o') or (a == '-isystem' and argv[i + 1] == DEBIAN_API_INCLUDE):
                skip = True
            elif a not in ('-c', '-Winvalid-pch'):
                out.append(a)
        # `out` keeps the source itself (the argument after -c).
        jobs.append((c['file'], c['directory'], [out[0]] + extra + out[1:] + ['-fsyntax-only', '-H']))
    if not jobs:
        print('check-torch-headers: no LibTorch-using source in ' + database +
              (' matches ' + ', '.join(only) if only else ''), file=sys.stderr)
        return 2

    def run(job):
        source, directory, argv = job
        r = subprocess.run(argv, cwd=directory, capture_output=True, text=True)
        headers = [l.lstrip('. ') for l in r.stderr.splitlines() if l.startswith('.')]
        leaks = sorted({h for h in headers if re.match(r'/usr/include/(ATen|c10|torch|caffe2)/', h)})
        errors = [l for l in r.stderr.splitlines() if not l.startswith('.') and 'Multiple include' not in l]
        return source, r.returncode, errors, leaks

    failed = 0
    with ThreadPoolExecutor(max(1, jobs_at_once)) as pool:
        for source, rc, errors, leaks in pool.map(run, jobs):
            ok = rc == 0 and not leaks
            failed += not ok
            print(('ok   ' if ok else 'FAIL ') + os.path.relpath(source, root), flush=True)
            for l in (errors[:30] if rc else []) + ['  Debian header: ' + h for h in leaks[:3]]:
                print('  ' + l)
    print(f'{len(jobs) - failed} of {len(jobs)} sources compile against {include}')
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main())
