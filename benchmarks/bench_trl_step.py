"""A real GRPO step against TRL: SmolLM2-135M on prm/Math-v0 with the calculator, end to end.

One step on each side samples ``TASKS x GROUP`` multi-turn episodes (the model calls the
calculator, the env runs it and scores every turn with its judges), scores them, and takes one
optimizer step over the batch in micro-batches. Like for like:

* the same weights (``--policy``; make learn's SFT checkpoint makes the model actually call the
  calculator, the base SmolLM2 mostly does not), the same env tasks (make learn's training
  phrasings, levels 5-6), ``GROUP`` samples of each of ``TASKS`` tasks per step, temperature 1;
* fp32 on both sides (``--precision``), ``--threads`` torch threads, no KL term, one update per
  batch, micro-batches of ``MICRO`` rows, activation checkpointing the same on both sides;
* turns: ours plays up to ``--turns`` turns of at most ``--max-new`` new ids each; TRL (its
  ``environment_factory`` multi-turn tool loop, through :class:`prm_gym.envs.trl_env.TRLEnv`, whose
  rewards are the env's own terms) gets ``--turns - 1`` tool-calling iterations and a completion
  budget of ``--turns x --max-new`` ids (TRL counts the tool results in it too);
* each side runs in its own fresh process (so its peak resident memory is its own), sides
  alternated over ``--rounds`` rounds (TRL first in even rounds), ``--warmup`` steps dropped.

Episodes/s is episodes per step over the step's wall clock (sampling with tool calls, scoring, the
learner); the generated ids per episode and tool calls per episode are printed beside it, because
the two sides' models sample their own episodes.

    .venv/bin/python benchmarks/bench_trl_step.py --policy hf:runs/learn/sft/model
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_busy import BusySampler

GROUP, TASKS, MICRO = 8, 4, 8
LR = 3e-6


def env_kwargs(turns: int) -> dict[str, Any]:
    """make learn's training env (experiments/learn.py: levels 5-6, training phrasings)."""
    return {"levels": [5, 6], "max_turns": turns, "templates": "train", "num_tasks": 4000}


def peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def side_ours(a: argparse.Namespace) -> dict[str, Any]:
    """Our trainer, with the whole step split into its parts: the sampler's ``generate`` calls, the
    learner step, and the rest (envs, tool calls, judges, batch building, bookkeeping); each step's
    batch is kept for a bare learner loop timed after training on the same micro-batches."""
    import torch

    import prm_gym.training.trainer as trainer_module
    from prm_gym.training.config import EvalConfig, LossConfig, SamplingConfig, TrainConfig
    from prm_gym.training.trainer import train

    clock = {"gen": 0.0}
    parts: list[dict[str, Any]] = []
    learner_step = trainer_module.learner_step

    def timed_generate(self: Any, *args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return generate(self, *args, **kwargs)
        finally:
            clock["gen"] += time.perf_counter() - t0

    def timed_learner_step(model: Any, opt: Any, batch: Any, cfg: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        out = learner_step(model, opt, batch, cfg, **kwargs)
        parts.append({"gen_s": clock["gen"], "learner_s": time.perf_counter() - t0, "batch": batch, "model": model})
        clock["gen"] = 0.0
        return out

    sampler = type_of_sampler(a)
    generate = sampler.generate
    sampler.generate = timed_generate  # type: ignore[method-assign]
    trainer_module.learner_step = timed_learner_step  # type: ignore[assignment]
    with tempfile.TemporaryDirectory() as out:
        cfg = TrainConfig(
            env="prm/Math-v0",
            env_kwargs=json.dumps(env_kwargs(a.turns)),
            policy=ours_policy(a),
            tools_prompt="compact",
            group_size=GROUP,
            tasks_per_step=TASKS,
            steps=a.warmup + a.steps,
            lr=LR,
            output_dir=out,
            seed=0,
            precision=a.precision,
            checkpoint_every=0,
            tensorboard=False,
            sampling=SamplingConfig(max_new_tokens=a.max_new, temperature=1.0, max_context_tokens=2048),
            loss=LossConfig(micro_batch_size=MICRO, activation_checkpointing=a.checkpointing),
            eval=EvalConfig(every=0),
        )
        with GPUWatch() as gpu:
            train(cfg)
        rows = [json.loads(line) for line in (Path(out) / "metrics.jsonl").read_text().splitlines()]
    peak = peak_mib()  # before the bare loop below, which is not part of training
    steps = [r for r in rows if "rollout_s" in r][a.warmup :]
    timed = parts[a.warmup :]
    model = timed[0]["model"]
    opt = torch.optim.AdamW(model.parameters(), lr=LR)
    bare = [bare_learner(model, opt, p["batch"], a.checkpointing, a.precision == "bf16") for p in timed]
    episodes = GROUP * TASKS
    return {
        "episodes_per_s": [episodes / (r["rollout_s"] + r["learn_s"]) for r in steps],
        "step_s": [r["rollout_s"] + r["learn_s"] for r in steps],
        "gen_s": [p["gen_s"] for p in timed],
        "learner_s": [p["learner_s"] for p in timed],
        "bare_learner_s": bare,
        "gen_ids_per_episode": [r["gen_tokens_per_traj"] for r in steps],
        "turns_per_episode": [r["turns"] for r in steps],
        "reward": [r["reward"] for r in steps],
        "tokens_per_s": [r["generated_tokens"] / p["gen_s"] for r, p in zip(steps, timed, strict=True)],
        "peak_mib": peak,
        **gpu.report(),
    }


def ours_policy(a: argparse.Namespace) -> str:
    """The trainer's ``--policy``: ``--policy`` itself, or with ``--sampler vllm-engine`` the in-process
    vLLM engine on ``--policy``'s model folder (``hf:<dir>``)."""
    return str(a.policy) if a.sampler == "hf" else f"vllm-engine:{a.policy[3:]}"  # parse() checked the folder


def type_of_sampler(a: argparse.Namespace) -> Any:
    """The sampler class whose ``generate`` calls are clocked."""
    if a.sampler == "hf":
        from prm_gym.agents.hf import HFPolicy

        return HFPolicy
    from prm_gym.agents.vllm_engine import VLLMEnginePolicy

    return VLLMEnginePolicy


class GPUWatch:
    """While active, samples the GPU's busy share (:class:`gpu_busy.BusySampler`, the one reader of the
    benchmarks and ``make gpu-check``) and its memory in use (``torch.cuda.mem_get_info``: every
    process's, vLLM's reserved KV cache included) every 0.2 s; reports nothing without CUDA."""

    def __enter__(self) -> GPUWatch:
        import threading

        import torch

        self.used: list[float] = []
        self.cuda = torch.cuda.is_available()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._sample, daemon=True)
        self.busy = BusySampler(torch.cuda.current_device() if self.cuda else 0)
        if self.cuda:
            self.busy.start()
            self.thread.start()
        return self

    def _sample(self) -> None:
        import torch

        while not self.stop.wait(0.2):
            free, total = torch.cuda.mem_get_info()
            self.used.append((total - free) / 2**20)

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        if self.cuda:
            self.busy.stop()
            self.thread.join()

    def report(self) -> dict[str, Any]:
        if not self.cuda:
            return {}
        import torch

        out: dict[str, Any] = {"gpu": torch.cuda.get_device_name(), "gpu_mem_peak_mib": max(self.used, default=0.0)}
        out["gpu_torch_peak_mib"] = torch.cuda.max_memory_allocated() / 2**20
        if self.busy.share is not None:  # no NVML reader: the busy share is left out, memory still sampled
            out["gpu_busy_share"] = self.busy.share
        return out


def bare_learner(model: Any, opt: Any, batch: Any, recompute: bool, bf16: bool) -> float:
    """Seconds of a bare forward + log-softmax + gather + backward + AdamW over ``batch``'s rows with
    trained tokens, in micro-batches of ``MICRO`` (activation checkpointing as the learner had it)."""
    import torch

    from prm_gym.training.update import recomputing

    rows = [i for i in range(batch.input_ids.shape[0]) if batch.loss_mask[i].sum() > 0]
    total = float(batch.loss_mask[rows].sum())
    model.train()
    t0 = time.perf_counter()
    opt.zero_grad(set_to_none=True)
    with recomputing(model, recompute):
        for lo in range(0, len(rows), MICRO):
            part = rows[lo : lo + MICRO]
            width = int(batch.attention_mask[part].sum(-1).max())
            ids, attn = batch.input_ids[part, :width], batch.attention_mask[part, :width]
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                logits = model(input_ids=ids, attention_mask=attn, use_cache=False).logits[:, :-1].float()
            logp = torch.log_softmax(logits, dim=-1).gather(-1, ids[:, 1:, None]).squeeze(-1)
            mask = batch.loss_mask[part, 1:width]
            (-(batch.advantages[part, 1:width] * logp * mask).sum() / total).backward()
        opt.step()
    model.eval()
    return time.perf_counter() - t0


def side_trl(a: argparse.Namespace) -> dict[str, Any]:
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from prm_gym.agents.chat import DEFAULT_SYSTEM
    from prm_gym.core.models import load_hf
    from prm_gym.envs.trl_env import TRLEnv, tool_chat_tokenizer

    model, tok = load_hf(a.policy, 0)
    tok = tool_chat_tokenizer(tok)
    env = TRLEnv("prm/Math-v0", env_kwargs(a.turns))
    n = a.warmup + a.steps
    dataset = env.dataset(TASKS * n, system=DEFAULT_SYSTEM)
    stats: dict[str, list[float]] = {"gen": [], "turns": []}

    def count(completion_ids: list[list[int]], environments: list[Any], **_: Any) -> list[float]:
        stats["gen"].append(statistics.mean(len(c) for c in completion_ids))
        stats["turns"].append(statistics.mean(e._episode.turns for e in environments))
        return [0.0] * len(completion_ids)

    class Clock(TrainerCallback):
        def __init__(self) -> None:
            self.t0, self.walls = 0.0, []

        def on_step_begin(self, *args: Any, **kwargs: Any) -> None:
            self.t0 = time.perf_counter()

        def on_step_end(self, *args: Any, **kwargs: Any) -> None:
            self.walls.append(time.perf_counter() - self.t0)

    clock = Clock()
    with tempfile.TemporaryDirectory() as out:
        args = GRPOConfig(
            output_dir=out,
            per_device_train_batch_size=MICRO,
            gradient_accumulation_steps=GROUP * TASKS // MICRO,  # one generation of GROUP x TASKS per step
            num_generations=GROUP,
            max_completion_length=a.turns * a.max_new,
            max_tool_calling_iterations=a.turns - 1,
            max_steps=n,
            learning_rate=LR,
            beta=0.0,
            temperature=1.0,
            max_grad_norm=1.0,
            logging_steps=1,
            report_to="none",
            save_strategy="no",
            use_cpu=True,
            bf16=a.precision == "bf16",
            seed=0,
            dataloader_num_workers=0,
            gradient_checkpointing=a.checkpointing,
            reward_weights=[1.0] * len(env.terms) + [0.0],  # the last function only counts ids and turns
        )
        trainer = GRPOTrainer(
            model=model,
            reward_funcs=[*env.reward_funcs(), count],
            args=args,
            train_dataset=dataset,
            processing_class=tok,
            environment_factory=env,
            callbacks=[clock],
        )
        trainer.train()
    logs = [r for r in trainer.state.log_history if "reward" in r]
    episodes = GROUP * TASKS
    return {
        "episodes_per_s": [episodes / w for w in clock.walls[a.warmup :]],
        "gen_ids_per_episode": stats["gen"][a.warmup :],
        "turns_per_episode": stats["turns"][a.warmup :],
        "reward": [r["reward"] for r in logs][a.warmup :],
        "peak_mib": peak_mib(),
    }


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument(
        "--policy", default="hf:smollm2-135m", help="hf:smollm2-135m or hf:<dir> (e.g. runs/learn/sft/model)"
    )
    p.add_argument("--steps", type=int, default=2, help="timed steps per round")
    p.add_argument("--warmup", type=int, default=1, help="steps dropped at the start of each round (>= 1: our first "
                   "step's sampling clock also holds the trainer's step-0 evaluation)")  # fmt: skip
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--turns", type=int, default=4)
    p.add_argument("--max-new", type=int, default=48)
    p.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    p.add_argument("--checkpointing", action="store_true", help="activation checkpointing on both sides")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--sides", default="trl,ours", help="trl,ours (default), or one of them")
    p.add_argument("--sampler", choices=["hf", "vllm-engine"], default="hf", help="our side's sampler")
    p.add_argument("--json", help="also write every step's figures here")
    p.add_argument("--side", choices=["ours", "trl"], help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.warmup < 1 or a.steps < 1:
        p.error("--warmup and --steps take at least 1")
    if a.sampler == "vllm-engine" and (not a.policy.startswith("hf:") or not Path(a.policy[3:]).is_dir()):
        p.error(f"--sampler vllm-engine needs --policy hf:<a transformers model folder>, not {a.policy}")
    return a


def child(a: argparse.Namespace) -> None:
    import torch

    torch.set_num_threads(a.threads)
    result = side_ours(a) if a.side == "ours" else side_trl(a)
    Path(a.out).write_text(json.dumps(result))


def main() -> None:
    a = parse()
    if a.side:
        return child(a)
    names = {"trl": "TRL GRPOTrainer", "ours": "prm-gym trainer"}
    sides = [s for s in ("trl", "ours") if s in a.sides.split(",")]
    if not sides:
        raise SystemExit(f"--sides takes trl, ours or trl,ours, not {a.sides!r}")
    runs: dict[str, list[dict[str, Any]]] = {side: [] for side in sides}
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRL_EXPERIMENTAL_SILENCE": "1"}
    for r in range(a.rounds):
        for side in sides if r % 2 == 0 else sides[::-1]:
            with tempfile.NamedTemporaryFile(suffix=".json") as f:
                cmd = [sys.executable, __file__, *sys.argv[1:], "--side", side, "--out", f.name]
                t0 = time.perf_counter()
                subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL)
                res = json.loads(Path(f.name).read_text())
            runs[side].append(res)
            eps = ", ".join(f"{x:.3f}" for x in res["episodes_per_s"])
            print(f"round {r} {names[side]:<16} episodes/s per step {eps}; peak RSS {res['peak_mib']:,.0f} MiB; "
                  f"process {time.perf_counter() - t0:.0f} s", flush=True)  # fmt: skip
    print(
        f"{a.policy}, prm/Math-v0 (levels 5-6), {TASKS} tasks x {GROUP} samples per step, <= {a.turns} turns x "
        f"{a.max_new} new ids, {a.precision}, {a.threads} threads, micro-batch {MICRO}, activation checkpointing "
        f"{'on' if a.checkpointing else 'off'} both sides; {a.rounds} alternated rounds of {a.steps} steps after "
        f"{a.warmup} warm-up, each side in its own process"
    )
    med: dict[str, dict[str, float]] = {}
    for side, rs in runs.items():
        pool = lambda key, rs=rs: [x for r in rs for x in r[key]]  # noqa: E731
        med[side] = {
            "eps": statistics.median(pool("episodes_per_s")),
            "lo": min(pool("episodes_per_s")),
            "hi": max(pool("episodes_per_s")),
            "peak": max(r["peak_mib"] for r in rs),
            "gen": statistics.mean(pool("gen_ids_per_episode")),
            "turns": statistics.mean(pool("turns_per_episode")),
            "reward": statistics.mean(pool("reward")),
        }
        m = med[side]
        print(
            f"{names[side]:<16} episodes/s median {m['eps']:.3f} (steps {m['lo']:.3f}-{m['hi']:.3f}); peak RSS "
            f"{m['peak']:,.0f} MiB; {m['gen']:.1f} completion ids/episode, {m['turns']:.2f} env turns/episode, "
            f"mean return {m['reward']:.3f}"
        )
    if a.json:
        Path(a.json).write_text(json.dumps({"args": vars(a), "runs": runs, "medians": med}, indent=2))
    if "ours" in runs:
        whole_step(runs["ours"])
    if "trl" in runs and "ours" in runs:
        compare(a, med["ours"], med["trl"])


def whole_step(rs: list[dict[str, Any]]) -> None:
    """Our step against the sum of its bare parts, and the GPU's figures when there was one."""
    pool = {
        k: [x for r in rs for x in r[k]] for k in ("step_s", "gen_s", "learner_s", "bare_learner_s", "tokens_per_s")
    }
    step, gen = statistics.median(pool["step_s"]), statistics.median(pool["gen_s"])
    learn, bare = statistics.median(pool["learner_s"]), statistics.median(pool["bare_learner_s"])
    rest = step - gen - learn
    print(
        f"our step, medians over steps: {step:.1f} s = sampler generate calls {gen:.1f} s + learner {learn:.1f} s + "
        f"the rest {rest:.1f} s (envs, tool calls, judges, batch, bookkeeping: {rest / step:.1%}); bare learner on "
        f"the same batches {bare:.1f} s (learner / bare {learn / bare:.2f}x); whole step / (generate + bare "
        f"learner) = {step / (gen + bare):.2f}x (goal <= 1.2x); sampling {statistics.median(pool['tokens_per_s']):.0f} "
        "generated tokens/s inside generate"
    )
    if "gpu" in rs[0]:
        busy = [r["gpu_busy_share"] for r in rs if "gpu_busy_share" in r]
        share = f"busy share {statistics.mean(busy):.0%} of the sampled time" if busy else "busy share not read (NVML)"
        print(
            f"GPU {rs[0]['gpu']}: memory in use at most {max(r['gpu_mem_peak_mib'] for r in rs):,.0f} MiB (all "
            f"processes, vLLM's reserved KV cache included), torch peak "
            f"{max(r['gpu_torch_peak_mib'] for r in rs):,.0f} MiB; {share}"
        )


def compare(a: argparse.Namespace, ours: dict[str, float], trl: dict[str, float]) -> None:
    print(f"episodes/s ours / TRL: {ours['eps'] / trl['eps']:.2f}x (goal >= 1.5x); "
          f"peak RSS TRL / ours: {trl['peak'] / ours['peak']:.2f}x (goal >= 1)")  # fmt: skip
    sys.path.insert(0, str(Path(__file__).parent))
    from result_line import emit

    label = "hf:tiny" if a.policy == "hf:tiny" else "SmolLM2-135M"
    cond = (f"TRL {__import__('trl').__version__} GRPOTrainer, environment_factory multi-turn tool loop; same weights, "
            f"tasks, group, turns, precision; each side its own process, {a.rounds} alternated rounds")  # fmt: skip
    emit("trl_step", f"GRPO step, {label} on prm/Math-v0, episodes/s", ours["eps"], trl["eps"], cond, "episodes/s",
         "higher", f"ours {ours['lo']:.3g}-{ours['hi']:.3g}, TRL {trl['lo']:.3g}-{trl['hi']:.3g}")  # fmt: skip
    emit(
        "trl_step", f"GRPO step, {label} on prm/Math-v0, peak RSS", ours["peak"], trl["peak"], cond, "MiB", "lower", ""
    )


if __name__ == "__main__":
    main()
