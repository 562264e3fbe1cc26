"""Wraps hf_model.py's tiny language model in the multimodal class its family is published
as: Gemma 3 in Gemma3ForConditionalGeneration (the 4B, 12B and 27B checkpoints), Llama 4 in
Llama4ForConditionalGeneration (Scout, Maverick):

    python wrap_multimodal.py TEXT_DIR OUT_DIR [--module-names]

TEXT_DIR is hf_model.py's gemma3 or llama4 checkpoint (its config's model_type says which).
OUT_DIR gets the wrapper with TEXT_DIR's config as its text_config, a tiny vision tower (1
layer of width 16; random, never run on text) and TEXT_DIR's weights as its language model,
saved with save_pretrained. Gemma 3's language model tensors are saved under
language_model.model.*, the layout of the checkpoints on the Hub, which transformers 5.17
renames to its modules' model.language_model.* on load and back on save; --module-names
rewrites the file with the modules' own names instead. Llama 4's are saved under its modules'
names, language_model.model.* and language_model.lm_head. Before saving, the wrapper's
transformers logits on TEXT_DIR's prompt must equal the text model's (max |diff| printed, must
be 0): so the wrapped checkpoint holds the same language model, and tpc's run of it can be
held to TEXT_DIR's reference.
"""
import argparse
import json
import os
import sys

import torch
import transformers


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("text_dir")
    ap.add_argument("out_dir")
    ap.add_argument("--module-names", action="store_true")
    args = ap.parse_args()
    transformers.utils.logging.set_verbosity_error()
    torch.set_num_threads(min(2, os.cpu_count() or 1))

    model_type = json.load(open(os.path.join(args.text_dir, "config.json")))["model_type"]
    if model_type == "gemma3_text":
        text = transformers.Gemma3ForCausalLM.from_pretrained(args.text_dir, dtype=torch.float32).eval()
        vision = transformers.SiglipVisionConfig(hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                                 num_attention_heads=2, image_size=28, patch_size=14)
        config = transformers.Gemma3Config(text_config=text.config.to_dict(), vision_config=vision.to_dict(),
                                           mm_tokens_per_image=1, eos_token_id=text.config.eos_token_id)
        wrapper_cls, inner, state = transformers.Gemma3ForConditionalGeneration, "model.language_model", text.model.state_dict()
    elif model_type == "llama4_text":
        text = transformers.Llama4ForCausalLM.from_pretrained(args.text_dir, dtype=torch.float32).eval()
        vision = transformers.Llama4VisionConfig(
            hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32, image_size=28,
            patch_size=14, vision_output_dim=16, projector_input_dim=16, projector_output_dim=16,
            pixel_shuffle_ratio=0.5)
        config = transformers.Llama4Config(text_config=text.config.to_dict(), vision_config=vision.to_dict())
        wrapper_cls, inner, state = transformers.Llama4ForConditionalGeneration, "language_model", text.state_dict()
    else:
        sys.exit(f"wrap_multimodal.py: {args.text_dir} holds a {model_type}, not gemma3_text or llama4_text")
    if args.module_names and model_type != "gemma3_text":
        sys.exit("wrap_multimodal.py: --module-names is for Gemma 3 (Llama 4 saves under its module names)")
    torch.manual_seed(0)
    wrapper = wrapper_cls(config).eval()
    missing, unexpected = wrapper.get_submodule(inner).load_state_dict(state, strict=False)
    if missing or unexpected:
        sys.exit(f"wrap_multimodal.py: the language model's weights do not fit: missing {missing}, "
                 f"unexpected {unexpected}")
    wrapper.tie_weights()
    wrapper.set_attn_implementation("eager")
    text.set_attn_implementation("eager")

    prompt = [int(x) for x in open(os.path.join(args.text_dir, "prompt.txt")).read().split(",")]
    ids = torch.tensor([prompt])
    with torch.no_grad():
        diff = float((wrapper(input_ids=ids).logits - text(input_ids=ids).logits).abs().max())
    print(f"wrapper vs text model logits: max |diff| {diff:.3g}")
    if diff != 0:
        sys.exit("wrap_multimodal.py: the wrapper's logits differ from the text model's")

    wrapper.save_pretrained(args.out_dir)
    from safetensors.torch import load_file, save_file

    path = os.path.join(args.out_dir, "model.safetensors")
    tensors = load_file(path)
    if args.module_names:
        tensors = {("model.language_model." + k[len("language_model.model."):]
                    if k.startswith("language_model.model.") else k): v for k, v in tensors.items()}
        save_file(tensors, path, metadata={"format": "pt"})
    names = sorted(k for k in tensors if "language_model" in k)
    print(f"saved {args.out_dir}: {len(tensors)} tensors, language model e.g. {names[0]}")

if __name__ == "__main__":
    main()
