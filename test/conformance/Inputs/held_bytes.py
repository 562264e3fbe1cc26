"""The bytes tpc holds a GGUF file's weights in against the file's own tensor bytes:

    python held_bytes.py FILE.gguf ANALYZE.txt

FILE's tensors' bytes as gguf-py's GGUFReader counts them (each tensor's n_bytes: its blocks,
nothing widened), against the `weights N bytes` line of `tpc analyze --tp 1` (ANALYZE.txt),
which must be equal: every matrix held in its own blocks, the F32 vectors as F32. Prints
`bytes: file N, held N: equal` or exits non-zero saying both and the types of the file.
"""
import collections
import re
import sys

from gguf import GGUFReader


def main():
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    reader = GGUFReader(sys.argv[1])
    in_file = sum(int(t.n_bytes) for t in reader.tensors)
    types = collections.Counter(t.tensor_type.name for t in reader.tensors)
    with open(sys.argv[2]) as f:
        match = re.search(r"^\s*weights\s+(\d+) bytes", f.read(), re.M)
    if not match:
        raise SystemExit(f"held_bytes.py: no 'weights N bytes' line in {sys.argv[2]}")
    held = int(match.group(1))
    listed = ", ".join(f"{n} {t}" for t, n in sorted(types.items()))
    if held != in_file:
        raise SystemExit(f"held_bytes.py: tpc holds {held} bytes, the file's tensors take "
                         f"{in_file} ({listed})")
    print(f"bytes: file {in_file}, held {held}: equal ({listed})")


if __name__ == "__main__":
    main()
