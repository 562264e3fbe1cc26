"""Writes a Gemma 3 config.json in the layout of the released checkpoints (transformers 4.50:
rope_theta, rope_local_base_freq, a rope_scaling for the global layers and
sliding_window_pattern instead of rope_parameters and layer_types) for the model of another:

    python legacy_gemma3_config.py CONFIG.json OUT.json

CONFIG.json is hf_model.py's gemma3 config (rope_parameters keyed by layer type, layer_types
every N-th layer global). Fails unless transformers 5.17 reads OUT.json back as the same
rope_parameters and layer_types, so the two describe one model for transformers.
"""
import json
import os
import sys
import tempfile

import transformers


def main():
    src, out = sys.argv[1], sys.argv[2]
    config = json.load(open(src))
    rope = config.pop("rope_parameters")
    types = config.pop("layer_types")
    full = dict(rope["full_attention"])
    config["rope_theta"] = full.pop("rope_theta")
    config["rope_local_base_freq"] = rope["sliding_attention"]["rope_theta"]
    if full.get("rope_type", "default") != "default":
        config["rope_scaling"] = full
    pattern = types.index("full_attention") + 1
    config["sliding_window_pattern"] = pattern
    config.pop("_sliding_window_pattern", None)
    with open(out, "w") as f:
        json.dump(config, f, indent=2)
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(config, f)
        back = transformers.AutoConfig.from_pretrained(d)
    norm = lambda r: {t: {k: v for k, v in p.items()} for t, p in r.items()}
    if back.layer_types != types or norm(back.rope_parameters) != norm(rope):
        sys.exit(f"legacy_gemma3_config.py: transformers reads {out} as layer_types {back.layer_types}, "
                 f"rope_parameters {back.rope_parameters}; the original has {types}, {rope}")
    print(f"wrote {out}: sliding_window_pattern {pattern}, rope_scaling {config.get('rope_scaling')}; "
          f"transformers reads the same layer types and RoPE")


if __name__ == "__main__":
    main()
