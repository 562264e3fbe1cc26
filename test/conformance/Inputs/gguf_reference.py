"""transformers' reference for a GGUF file, in hf_model.py's format (for conform.py):

    python gguf_reference.py GGUF OUTDIR [QUESTION]

transformers 5.17 loads GGUF with its own GGUF loader (from_pretrained(dir, gguf_file=...,
dtype=torch.float32): every tensor dequantized by gguf-py, the converter's q/k permutation
undone), renders QUESTION as a user message through the file's chat template with the
generation prompt, and runs greedy generate for 16 tokens (eos ignored); the teacher-forced
logits are one forward pass over prompt + greedy[:15]. Writes OUTDIR/reference.json,
reference.bin (16 rows x vocab float32), prompt.txt and force.txt, as hf_model.py does, and
OUTDIR/answer.txt: the greedy answer as generate gives it (stopping at the model's eos, at most
48 tokens), decoded without special tokens, as `tpc run --chat` prints it.
Needs gguf-py on PYTHONPATH.
"""
import json
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
import torch
import transformers
from transformers import AutoModelForCausalLM, AutoTokenizer

NEW_TOKENS = 16


def main():
    if len(sys.argv) not in (3, 4):
        raise SystemExit(__doc__)
    gguf, outdir = sys.argv[1], sys.argv[2]
    question = sys.argv[3] if len(sys.argv) == 4 else "What is the capital of France?"
    torch.set_num_threads(min(2, os.cpu_count() or 1))
    transformers.utils.logging.disable_progress_bar()
    transformers.utils.logging.set_verbosity_error()
    directory, name = os.path.split(os.path.abspath(gguf))
    tok = AutoTokenizer.from_pretrained(directory, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(directory, gguf_file=name, dtype=torch.float32)
    model.eval()
    text = tok.apply_chat_template([{"role": "user", "content": question}], tokenize=False,
                                   add_generation_prompt=True)
    prompt = tok(text, add_special_tokens=False)["input_ids"]
    ids = torch.tensor([prompt])
    with torch.no_grad():
        out = model.generate(ids, do_sample=False, max_new_tokens=NEW_TOKENS, min_new_tokens=0,
                             eos_token_id=None, return_dict_in_generate=True)
        greedy = out.sequences[0, len(prompt):].tolist()
        full = torch.tensor([prompt + greedy[: NEW_TOKENS - 1]])
        logits = model(full).logits[0, len(prompt) - 1:].float()
        answer = model.generate(ids, do_sample=False, max_new_tokens=48)[0, len(prompt):]
    with open(os.path.join(outdir if os.path.isdir(outdir) else os.makedirs(outdir) or outdir,
                           "answer.txt"), "w") as f:
        f.write(tok.decode(answer, skip_special_tokens=True))
    if len(greedy) != NEW_TOKENS:
        raise SystemExit(f"gguf_reference.py: generate made {len(greedy)} tokens")
    os.makedirs(outdir, exist_ok=True)
    logits.numpy().astype("<f4").tofile(os.path.join(outdir, "reference.bin"))
    ref = {"arch": f"{model.config.model_type} (GGUF {name})", "prompt": prompt,
           "greedy": greedy, "teacher_logits_file": "reference.bin",
           "vocab": int(logits.shape[-1]), "transformers": transformers.__version__,
           "torch": torch.__version__}
    with open(os.path.join(outdir, "reference.json"), "w") as f:
        json.dump(ref, f, indent=1)
    for file, values in (("prompt.txt", prompt), ("force.txt", greedy)):
        with open(os.path.join(outdir, file), "w") as f:
            f.write(",".join(map(str, values)) + "\n")
    print(f"reference: {len(prompt)} prompt tokens, greedy {' '.join(map(str, greedy))} "
          f"({tok.decode(greedy)!r})")


if __name__ == "__main__":
    main()
