#!/usr/bin/env python3
"""Checks the runtime's include graph against its layers.

docs/architecture.md's table of runtime layers (between the `layers:` markers) names each
layer's folders under runtime/, its public headers under runtime/include/tpcrt/, and the layers
it may use. Every #include "..." of every runtime source and header must name its own layer or
one it may use, so the arrows between the libraries point down only and no include cycle
between folders can form. Prints each include that breaks a rule, with its line; exits 1 if
there is one, 2 if the table itself is wrong (a folder, header or layer named twice or not at
all, a cycle in the arrows).

usage: check-layers.py [REPO]
"""
import os
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def read_table(doc):
    """The rows between the markers: [(layer, library, folders, headers, uses)]."""
    rows, inside = [], False
    for line in open(doc, encoding="utf-8"):
        if "<!-- layers:" in line:
            inside = True
            continue
        if "<!-- /layers -->" in line:
            break
        if not inside or not line.startswith("|") or set(line.strip()) <= set("|- "):
            continue
        cells = [c.strip().strip("`") for c in line.strip().strip("|").split("|")]
        if cells[0] == "layer":
            continue
        words = lambda cell: [w.strip("`,") for w in cell.split() if w.strip("`,") not in ("", "-")]
        rows.append((cells[0], cells[1], words(cells[2]), words(cells[3]), words(cells[4])))
    return rows


def fail_table(message):
    print("check-layers: docs/architecture.md's layer table: " + message)
    sys.exit(2)


def main():
    repo = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else
                           os.path.join(os.path.dirname(__file__), ".."))
    runtime = os.path.join(repo, "runtime")
    public = os.path.join(runtime, "include", "tpcrt")
    rows = read_table(os.path.join(repo, "docs", "architecture.md"))
    if not rows:
        fail_table("not found (the <!-- layers: --> markers)")
    layer_of_folder, layer_of_header, uses = {}, {}, {}
    for layer, _, folders, headers, used in rows:
        if layer in uses:
            fail_table("layer %s is named twice" % layer)
        uses[layer] = set(used)
        for folder in folders:
            if folder in layer_of_folder:
                fail_table("folder %s is in two layers" % folder)
            layer_of_folder[folder] = layer
        for header in headers:
            if header in layer_of_header:
                fail_table("header %s is in two layers" % header)
            layer_of_header[header] = layer
    for layer, used in uses.items():
        for other in used:
            if other not in uses:
                fail_table("layer %s uses %s, which is no layer" % (layer, other))
    # The arrows must have no cycle: a layer may not use, through others, itself.
    def reach(layer, seen):
        for other in uses[layer]:
            if other not in seen:
                seen.add(other)
                reach(other, seen)
        return seen
    for layer in uses:
        if layer in reach(layer, set()):
            fail_table("layer %s uses itself through %s" % (layer, ", ".join(sorted(uses[layer]))))

    def header_layer(name):
        """The layer of a public header: its own row, or the row of the folder it sits in."""
        if name in layer_of_header:
            return layer_of_header[name]
        top = name.split("/")[0]
        return layer_of_header.get(top + "/")

    broken = 0
    def check(path, layer, line_no, included, resolved):
        nonlocal broken
        rel = os.path.relpath(path, repo)
        if resolved.startswith(public + os.sep):
            target = header_layer(os.path.relpath(resolved, public))
            what = "tpcrt/" + os.path.relpath(resolved, public)
        elif resolved.startswith(runtime + os.sep):
            folder = os.path.relpath(resolved, runtime).split(os.sep)[0]
            target = layer_of_folder.get(folder)
            what = os.path.relpath(resolved, repo)
        else:
            return  # outside the runtime: a system or a test header
        if target is None:
            print("%s:%d: %s is in no layer" % (rel, line_no, what))
            broken += 1
        elif target != layer and target not in uses[layer]:
            print("%s:%d: includes %s, of layer %s, which layer %s may not use" %
                  (rel, line_no, what, target, layer))
            broken += 1

    for base, dirs, files in os.walk(runtime):
        for name in sorted(files):
            if not name.endswith((".h", ".cpp", ".cu", ".inc", ".def")):
                continue
            path = os.path.join(base, name)
            if path.startswith(public + os.sep):
                layer = header_layer(os.path.relpath(path, public))
            else:
                layer = layer_of_folder.get(os.path.relpath(path, runtime).split(os.sep)[0])
            if layer is None:
                print("%s: in no layer (docs/architecture.md's table names no folder or "
                      "header for it)" % os.path.relpath(path, repo))
                broken += 1
                continue
            for line_no, line in enumerate(open(path, encoding="utf-8"), 1):
                m = INCLUDE.match(line)
                if not m:
                    continue
                included = m.group(1)
                local = os.path.normpath(os.path.join(base, included))
                resolved = local if os.path.exists(local) else os.path.join(public, "..", included)
                check(path, layer, line_no, included, os.path.normpath(resolved))
    if broken:
        print("check-layers: %d include(s) against the layers" % broken)
        return 1
    print("check-layers: %d layers, every include of the runtime points down" % len(uses))
    return 0


if __name__ == "__main__":
    sys.exit(main())
