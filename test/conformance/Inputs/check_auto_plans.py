"""Checks tpc's built-in table of transformers' default plans against the installed transformers:
    python check_auto_plans.py TABLE.json            compare
    python check_auto_plans.py --write OUT.json      write the table the installed transformers implies

TABLE.json: {model_type: {"tp": {full_key: strategy}, "ep": {full_key: strategy}}}, "ep" only
where the config class has a base_model_ep_plan. A full key is a key of the config class's
base_model_tp_plan (base_model_ep_plan) prefixed with the base model's attribute ("model."),
plus the *ForCausalLM class's own _tp_plan (_ep_plan) keys, e.g. "lm_head".

That is how transformers' DistributedMixin.init_parallel_plans builds model.tp_plan: the
ForCausalLM's class plan, then each child's plan prefixed with the child's name. The script
also builds each model on the meta device from its default config and checks that the
instance's _tp_plan / _ep_plan equal the table built from the classes (with expert parallelism
on, transformers uses _ep_plan alone as the plan: no lm_head, no attention).

Not in the table, because it depends on the config rather than the class: when a config has
tie_word_embeddings=True, PreTrainedConfig.__init__ adds "embed_tokens": "embedding_rowwise" to
that config's base_model_tp_plan, so the model's plan gains "model.embed_tokens":
"embedding_rowwise" (gemma and gemma2 tie by default). The meta-device check allows for it.
"""
import argparse
import json
import sys
import warnings

MODEL_TYPES = ["llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3_text", "smollm3",
               "llama4_text", "phi3", "mixtral", "qwen3_moe", "qwen2_moe", "olmo2", "deepseek_v2", "gpt_oss", "gemma3",
               "llama4"]
# Llama4ForCausalLM's base_model_prefix is "language_model", yet its model is `model`: the plan
# transformers builds has its text config's keys both under "model." (the child's, which name
# its modules) and bare (applied to the ForCausalLM itself, whose children are `model` and
# `lm_head`: they name nothing). The table keeps the first; the meta-device check drops the
# bare keys.
PREFIX = {"llama4_text": "model"}
# Multimodal wrappers whose language model tpc imports: the wrapper class and the attribute path
# of its language model. The wrapper's plan is its text model's base_model_tp_plan under that
# path plus the wrapper class's own _tp_plan (Gemma3ForConditionalGeneration has none: its
# lm_head runs replicated).
# Llama4ForConditionalGeneration holds a whole Llama4ForCausalLM as language_model: its plan is
# that model's (prefix "language_model.model", head "language_model.lm_head"); the keys of the
# vision tower, which tpc leaves out, and those that name no module are not in the table.
WRAPPERS = {"gemma3": ("Gemma3ForConditionalGeneration", "model.language_model", None),
            "llama4": ("Llama4ForConditionalGeneration", "language_model.model", "language_model")}


def expected_table(model_types=MODEL_TYPES, instantiate=True):
    import torch
    import transformers

    table, notes = {}, []
    for model_type in model_types:
        config_cls = transformers.CONFIG_MAPPING[model_type]
        head_prefix = None
        if model_type in WRAPPERS:
            lm_cls = getattr(transformers, WRAPPERS[model_type][0])
            prefix, head_prefix = WRAPPERS[model_type][1:]
            plan_cls = config_cls.sub_configs["text_config"]
        else:
            lm_cls = transformers.MODEL_FOR_CAUSAL_LM_MAPPING[config_cls]
            prefix = PREFIX.get(model_type) or lm_cls.base_model_prefix or "model"
            plan_cls = config_cls
        entry = {}
        tp = {f"{prefix}.{k}": v for k, v in (plan_cls.base_model_tp_plan or {}).items()}
        if head_prefix:  # the inner ForCausalLM's head plan, under its attribute
            inner = transformers.MODEL_FOR_CAUSAL_LM_MAPPING[plan_cls]
            tp.update({f"{head_prefix}.{k}": v for k, v in (getattr(inner, "_tp_plan", None) or {}).items()})
        else:
            tp.update(getattr(lm_cls, "_tp_plan", None) or {})
        entry["tp"] = tp
        base_ep = getattr(plan_cls, "base_model_ep_plan", None)
        if base_ep:
            ep = {f"{prefix}.{k}": v for k, v in base_ep.items()}
            if not head_prefix:
                ep.update(getattr(lm_cls, "_ep_plan", None) or {})
            entry["ep"] = ep
        elif getattr(lm_cls, "_ep_plan", None):
            notes.append(f"{model_type}: {lm_cls.__name__}._ep_plan without a base_model_ep_plan")
            entry["ep"] = dict(lm_cls._ep_plan)
        table[model_type] = entry

        if instantiate:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                config = config_cls()
                with torch.device("meta"):
                    model = lm_cls(config)
            got_tp = dict(model._tp_plan or {})
            got_ep = dict(model._ep_plan or {})
            if model_type in PREFIX or head_prefix:  # keys that name no text module
                children = {n for n, _ in model.named_children()}

                def names_something(key):
                    if head_prefix:  # the language model's own: language_model.model.*, its head
                        return key.startswith(prefix + ".") or key == f"{head_prefix}.lm_head"
                    return key.split(".")[0] in children

                dead = sorted(k for k in got_tp.keys() | got_ep.keys() if not names_something(k))
                if dead:
                    notes.append(f"{model_type}: {len(dead)} keys of its plans name no module "
                                 f"(e.g. {dead[0]!r}); left out")
                got_tp = {k: v for k, v in got_tp.items() if names_something(k)}
                got_ep = {k: v for k, v in got_ep.items() if names_something(k)}
            want_tp = dict(entry["tp"])
            if getattr(config, "tie_word_embeddings", False):
                # PreTrainedConfig.__init__ adds "embed_tokens": "embedding_rowwise" to the
                # instance's base_model_tp_plan when the word embeddings are tied
                want_tp[f"{prefix}.embed_tokens"] = "embedding_rowwise"
                notes.append(
                    f"{model_type}: ties word embeddings by default; a tied config's plan also has "
                    f"'{prefix}.embed_tokens': 'embedding_rowwise' (not in the class table)"
                )
            if got_tp != want_tp:
                notes.append(f"{model_type}: the instance's _tp_plan {got_tp} differs from the classes' {want_tp}")
            if got_ep != entry.get("ep", {}):
                notes.append(f"{model_type}: the instance's _ep_plan {got_ep} differs from the classes' {entry.get('ep', {})}")
            del model
    return table, notes


def compare(table, expected):
    problems = []
    for model_type, want in expected.items():
        got = table.get(model_type)
        if got is None:
            problems.append(f"{model_type}: missing from the table")
            continue
        for plan in ("tp", "ep"):
            w, g = want.get(plan), got.get(plan)
            if w is None and g is None:
                continue
            if w is None:
                problems.append(f"{model_type}.{plan}: the table has one, transformers has none ({len(g)} keys)")
                continue
            if g is None:
                problems.append(f"{model_type}.{plan}: missing; transformers has {json.dumps(w)}")
                continue
            for k in sorted(w.keys() - g.keys()):
                problems.append(f"{model_type}.{plan}: missing {k!r}: {w[k]!r}")
            for k in sorted(g.keys() - w.keys()):
                problems.append(f"{model_type}.{plan}: extra {k!r}: {g[k]!r} (transformers has no such key)")
            for k in sorted(w.keys() & g.keys()):
                if w[k] != g[k]:
                    problems.append(f"{model_type}.{plan}: {k!r} is {g[k]!r}, transformers says {w[k]!r}")
        for plan in sorted(set(got) - {"tp", "ep"}):
            problems.append(f"{model_type}: unknown plan kind {plan!r}")
    extra = sorted(set(table) - set(expected))
    return problems, extra


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("table", nargs="?")
    ap.add_argument("--write", metavar="OUT.json", help="write the expected table and exit")
    ap.add_argument("--no-instantiate", action="store_true", help="skip the meta-device cross-check")
    opts = ap.parse_args()
    if not opts.table and not opts.write:
        ap.error("give TABLE.json or --write OUT.json")

    import transformers

    expected, notes = expected_table(instantiate=not opts.no_instantiate)
    for note in notes:
        print(f"note: {note}")
    if opts.write:
        with open(opts.write, "w") as f:
            json.dump(expected, f, indent=2)
            f.write("\n")
        print(f"wrote {opts.write} from transformers {transformers.__version__}")
        if not opts.table:
            return 0

    table = json.load(open(opts.table))
    problems, extra = compare(table, expected)
    print(f"transformers {transformers.__version__}: {len(expected)} model types checked")
    for model_type in expected:
        if model_type in table:
            counts = ", ".join(f"{p} {len(table[model_type].get(p) or {})}/{len(expected[model_type].get(p) or {})}" for p in ("tp", "ep") if p in expected[model_type] or p in table[model_type])
            print(f"  {model_type:8s} {counts} keys (table/transformers)")
    for model_type in extra:
        print(f"  {model_type:8s} in the table, not checked")
    for p in problems:
        print(f"  DIFF {p}")
    failed = bool(problems) or any(n for n in notes if "differs" in n)
    print("auto-plans: " + ("FAILED" if failed else "ok"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
