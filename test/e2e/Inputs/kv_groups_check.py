"""Whether `tpc analyze --json`'s KV groups are what a model's config.json implies.

    python kv_groups_check.py CONFIG.json ANALYZE.json BLOCK_SIZE [RATIO]

Works out from the config alone, by counting rather than by tpc's formulas: which layers
slide (Gemma 3's sliding_window_pattern: every n-th layer global), a layer's bytes a token
(keys and values of its KV heads, fp32), and the most blocks a sliding layer's query reads
(the blocks that positions p - window + 1 .. p touch, over every p below max_seq_len). Then
the sequences of max_seq_len 1 GiB holds with the sliding layers' other blocks given back,
and without. Prints them and whether they match the report (and, given RATIO, whether the
first is at least RATIO times the second, before rounding).
"""
import json
import sys

config = json.load(open(sys.argv[1]))
report = json.load(open(sys.argv[2]))
block = int(sys.argv[3])
ratio = float(sys.argv[4]) if len(sys.argv) > 4 else None
memory = report["memory_per_rank"]
length = memory["max_seq_len"]
layers, pattern, window = (config["num_hidden_layers"], config["sliding_window_pattern"],
                           config["sliding_window"])
per_layer = 2 * config["num_key_value_heads"] * config["head_dim"] * 4
sliding = sum(1 for i in range((layers)) if (i + 1) % pattern != 0)
full = layers - sliding
read = max(p // block - max(0, p - window + 1) // block + 1 for p in range(length))
whole = -(-length // block) * block
with_window = full * whole * per_layer + sliding * read * block * per_layer
without = layers * whole * per_layer
gib = 1 << 30
failed = []
groups = {g["reads"]: g for g in memory["kv_groups"]}
expect = {"every key": (full, full * per_layer, -(-length // block)),
          f"a window of {window}": (sliding, sliding * per_layer, read)}
for reads, (count, bytes_, blocks) in expect.items():
    g = groups.get(reads)
    got = g and (g["layers"], g["bytes_per_token"], g["blocks_per_sequence"])
    if got != (count, bytes_, blocks):
        failed.append(f"{reads}: report {g}, expected {count} layers, {bytes_} bytes, "
                      f"{blocks} blocks")
if memory["kv_sequences_per_gib"] != gib // with_window:
    failed.append(f"sequences a GiB holds: report {memory['kv_sequences_per_gib']}, "
                  f"expected {gib // with_window}")
if memory["kv_sequences_per_gib_every_key"] != gib // without:
    failed.append(f"without the window: report {memory['kv_sequences_per_gib_every_key']}, "
                  f"expected {gib // without}")
print(f"{full} global and {sliding} sliding layers; a sliding layer reads at most {read} blocks; "
      f"1 GiB holds {gib / with_window:.2f} sequences of {length} tokens, "
      f"{gib / without:.2f} without the window kept ({without / with_window:.2f}x)")
if ratio is not None and without / with_window < ratio:
    failed.append(f"only {without / with_window:.2f}x, not {ratio}x")
print("\n".join(failed) if failed else "kv groups: ok")
sys.exit(1 if failed else 0)
