"""Measures the collectives transformers' own tensor parallelism issues, on CPU with Gloo:
    torchrun --nproc-per-node TP hf_collectives.py MODEL_DIR OUT.json --prompt-len P --new-tokens N

MODEL_DIR is a checkpoint written by save_pretrained (config.json + model.safetensors). The model
is loaded in fp32 with transformers' predefined plan (DistributedConfig(tp_size=world, tp_plan=
"auto"), what `from_pretrained(..., tp_plan="auto")` means in transformers 5.x), then, under
no_grad as generate runs:

  prefill  one forward of P prompt tokens with use_cache=True and logits_to_keep=1;
  decode   each of the N-1 following steps: one token, the prefill's KV cache, logits_to_keep=1.

Every collective is seen by a subclass of torch.distributed.tensor.debug.CommDebugMode (a
TorchDispatchMode that sees the c10d ops a plain `dist.all_reduce` dispatches and the
functional-collective ops DTensor's redistribute uses). CommDebugMode itself only counts; the
subclass records each collective's op, local shapes and the module running at the time, and turns
them into the full (global, unsharded) tensor's bytes:

  all_reduce       the reduced tensor                       (c10d allreduce_, funcol all_reduce)
  all_gather       the gathered output = input x group size (c10d allgather_/_allgather_base_,
                                                             funcol all_gather_into_tensor)
  reduce_scatter   the input before scattering               (c10d reduce_scatter_/_reduce_scatter_base_,
                                                             funcol reduce_scatter_tensor)
  all_to_all       every rank's input together = input x group size
  broadcast        the tensor

The per-phase totals are checked against CommDebugMode's own comm_counts, every decode step
against the first, and a final model.generate(max_new_tokens=N) against prefill + (N-1) x decode.
The prefill logits are also compared with the same checkpoint loaded without TP.

OUT.json (rank 0 writes it): {"model_type", "tp", "prompt_len", "new_tokens", "runs": bool,
"prefill": {"count", "by_kind", "bytes", "collectives": [{"kind", "bytes", "module", "op",
"shape"}]}, "decode": {...same, "steps"}, "generate": {...}, "checks": {...}} -- or, when
transformers' TP fails for the architecture, "runs": false with "stage" and "error".
"""
import argparse
import json
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # MODEL_DIR is local; never reach for the Hub
import sys
import traceback
from collections import Counter
from datetime import timedelta

import warnings

import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor
from torch.distributed.tensor.debug import CommDebugMode
from torch.utils._python_dispatch import TorchDispatchMode

c10d = torch.ops.c10d
funcol = torch.ops._c10d_functional
funcol_py = torch.ops.c10d_functional
funcol_ag = torch.ops._c10d_functional_autograd


def _nbytes(t):
    return t.numel() * t.element_size()


def _flat(x):
    if isinstance(x, torch.Tensor):
        return [x]
    out = []
    for y in x:
        out += _flat(y)
    return out


def _group_size(name_or_pg):
    try:
        if isinstance(name_or_pg, str):
            from torch.distributed.distributed_c10d import _resolve_process_group

            return dist.get_world_size(_resolve_process_group(name_or_pg))
        return name_or_pg.size()
    except Exception:
        return dist.get_world_size()


# op packet -> (kind, function(args) -> (global bytes, local shape))
def _first_list(args, i):
    return _flat(args[i])


SIZERS = {}
for pkt in (c10d.allreduce_,):
    SIZERS[pkt] = ("all_reduce", lambda a: (sum(map(_nbytes, _flat(a[0]))), [list(t.shape) for t in _flat(a[0])]))
for pkt in (c10d.allreduce_coalesced_,):
    SIZERS[pkt] = ("all_reduce", lambda a: (sum(map(_nbytes, _flat(a[0]))), [list(t.shape) for t in _flat(a[0])]))
for pkt in (funcol.all_reduce, funcol_py.all_reduce):
    SIZERS[pkt] = ("all_reduce", lambda a: (_nbytes(a[0]), list(a[0].shape)))
for pkt in (funcol.all_reduce_coalesced, funcol_py.all_reduce_coalesced):
    SIZERS[pkt] = ("all_reduce", lambda a: (sum(map(_nbytes, a[0])), [list(t.shape) for t in a[0]]))
# c10d allgather_(output_tensors: list[list[T]], input_tensors: list[T], pg, ...)
SIZERS[c10d.allgather_] = ("all_gather", lambda a: (sum(map(_nbytes, _flat(a[0]))), [list(t.shape) for t in _flat(a[1])]))
# c10d _allgather_base_(output, input, pg, ...)
SIZERS[c10d._allgather_base_] = ("all_gather", lambda a: (_nbytes(a[0]), list(a[1].shape)))
SIZERS[c10d.allgather_coalesced_] = ("all_gather", lambda a: (sum(map(_nbytes, _flat(a[0]))), [list(t.shape) for t in _flat(a[1])]))
SIZERS[c10d.allgather_into_tensor_coalesced_] = ("all_gather", lambda a: (sum(map(_nbytes, _flat(a[0]))), [list(t.shape) for t in _flat(a[1])]))
# funcol all_gather_into_tensor(input, group_size, group_name)
for pkt in (funcol.all_gather_into_tensor, funcol_py.all_gather_into_tensor):
    SIZERS[pkt] = ("all_gather", lambda a: (_nbytes(a[0]) * int(a[1]), list(a[0].shape)))
for pkt in (funcol.all_gather_into_tensor_coalesced, funcol_py.all_gather_into_tensor_coalesced):
    SIZERS[pkt] = ("all_gather", lambda a: (sum(map(_nbytes, a[0])) * int(a[1]), [list(t.shape) for t in a[0]]))
# c10d reduce_scatter_(outputs: list[T], inputs: list[list[T]], pg, ...)
SIZERS[c10d.reduce_scatter_] = ("reduce_scatter", lambda a: (sum(map(_nbytes, _flat(a[1]))), [list(t.shape) for t in _flat(a[0])]))
# c10d _reduce_scatter_base_(output, input, pg, ...)
SIZERS[c10d._reduce_scatter_base_] = ("reduce_scatter", lambda a: (_nbytes(a[1]), list(a[1].shape)))
SIZERS[c10d.reduce_scatter_tensor_coalesced_] = ("reduce_scatter", lambda a: (sum(map(_nbytes, _flat(a[1]))), [list(t.shape) for t in _flat(a[1])]))
# funcol reduce_scatter_tensor(input, reduce_op, group_size, group_name)
for pkt in (funcol.reduce_scatter_tensor, funcol_py.reduce_scatter_tensor):
    SIZERS[pkt] = ("reduce_scatter", lambda a: (_nbytes(a[0]), list(a[0].shape)))
for pkt in (funcol.reduce_scatter_tensor_coalesced, funcol_py.reduce_scatter_tensor_coalesced):
    SIZERS[pkt] = ("reduce_scatter", lambda a: (sum(map(_nbytes, a[0])), [list(t.shape) for t in a[0]]))
# all_to_all: every rank's input together
SIZERS[c10d.alltoall_base_] = ("all_to_all", lambda a: (_nbytes(a[1]) * _group_size(a[2]), list(a[1].shape)))
SIZERS[c10d.alltoall_] = ("all_to_all", lambda a: (sum(map(_nbytes, _flat(a[1]))) * _group_size(a[2]), [list(t.shape) for t in _flat(a[1])]))
for pkt in (funcol.all_to_all_single, funcol_py.all_to_all_single, funcol_ag.all_to_all_single):
    SIZERS[pkt] = ("all_to_all", lambda a: (_nbytes(a[0]) * _group_size(a[3]), list(a[0].shape)))
SIZERS[torch.ops._dtensor.shard_dim_alltoall] = ("all_to_all", lambda a: (_nbytes(a[0]) * _group_size(a[3]), list(a[0].shape)))
SIZERS[c10d.broadcast_] = ("broadcast", lambda a: (sum(map(_nbytes, _flat(a[0]))), [list(t.shape) for t in _flat(a[0])]))
for pkt in (funcol.broadcast, funcol_py.broadcast):
    SIZERS[pkt] = ("broadcast", lambda a: (_nbytes(a[0]), list(a[0].shape)))
for pkt, kind in ((c10d.gather_, "gather"), (c10d.scatter_, "scatter"), (c10d.reduce_, "reduce")):
    SIZERS[pkt] = (kind, lambda a: (sum(map(_nbytes, _flat(a[0]))), [list(t.shape) for t in _flat(a[0])]))


class SizedCommDebugMode(CommDebugMode):
    """CommDebugMode that also records, per collective, its kind, global bytes and module."""

    def __init__(self, root_name):
        super().__init__()
        self.root_name = root_name
        self.records = []
        self.unsized = Counter()

    def __enter__(self):
        self.records = []
        self.unsized = Counter()
        return super().__enter__()

    def _module(self):
        name = self.advanced_module_tracker.name
        if name == "Global":
            return None
        # ModTracker names a module "RootClass.fqn.in.named_modules"
        prefix = self.root_name + "."
        return name[len(prefix):] if name.startswith(prefix) else (None if name == self.root_name else name)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if not any(t == DTensor for t in types):
            pkt = func._overloadpacket
            if pkt in SIZERS:
                kind, sizer = SIZERS[pkt]
                nbytes, shape = sizer(args)
                dtype = None
                tensors = [t for t in _flat([x for x in args if isinstance(x, (torch.Tensor, list, tuple))]) if isinstance(t, torch.Tensor)]
                if tensors:
                    dtype = str(tensors[0].dtype).replace("torch.", "")
                self.records.append(
                    {"kind": kind, "bytes": int(nbytes), "module": self._module(), "op": str(pkt), "shape": shape, "dtype": dtype}
                )
            elif pkt in self.comm_registry or pkt in _c10d_ops():
                self.unsized[str(pkt)] += 1
        return super().__torch_dispatch__(func, types, args, kwargs)


class CollectiveRecorder(TorchDispatchMode):
    """The same sizing without CommDebugMode's module tracker, which cannot follow several
    forwards in one context (it re-registers a forward hook per call and loses its parent list),
    for whole generate() runs."""

    def __init__(self):
        super().__init__()
        self.records = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if any(t == DTensor for t in types):
            return NotImplemented
        pkt = func._overloadpacket
        if pkt in SIZERS:
            self.records.append(self.record(pkt, args))
        return func(*args, **(kwargs or {}))

    def record(self, pkt, args):
        kind, sizer = SIZERS[pkt]
        return {"kind": kind, "bytes": int(sizer(args)[0])}


# Where CommDebugMode's ModTracker fails (a module's forward hook finds its parent list empty:
# Gemma 3's rotary embedding, called once per layer type). A failed try leaves its hooks on the
# modules, so the recorder is chosen before the first forward.
TRACKER_FAILS = {"gemma3_text", "gemma3", "llama4_text", "llama4"}


class HookedRecorder(CollectiveRecorder):
    """CollectiveRecorder that also names the module running each collective, from forward
    hooks on the model's own modules: for the forwards CommDebugMode's module tracker fails on
    (torch 2.11, Gemma 3: a hook finds its parent list empty). It counts what dispatches to
    torch.distributed's ops, as CommDebugMode does; it has no comm_counts of its own."""

    def __init__(self, model):
        super().__init__()
        self.stack = []
        self.handles = []
        def enter(name):
            def hook(module, args):
                self.stack.append(name)  # returns None: the input stays as it is
            return hook

        def leave(module, args, output):
            self.stack.pop()  # returns None: the output stays as it is

        for name, module in model.named_modules():
            self.handles.append(module.register_forward_pre_hook(enter(name)))
            self.handles.append(module.register_forward_hook(leave))

    def __exit__(self, *exc):
        for h in self.handles:
            h.remove()
        return super().__exit__(*exc)

    def record(self, pkt, args):
        kind, sizer = SIZERS[pkt]
        nbytes, shape = sizer(args)
        module = self.stack[-1] if self.stack and self.stack[-1] else None
        tensors = [t for t in _flat([x for x in args if isinstance(x, (torch.Tensor, list, tuple))]) if isinstance(t, torch.Tensor)]
        dtype = str(tensors[0].dtype).replace("torch.", "") if tensors else None
        return {"kind": kind, "bytes": int(nbytes), "module": module, "op": str(pkt), "shape": shape, "dtype": dtype}


def _c10d_ops():
    from torch.distributed.tensor.debug._comm_mode import c10d_collective_ops

    return c10d_collective_ops


def summarize(records):
    by_kind = Counter(r["kind"] for r in records)
    return {
        "count": len(records),
        "by_kind": dict(sorted(by_kind.items())),
        "bytes": sum(r["bytes"] for r in records),
        "collectives": records,
    }


def key(records):
    return [(r["kind"], r["module"], r["bytes"]) for r in records]


def allow_cpu_tp_without_accelerate():
    """transformers' TP setup returns device_map="cpu" on a CPU mesh, and from_pretrained then
    insists on `accelerate` for any device_map, although a single-device CPU map needs none of it.
    Without accelerate installed, drop that map (CPU is where from_pretrained loads anyway); the TP
    plan is applied from the device mesh alone (maybe_distribute_model). Returns what was done."""
    from transformers.utils import is_accelerate_available

    if is_accelerate_available():
        return None
    try:
        from transformers.distributed.mixin import DistributedMixin
    except ImportError:
        return None
    original = DistributedMixin.prepare_distribute_model.__func__

    def prepare_distribute_model(cls, *args, **kwargs):
        config, device_map, mesh = original(cls, *args, **kwargs)
        if mesh is not None and mesh.device_type == "cpu" and str(device_map).split(":")[0] == "cpu":
            device_map = None
        return config, device_map, mesh

    DistributedMixin.prepare_distribute_model = classmethod(prepare_distribute_model)
    return "accelerate is not installed: DistributedMixin.prepare_distribute_model patched to return device_map=None for a CPU mesh"


def load_tp_model(model_dir, world, expert_parallel=False):
    import transformers

    kwargs = dict(dtype=torch.float32)
    try:
        from transformers.distributed import DistributedConfig

        ep = ", enable_expert_parallel=True" if expert_parallel else ""
        kwargs["distributed_config"] = DistributedConfig(tp_size=world, tp_plan="auto", enable_expert_parallel=expert_parallel)
        how = f"from_pretrained(dtype=float32, distributed_config=DistributedConfig(tp_size={world}, tp_plan='auto'{ep}))"
    except ImportError:  # transformers 4.x
        if expert_parallel:
            raise
        kwargs["tp_plan"] = "auto"
        how = "from_pretrained(dtype=float32, tp_plan='auto')"
    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, **kwargs)
    model.eval()
    return model, how


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model_dir")
    ap.add_argument("out")
    ap.add_argument("--prompt-len", type=int, default=8)
    ap.add_argument("--new-tokens", type=int, default=2)
    ap.add_argument("--expert-parallel", action="store_true", help="load with the config's base_model_ep_plan (MoE)")
    ap.add_argument("--no-reference", action="store_true", help="skip the logits check against a non-TP load")
    opts = ap.parse_args()
    if opts.new_tokens < 2:
        ap.error("--new-tokens must be at least 2 (one prefill and at least one decode step)")

    torch.set_num_threads(1)
    warnings.filterwarnings("ignore", message="For backward hooks to be called")
    # Gloo on CPU; transformers would pick the same, but the timeout is ours: a rank that fails
    # alone must not leave the other waiting for two hours.
    dist.init_process_group("gloo", timeout=timedelta(seconds=300))
    rank, world = dist.get_rank(), dist.get_world_size()

    import transformers

    try:
        config = transformers.AutoConfig.from_pretrained(opts.model_dir)
        model_type = config.model_type
    except Exception as e:
        config, model_type, config_error = None, None, e
    result = {
        "model_type": model_type,
        "model_dir": opts.model_dir,
        "tp": world,
        "backend": dist.get_backend(),
        "prompt_len": opts.prompt_len,
        "new_tokens": opts.new_tokens,
        "expert_parallel": opts.expert_parallel,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "bytes": "full (global, unsharded) tensor bytes: all_reduce the tensor, all_gather the gathered output, "
        "reduce_scatter the input, all_to_all all ranks' inputs together",
    }

    def fail(stage, exc):
        result["runs"] = False
        result["stage"] = stage
        result["error"] = f"{type(exc).__name__}: {exc}"
        result["traceback"] = traceback.format_exc()
        if rank == 0:
            with open(opts.out, "w") as f:
                json.dump(result, f, indent=2)
                f.write("\n")
        print(f"[rank {rank}] transformers TP fails at {stage}: {result['error']}", file=sys.stderr)
        sys.exit(1)

    if config is None:
        try:
            raise config_error
        except Exception as e:
            fail("config", e)
    result["workaround"] = allow_cpu_tp_without_accelerate()
    try:
        model, how = load_tp_model(opts.model_dir, world, opts.expert_parallel)
    except Exception as e:
        fail("load", e)
    result["loaded_with"] = how
    result["tp_plan"] = dict(model.tp_plan)
    root = type(model).__name__

    gen = torch.Generator().manual_seed(1234)
    vocab = config.get_text_config().vocab_size
    input_ids = torch.randint(3, vocab, (1, opts.prompt_len), generator=gen)  # identical on every rank

    # ---- prefill
    # CommDebugMode, or where its module tracker fails on this forward, HookedRecorder.
    def recorder():
        return SizedCommDebugMode(root) if result.get("counted_by") is None else HookedRecorder(model)

    def comm_count(mode, records):  # None: no second count to check against
        return sum(mode.comm_counts.values()) if isinstance(mode, CommDebugMode) else None

    if model_type in TRACKER_FAILS:
        result["counted_by"] = ("HookedRecorder: CommDebugMode's module tracker fails on this forward "
                                "(torch 2.11: IndexError in _fw_set_module_hook), and leaves its hooks behind")
    try:
        with torch.no_grad(), recorder() as mode:
            out = model(input_ids=input_ids, use_cache=True, logits_to_keep=1)
        prefill = summarize(mode.records)
        prefill_comm_counts = comm_count(mode, mode.records)
        prefill_unsized = dict(getattr(mode, "unsized", {}))
    except Exception as e:
        fail("prefill", e)
    logits = out.logits[:, -1, :].float()
    past = out.past_key_values
    token = logits.argmax(-1, keepdim=True)

    # ---- decode steps
    steps = []
    decode_comm_counts = []
    decode_unsized = Counter()
    try:
        for _ in range(opts.new_tokens - 1):
            with torch.no_grad(), recorder() as mode:
                out = model(input_ids=token, past_key_values=past, use_cache=True, logits_to_keep=1)
            steps.append(mode.records)
            decode_comm_counts.append(comm_count(mode, mode.records))
            decode_unsized.update(getattr(mode, "unsized", {}))
            past = out.past_key_values
            token = out.logits[:, -1, :].argmax(-1, keepdim=True)
    except Exception as e:
        fail("decode", e)
    decode = summarize(steps[0])
    decode["steps"] = len(steps)

    # ---- generate, to check prefill + (N-1) x decode is what generate issues
    generate = None
    try:
        with torch.no_grad(), CollectiveRecorder() as mode:
            generated = model.generate(
                input_ids,
                attention_mask=torch.ones_like(input_ids),
                max_new_tokens=opts.new_tokens,
                min_new_tokens=opts.new_tokens,
                do_sample=False,
                pad_token_id=0,
            )
        generate = summarize(mode.records)
        generate["new_tokens"] = int(generated.shape[1] - input_ids.shape[1])
        del generate["collectives"]
        generate_records = mode.records
    except Exception as e:
        generate = {"error": f"{type(e).__name__}: {e}"}

    checks = {
        # None where HookedRecorder counted (CommDebugMode's own count does not exist then)
        "prefill_matches_comm_debug_mode_count": None if prefill_comm_counts is None else prefill["count"] == prefill_comm_counts,
        "decode_matches_comm_debug_mode_count": None if prefill_comm_counts is None else all(len(s) == c for s, c in zip(steps, decode_comm_counts)),
        "decode_steps_identical": all(key(s) == key(steps[0]) for s in steps),
        "unsized_collectives": {**prefill_unsized, **dict(decode_unsized)},
    }
    if "count" in generate:
        expected = [(r["kind"], r["bytes"]) for r in prefill["collectives"]]
        for s in steps:
            expected += [(r["kind"], r["bytes"]) for r in s]
        checks["generate_count"] = generate["count"]
        checks["generate_expected_count"] = len(expected)
        # generate issues exactly the prefill's collectives then each decode step's, same kinds and bytes
        checks["generate_matches"] = (
            [(r["kind"], r["bytes"]) for r in generate_records] == expected
            and generate["new_tokens"] == opts.new_tokens
        )

    # ---- numerics against the same checkpoint without TP
    if not opts.no_reference:
        try:
            ref = transformers.AutoModelForCausalLM.from_pretrained(opts.model_dir, dtype=torch.float32).eval()
            with torch.no_grad():
                ref_logits = ref(input_ids=input_ids, use_cache=True, logits_to_keep=1).logits[:, -1, :].float()
            checks["prefill_logits_max_abs_diff_vs_no_tp"] = float((ref_logits - logits).abs().max())
        except Exception as e:
            checks["prefill_logits_max_abs_diff_vs_no_tp"] = f"reference failed: {type(e).__name__}: {e}"

    result.update(runs=True, prefill=prefill, decode=decode, generate=generate, checks=checks)
    if rank == 0:
        with open(opts.out, "w") as f:
            json.dump(result, f, indent=2)
            f.write("\n")
        for phase in ("prefill", "decode"):
            s = result[phase]
            print(f"{config.model_type} tp{world} {phase}: {s['count']} collectives {s['by_kind']}, {s['bytes']} bytes")
        print(f"checks: {json.dumps(checks)}")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
