"""Checks that `tpc check` refuses what `tpc compile` refuses, in the same words:
python3 check_agrees.py TPC DIR ARGS...

Runs `TPC compile ARGS --emit-only -o DIR/out` and `TPC check ARGS`. Both must fail with the
same exit code and print the same on stderr, which is then printed for FileCheck to read.
"""
import difflib
import subprocess
import sys

tpc, directory, args = sys.argv[1], sys.argv[2], sys.argv[3:]
compiled = subprocess.run([tpc, "compile", *args, "--emit-only", "-o", directory + "/out"],
                          capture_output=True, text=True)
checked = subprocess.run([tpc, "check", *args], capture_output=True, text=True)

failed = False
if compiled.returncode == 0:
    print("FAIL: tpc compile accepts this; give a case it refuses")
    failed = True
if checked.returncode != compiled.returncode:
    print(f"FAIL: tpc check exits {checked.returncode}, tpc compile {compiled.returncode}")
    failed = True
if checked.stderr != compiled.stderr:
    print("FAIL: tpc check and tpc compile say different things on stderr:")
    sys.stdout.writelines(difflib.unified_diff(compiled.stderr.splitlines(True),
                                               checked.stderr.splitlines(True),
                                               "compile", "check"))
    failed = True
sys.stdout.write(compiled.stderr)
sys.exit(1 if failed else 0)
