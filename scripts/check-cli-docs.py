#!/usr/bin/env python3
"""Checks docs/cli.md's synopses against what the commands accept.

The synopsis of a command in docs/cli.md is the first ``` block under its heading. Each
--flag it names must be one the command's --help lists, and each flag --help lists must be in
the synopsis (--help itself aside). The help comes from the programs, whose flags come from one
table (runtime/include/tpcrt/flags.def): a flag added to the table and not to the page, or
renamed in the table and not on the page, fails here. Prints what differs; exits 1 if
anything does.

usage: check-cli-docs.py CLI_MD COMMAND=HELP_FILE...
  COMMAND: run, serve or binary (the sections "tpc run", "tpc serve", "The emitted binary")
  e.g. check-cli-docs.py docs/cli.md run=run.txt binary=binary.txt
"""
import re
import sys

FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")
# An option line of --help: CLI11's "  -v,--verbose ..." or the binary's "  --trace FILE ...";
# a flag named in the text of a help line is not one.
HELP_OPTION = re.compile(r"^\s{2}(?:-\w,\s?)?(--[a-z][a-z0-9-]*)")


SECTIONS = {"run": "tpc run", "serve": "tpc serve", "binary": "The emitted binary"}


def synopsis(page, heading):
    """The flags of the first ``` block after `## heading`."""
    lines = open(page, encoding="utf-8").read().splitlines()
    try:
        start = lines.index("## " + heading)
    except ValueError:
        sys.exit(f"check-cli-docs: {page} has no section '## {heading}'")
    inside, flags = False, set()
    for line in lines[start + 1:]:
        if line.startswith("```"):
            if inside:
                return flags
            inside = True
        elif line.startswith("## "):
            break
        elif inside:
            flags.update(FLAG.findall(line))
    sys.exit(f"check-cli-docs: section '## {heading}' of {page} has no synopsis block")


def listed(help_file):
    flags = set()
    for line in open(help_file, encoding="utf-8"):
        match = HELP_OPTION.match(line)
        if match:
            flags.add(match.group(1))
    flags.discard("--help")
    return flags


def main(argv):
    if len(argv) < 3:
        sys.exit(__doc__)
    page, wrong = argv[1], 0
    for pair in argv[2:]:
        command, _, help_file = pair.partition("=")
        if command not in SECTIONS:
            sys.exit(f"check-cli-docs: no command '{command}': give one of {', '.join(SECTIONS)}")
        heading = SECTIONS[command]
        documented, accepted = synopsis(page, heading), listed(help_file)
        for flag in sorted(accepted - documented):
            print(f"{page}: the synopsis of '{heading}' lacks {flag}, which its --help lists")
            wrong += 1
        for flag in sorted(documented - accepted):
            print(f"{page}: the synopsis of '{heading}' names {flag}, which its --help does "
                  f"not list")
            wrong += 1
        if not accepted:
            print(f"{help_file}: no options in it: is it a --help?")
            wrong += 1
    if wrong:
        print(f"check-cli-docs: {wrong} difference(s) between {page} and the commands")
        return 1
    print(f"check-cli-docs: {len(argv) - 2} synopses name exactly the flags their commands take")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
