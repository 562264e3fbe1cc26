"""Prints what `tpc run` streamed before its summary line (a newline, then "prefill ..."),
byte for byte: the generated text alone."""
import sys

data = open(sys.argv[1], "rb").read()
cut = data.rfind(b"\nprefill ")
if cut < 0:
    sys.exit(f"{sys.argv[1]}: no summary line")
sys.stdout.buffer.write(data[:cut])
