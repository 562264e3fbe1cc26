"""Stop strings end the text where they begin, however the tokens cut them.

    python stop_strings.py COMMAND...

Runs COMMAND (a text-prompt generation with --ignore-eos; tpc launch's "[rank 0] " prefixes
and the timing line after the text are removed) once as it is, then, for stop strings taken
from that text (two characters from its middle, three from near its start, and one that
never occurs), once more with --stop each: the text must be what came before the stop
string's first occurrence, or all of it. Prints "stop strings: ok" or what differs.
"""
import re
import subprocess
import sys


def text_of(command):
    out = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, check=True)
    text = out.stdout.decode("utf-8")
    text = "".join(line[len("[rank 0] "):] if line.startswith("[rank 0] ") else line
                   for line in text.splitlines(keepends=True))
    return re.sub(r"\nprefill [0-9.]+ ms \(.*\n\Z", "", text)


def main():
    command = sys.argv[1:]
    full = text_of(command)
    if len(full) < 8:
        sys.exit(f"the text is too short to cut: {full!r}")
    stops = [full[len(full) // 2:len(full) // 2 + 2], full[3:6], "\u2603 never"]
    failures = []
    for stop in stops:
        want = full[:full.find(stop)] if stop in full else full
        got = text_of(command + ["--stop", stop])
        if got != want:
            failures.append(f"--stop {stop!r}: got {got!r}, want {want!r}")
    print("\n".join(failures) if failures else "stop strings: ok")


main()
