"""The HF sampler (``HFPolicy.generate``) against transformers' fastest ``generate`` and vLLM's engine.

Goal, on one H200: our sampler generates at least as many tokens/s as transformers' best
``generate``, the GPU is >= 50% busy while it samples, and RFT's 2,048 episodes of ``make learn``
play >= 10x faster than the ~6 episodes/s measured before (>= 60 episodes/s, ``--episodes``).

    python benchmarks/bench_sampler.py [--policy hf:smollm2-135m] [--batch 64,256] [--max-new 48]
        [--rounds 3] [--dtype bf16] [--device auto] [--json OUT]
    python benchmarks/bench_sampler.py --episodes [--batch 256] ...      # whole multi-turn episodes
    python benchmarks/bench_sampler.py --policy hf:tiny --batch 4 --max-new 16 --rounds 1   # CPU dry run

The workload is ``make learn``'s (``experiments.learn``): prm/Math-v0 word problems (levels 5-6,
training phrasings), the compact tool prompt of its trained phases, one distinct task a row. Token
mode samples each row's first turn; the sides, alternated in one process (ours, transformers, vLLM,
ours, ...) after one untimed warm-up each (which compiles), on the same weights:

* ``ours``: ``HFPolicy(..., reuse_prefixes=True)``, a fresh policy every round (no cache of an
  earlier round answers), returning every sampled id's log-prob;
* ``transformers``: ``model.generate`` with ``cache_implementation="static"`` and, on a GPU, the
  forward compiled by transformers (``torch.compile``, CUDA graphs); a compile that fails falls
  back to the static cache uncompiled, and the printed line says why;
* ``vllm``: ``vllm.LLM`` on the same weights saved to a folder (prefix caching off, so no earlier
  round answers its prefill), where ``import vllm`` works; else the row says why not.

Like for like: the same prompt ids (left-padded for ``generate``), ``max_new_tokens``, temperature
(``do_sample``, top-k 0, top-p 1), dtype (``--dtype bf16``: the bfloat16 sampling copy our trainer
uses, shared by every side), no stop strings and no ``min_new_tokens``: every side ends a row at
the tokenizer's EOS and the generated tokens counted are each row's ids up to and including its
first EOS (``generate``'s padding after it is not counted). The GPU's busy share is sampled
(:mod:`gpu_busy`) during each timed call; "n/a" on a CPU.

``--episodes`` plays whole episodes through the trainer's rollout (``rollout_episodes``): RFT's
episode list (its tasks and reset seeds, groups of ``--group``), ``--batch`` envs side by side, up
to 4 turns of ``--max-new`` ids with make learn's stop strings and the calculator, after an
untimed warm-up on up to 16 episodes, fresh episodes every round, and prints episodes/s.

Without a GPU and with the default policy it prints skipped rows (``run_all.py``); ``--device cpu``
or another ``--policy`` runs it on the CPU anyway.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
from gpu_busy import BusySampler, fmt_share  # noqa: E402
from result_line import emit, median, skipped, spread  # noqa: E402

DEFAULT_POLICY = "hf:smollm2-135m"
GOAL = (
    "goal (one H200): tokens/s >= transformers' best generate; GPU >= 50% busy while sampling; "
    "RFT's 2,048 episodes >= 10x faster than the measured ~6 episodes/s (>= 60 episodes/s)"
)
EPISODES_GOAL = 60.0
Side = Callable[[list[list[int]], int], tuple[int, float, float | None]]
"""A side's timed call: ``(prompts, seed) -> (generated tokens, seconds, GPU busy share)``."""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--policy", default=DEFAULT_POLICY, help="hf:smollm2-135m, hf:<dir>, hf:tiny (CPU dry run)")
    p.add_argument("--device", default="auto", help="auto|cpu|cuda|cuda:N")
    p.add_argument("--dtype", choices=["fp32", "bf16"], default="bf16", help="the sampling weights, every side")
    p.add_argument("--batch", default="64,256", help="comma-separated rows a call (episodes mode: envs side by side)")
    p.add_argument("--max-new", type=int, default=48, help="max new tokens a turn (make learn's 48)")
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--rounds", type=int, default=3, help="timed rounds per side, alternated")
    p.add_argument("--sides", default="ours,transformers,vllm", help="token mode: comma-separated; ours always")
    p.add_argument("--hf-compile", choices=["auto", "on", "off"], default="auto", help="auto: on a GPU only")
    p.add_argument("--episodes", action="store_true", help="play whole multi-turn episodes, print episodes/s")
    p.add_argument("--group", type=int, default=16, help="episodes mode: GRPO group size (make gpu-learn's 16)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", default="", help="write the measurements here")
    args = p.parse_args(argv)
    try:
        args.batches = [int(b) for b in args.batch.split(",") if b.strip()]
    except ValueError:
        args.batches = []
    if not args.batches or min(args.batches) < 1 or args.rounds < 1 or args.max_new < 1:
        p.error("--batch takes comma-separated positive integers; --rounds and --max-new >= 1")
    return args


def sync(device: Any) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


class Timed:
    """``with Timed(device) as t:`` a timed section, the GPU synchronised at both ends and its busy
    share sampled during it: ``t.seconds``, ``t.busy`` (None on a CPU)."""

    def __init__(self, device: Any):
        self.device = device
        self.sampler = BusySampler(device.index or 0) if device.type == "cuda" else None
        self.seconds: float = 0.0
        self.busy: float | None = None

    def __enter__(self) -> Timed:
        sync(self.device)
        if self.sampler:
            self.sampler.start()
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        sync(self.device)
        self.seconds = time.perf_counter() - self.t0
        if self.sampler:
            self.busy = self.sampler.stop().share


def mean_share(shares: list[float | None]) -> float | None:
    """The mean of the measured busy shares (None when none was measured: a CPU)."""
    got = [x for x in shares if x is not None]
    return sum(got) / len(got) if got else None


def first_turn_prompts(tok: Any, n: int) -> list[list[int]]:
    """The first-turn prompt ids of ``n`` distinct training tasks of make learn (compact tool prompt)."""
    import gymnasium as gym

    from experiments import learn
    from prm_gym.core.seams import trainer_env

    study = learn.parse_args(["--device", "cpu"])
    env = gym.make("prm/Math-v0", **learn.env_kwargs(study))
    ids = list(trainer_env(env).tasks.ids)
    chat = learn.chat_for(tok)
    out = []
    for k in range(n):
        obs, info = env.reset(seed=k, options={"task_id": ids[k % len(ids)]})
        out.append(chat.prompt_ids(obs, info.get("tools", [])))
    env.close()
    return out


def ours_side(model: Any, tok: Any, device: Any, max_new: int, temperature: float) -> Side:
    from prm_gym.agents.hf import HFPolicy
    from prm_gym.core.policy import SamplingParams

    params = SamplingParams(max_new_tokens=max_new, temperature=temperature, stop=())

    def run(prompts: list[list[int]], seed: int) -> tuple[int, float, float | None]:
        policy = HFPolicy(model, tok, seed=seed, reuse_prefixes=True)  # fresh: no earlier round's caches
        with Timed(device) as t:
            n = sum(len(g.token_ids) for g in policy.generate(prompts, params))
        return n, t.seconds, t.busy

    return run


class TransformersSide:
    """transformers' ``generate`` with a static cache, its forward compiled on a GPU (``--hf-compile``).

    The first call (the warm-up) compiles; if that fails, it says why and runs uncompiled from then on.
    """

    def __init__(self, model: Any, tok: Any, device: Any, args: argparse.Namespace):
        from transformers import GenerationConfig

        self.model, self.device, self.args, self.eos = model, device, args, tok.eos_token_id
        self.pad = tok.pad_token_id or 0
        model.generation_config = GenerationConfig(
            eos_token_id=self.eos, pad_token_id=self.eos
        )  # no checkpoint defaults
        self.compile = args.hf_compile == "on" or (args.hf_compile == "auto" and device.type == "cuda")
        self.how = ""

    def generate(self, prompts: list[list[int]]) -> int:
        import torch

        width = max(len(p) for p in prompts)
        ids = torch.full((len(prompts), width), self.pad, dtype=torch.long)
        mask = torch.zeros((len(prompts), width), dtype=torch.long)
        for i, p in enumerate(prompts):
            ids[i, width - len(p) :], mask[i, width - len(p) :] = torch.tensor(p), 1
        t = self.args.temperature
        sample = {"do_sample": True, "temperature": t, "top_k": 0, "top_p": 1.0} if t > 0 else {"do_sample": False}
        with torch.no_grad():
            out = self.model.generate(
                input_ids=ids.to(self.device),
                attention_mask=mask.to(self.device),
                max_new_tokens=self.args.max_new,
                eos_token_id=self.eos,
                pad_token_id=self.eos,
                cache_implementation="static",
                disable_compile=not self.compile,
                **sample,
            )
        new = out[:, width:]
        hit = new == self.eos
        ends = torch.where(hit.any(1), hit.int().argmax(1) + 1, new.shape[1])  # up to and including EOS
        return int(ends.sum())

    def __call__(self, prompts: list[list[int]], seed: int) -> tuple[int, float, float | None]:
        import torch

        torch.manual_seed(seed)  # generate draws from the global RNG
        if not self.how:  # the first call (the warm-up) compiles, or finds out that it cannot
            try:
                self.generate(prompts)
            except Exception as exc:
                if not self.compile:
                    raise
                self.compile = False
                print(f"transformers: compiled generate failed ({type(exc).__name__}: {exc}); uncompiled", flush=True)
            why = "" if self.compile or self.device.type == "cuda" else " (transformers compiles on a GPU only)"
            self.how = f"generate, static cache, {'torch.compile' if self.compile else 'not compiled'}{why}"
        with Timed(self.device) as t:
            n = self.generate(prompts)
        return n, t.seconds, t.busy


def vllm_side(model: Any, tok: Any, args: argparse.Namespace, device: Any) -> tuple[Side | None, str]:
    """vLLM's engine on the same weights, or None and why not."""
    try:
        import vllm
    except Exception as exc:  # not installed, or built for another torch
        return None, f"vllm does not import ({type(exc).__name__}: {str(exc)[:120]})"
    if device.type != "cuda":
        return None, "vLLM's engine runs on the GPU here; this run is on the CPU"
    try:
        folder = tempfile.mkdtemp(prefix="bench-sampler-vllm-")
        model.save_pretrained(folder)
        tok.save_pretrained(folder)
        dtype = "bfloat16" if args.dtype == "bf16" else "float32"
        llm = vllm.LLM(
            model=folder, dtype=dtype, seed=args.seed, gpu_memory_utilization=0.3, enable_prefix_caching=False
        )
    except Exception as exc:
        return None, f"vLLM's engine did not start ({type(exc).__name__}: {str(exc)[:160]})"
    eos = tok.eos_token_id

    def run(prompts: list[list[int]], seed: int) -> tuple[int, float, float | None]:
        sp = vllm.SamplingParams(
            temperature=args.temperature, top_p=1.0, max_tokens=args.max_new, stop_token_ids=[eos], seed=seed
        )
        batch = [{"prompt_token_ids": p} for p in prompts]
        with Timed(device) as t:
            n = sum(len(o.outputs[0].token_ids) for o in llm.generate(batch, sp, use_tqdm=False))
        return n, t.seconds, t.busy

    return run, f"vllm {vllm.__version__} LLM, {dtype}, prefix caching off"


def sampling_model(args: argparse.Namespace, device: Any) -> tuple[Any, Any]:
    """The policy's model on ``device`` in ``--dtype`` (bf16: the trainer's bfloat16 sampling copy)."""
    from experiments import learn
    from prm_gym.agents.hf import HFPolicy

    model, tok = learn.load_hf(args.policy, args.seed)
    model = model.to(device).eval()
    if args.dtype == "bf16":
        model = HFPolicy(model, tok, sample_dtype="bfloat16").sampler_model()
    return model, tok


def token_mode(args: argparse.Namespace, device: Any, record: dict[str, Any]) -> None:
    model, tok = sampling_model(args, device)
    sides: dict[str, Side] = {"ours": ours_side(model, tok, device, args.max_new, args.temperature)}
    how: dict[str, str] = {"ours": "HFPolicy.generate, reuse_prefixes=True, log-probs returned"}
    wanted = set(args.sides.split(","))
    hf = TransformersSide(model, tok, device, args) if "transformers" in wanted else None
    if hf is not None:
        sides["transformers"] = hf
    if "vllm" in wanted:
        run, how["vllm"] = vllm_side(model, tok, args, device)
        if run is None:
            print(f"vllm: skipped, {how['vllm']}", flush=True)
            skipped("sampler", "first-turn sampling vs vLLM", "vLLM's engine", how["vllm"], "tokens/s")
        else:
            sides["vllm"] = run
    print(GOAL)
    for b in args.batches:
        prompts = first_turn_prompts(tok, b)
        lengths = sorted(len(p) for p in prompts)
        cond = (
            f"{b} prompts of {lengths[0]}-{lengths[-1]} ids (median {lengths[len(lengths) // 2]}), "
            f"max_new {args.max_new}, temperature {args.temperature}, {args.dtype}, {device}, "
            "EOS-only stop, tokens counted to the first EOS on every side"
        )
        for run in sides.values():
            run(prompts, args.seed + 999)  # warm-up: compiles, fills caches of kernels
        if hf is not None:
            how["transformers"] = hf.how
        results: dict[str, list[tuple[int, float, float | None]]] = {name: [] for name in sides}
        for r in range(args.rounds):
            for name, run in sides.items():
                results[name].append(run(prompts, args.seed + r))
        record["rows"].append(report_batch(b, cond, results, how, args, device))
        save(record, args.json)  # each batch as it is measured: a phase cut short keeps what it finished


def report_batch(
    b: int,
    cond: str,
    results: dict[str, list[tuple[int, float, float | None]]],
    how: dict[str, str],
    args: argparse.Namespace,
    device: Any,
) -> dict[str, Any]:
    print(f"\nbatch {b}: {cond}")
    print("| system | tokens/s median (min-max) | GPU busy | generated tokens | s a call | how |")
    print("|---|---|---|---|---|---|")
    row: dict[str, Any] = {"batch": b, "conditions": cond, "sides": {}}
    rates = {name: [n / s for n, s, _ in rs] for name, rs in results.items()}
    for name, rs in results.items():
        share = mean_share([x for _, _, x in rs])
        seconds = [s for _, s, _ in rs]
        print(
            f"| {name} | {median(rates[name]):,.0f} ({spread(rates[name])}) | {fmt_share(share)} | "
            f"{median([n for n, _, _ in rs]):,.0f} | {median(seconds):.2f} | {how[name]} |"
        )
        row["sides"][name] = {"tokens_per_s": rates[name], "busy_share": share, "seconds": seconds, "how": how[name]}
    ours_busy = row["sides"]["ours"]["busy_share"]
    print(f"goal check, batch {b}: GPU busy while ours samples {fmt_share(ours_busy)} (goal >= 50%)")
    for name in results:
        if name == "ours":
            continue
        emit(
            "sampler",
            f"first-turn sampling, batch {b}, {args.dtype} ({device.type}) vs {name}",
            median(rates["ours"]),
            median(rates[name]),
            f"{name}: {how[name]}",
            "tokens/s",
            "higher",
            spread=f"ours {spread(rates['ours'])}, baseline {spread(rates[name])}",
            note=f"{args.policy}; {cond}; ours GPU busy {fmt_share(ours_busy)}",
        )
    return row


def episodes_mode(args: argparse.Namespace, device: Any, record: dict[str, Any]) -> None:
    import gymnasium as gym

    from experiments import learn
    from prm_gym.agents.hf import HFPolicy
    from prm_gym.agents.rollout import rollout_episodes
    from prm_gym.core.policy import SamplingParams
    from prm_gym.core.seams import trainer_env

    model, tok = sampling_model(args, device)
    study = learn.parse_args(["--device", "cpu", "--group-size", str(args.group), "--tasks-per-step", "8"])
    make = lambda: gym.make("prm/Math-v0", **learn.env_kwargs(study))  # noqa: E731
    envs = [make() for _ in range(max(args.batches))]
    train_ids = {"prm/Math-v0": list(trainer_env(envs[0]).tasks.ids)}
    cfg = learn.grpo_config(Path(tempfile.gettempdir()) / "bench-sampler", study)  # names a folder, writes nothing
    needed = (args.rounds + 1) * sum(args.batches)
    steps = -(-needed // (cfg.tasks_per_step * cfg.group_size))
    episodes = learn.grpo_episodes(dataclasses.replace(cfg, steps=steps), train_ids)  # RFT's list, as long as needed
    chat = learn.chat_for(tok)
    params = SamplingParams(max_new_tokens=args.max_new, temperature=args.temperature)
    print(GOAL)
    results: dict[int, list[tuple[float, float | None, int, float]]] = {b: [] for b in args.batches}
    at = 0
    for r in range(args.rounds + 1):  # round 0 warms up, on a few episodes
        for b in args.batches if r else [min(16, min(args.batches))]:
            batch, at = episodes[at : at + b], at + b  # fresh episodes every round
            policy = HFPolicy(model, tok, seed=args.seed + r)  # fresh: no earlier round's caches
            with Timed(device) as t:
                trajs = rollout_episodes(envs, policy, chat, batch, params, max_context_tokens=2048)
            if r:
                tokens = sum(t.num_generated_tokens for t in trajs)
                turns = sum(len(t.turns) for t in trajs) / len(trajs)
                results[b].append((len(trajs) / t.seconds, t.busy, tokens, turns))
                print(f"round {r}, {b} envs: {len(trajs) / t.seconds:.2f} episodes/s", flush=True)
    for env in envs:
        env.close()
    cond = (
        f"RFT's episodes (groups of {args.group}, make learn's training tasks), up to 4 turns x {args.max_new} ids, "
        f"temperature {args.temperature}, make learn's stop strings, {args.dtype}, {device}"
    )
    print(f"\n{cond}")
    print("| envs side by side | episodes/s median (min-max) | GPU busy | tokens an episode | turns | 2,048 episodes |")
    print("|---|---|---|---|---|---|")
    for b, rs in results.items():
        rates = [x[0] for x in rs]
        share = mean_share([x[1] for x in rs])
        per = median([x[2] for x in rs]) / b
        print(
            f"| {b} | {median(rates):.2f} ({spread(rates)}) | {fmt_share(share)} | {per:.1f} | "
            f"{median([x[3] for x in rs]):.2f} | {2048 / median(rates):.0f} s |"
        )
        record["rows"].append({"batch": b, "conditions": cond, "episodes_per_s": rates, "busy_share": share})
        save(record, args.json)
        emit(
            "sampler",
            f"RFT episodes, {b} envs side by side, {args.dtype} ({device.type})",
            median(rates),
            EPISODES_GOAL,
            "the goal, 10x the ~6 episodes/s measured for RFT before (a fixed figure, not a rerun)",
            "episodes/s",
            "higher",
            spread=f"ours {spread(rates)}",
            note=f"{args.policy}; {cond}; GPU busy {fmt_share(share)}",
        )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import torch

    from prm_gym.core.errors import ConfigError
    from prm_gym.training.ddp import resolve_device

    try:
        device = resolve_device(args.device)
    except ConfigError as exc:
        print(exc, file=sys.stderr)
        return 2
    if device.type == "cpu" and args.device == "auto" and args.policy == DEFAULT_POLICY:
        why = "GPU-only at these sizes: no CUDA device (--device cpu runs it on the CPU anyway)"
        print(why)
        for name in ("transformers", "vllm"):
            skipped("sampler", f"first-turn sampling vs {name}", name, why, "tokens/s")
        return 0
    mode = "episodes" if args.episodes else "tokens"
    record: dict[str, Any] = {"mode": mode, "policy": args.policy, "device": str(device), "dtype": args.dtype}
    record.update(goal=GOAL, threads=torch.get_num_threads(), rows=[])
    (episodes_mode if args.episodes else token_mode)(args, device, record)
    save(record, args.json)
    return 0


def save(record: dict[str, Any], path: str) -> None:
    """Write ``record`` to ``path`` as JSON (nothing when ``path`` is empty)."""
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps(record, indent=2))


if __name__ == "__main__":
    sys.exit(main())
