"""``train-agent``: train (or evaluate) any registered env with any policy, judge and algorithm.

Examples::

    train-agent --env prm/Math-v0 --policy hf:tiny --algo grpo --steps 20
    train-agent --env prm/Math-v0:0.7 --env prm/SQL-v0:0.3 --steps 20
    train-agent --env prm/Math-v0 --algo tree-grpo --tree.num-trees 2 --tree.expand-nodes 3 --group-size 8
    train-agent --asynchronous.enabled --asynchronous.max-staleness 2 --output-dir runs/async
    train-agent --mode eval --output-dir runs/async
    train-agent --mode eval --policy openai:qwen2.5:0.5b@http://localhost:11434/v1 --output-dir runs/ollama
    train-agent --backend ray --num-workers 4 --steps 20
    train-agent --imports weather_agent --env weather/Forecast-v0 --steps 5
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from prm_gym.training.config import TrainConfig


def parse(argv: Sequence[str] | None = None) -> TrainConfig:
    """The config from command-line flags (``--help`` lists every knob)."""
    from prm_gym.core.extras import require

    tyro = require("tyro", "train", "parsing the flags")

    args = merge_repeated(list(argv) if argv is not None else sys.argv[1:], "--env")
    removed = [a for a in args if a.startswith("--sql.")]
    if removed:
        from prm_gym.core.errors import ConfigError

        raise ConfigError(
            f"{removed[0].split('=')[0]} was removed in 0.2.0: prm/SQL-v0's database is the env's own "
            """setting, given in --env-kwargs, e.g. '{"backend": "postgres", "pg_dsn": "..."}'."""
        )
    return tyro.cli(TrainConfig, args=args, description=__doc__)


def merge_repeated(argv: list[str], flag: str) -> list[str]:
    """``argv`` with every ``flag VALUE...`` (or ``flag=VALUE``) gathered into one ``flag V1 V2 ...``
    at the first one's place: ``--env prm/Math-v0:0.5 --env prm/SQL-v0:0.5`` names both envs
    (tyro keeps only the last of a repeated flag)."""
    out: list[str] = []
    values: list[str] = []
    at: int | None = None
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            out += argv[i:]
            break
        if arg == flag or arg.startswith(flag + "="):
            if at is None:
                at = len(out)
            if "=" in arg:
                values.append(arg.split("=", 1)[1])
                i += 1
                continue
            i += 1
            while i < len(argv) and not argv[i].startswith("-"):
                values.append(argv[i])
                i += 1
            continue
        out.append(arg)
        i += 1
    if at is not None:
        out[at:at] = [flag, *values]
    return out


def run_eval(cfg: TrainConfig) -> dict[str, float]:
    """Evaluate the latest checkpoint in ``cfg.output_dir`` (or the initial policy) and save eval.json."""
    from prm_gym.agents.chat import DEFAULT_SYSTEM, ChatTemplate
    from prm_gym.agents.hf import HFPolicy
    from prm_gym.agents.policy_ids import load_policy
    from prm_gym.training.checkpoint import CHECKPOINT, load_checkpoint
    from prm_gym.training.evaluation import evaluate
    from prm_gym.training.lora import apply_checkpoint
    from prm_gym.training.run import initial_weights, probe_envs
    from prm_gym.training.shaping import declared_outcomes

    policy = load_policy(cfg.policy, seed=cfg.seed, sample_dtype=cfg.sample_dtype)
    ckpt = Path(cfg.output_dir) / CHECKPOINT
    source = cfg.init_checkpoint or (str(ckpt) if ckpt.exists() else "")
    if not isinstance(policy, HFPolicy):  # a chat server's model: no weights of ours to load
        source = ""
    elif cfg.init_checkpoint:
        policy.model = initial_weights(policy.model, load_checkpoint(cfg.init_checkpoint))
    elif source:
        policy.model = apply_checkpoint(policy.model, load_checkpoint(source))  # LoRA: adapters onto --policy
    chat = ChatTemplate(
        policy.tokenizer, cfg.system_prompt or DEFAULT_SYSTEM, tools_block=cfg.tools_prompt, tool_format=cfg.tool_format
    )
    cfg = replace(cfg, loss=declared_outcomes(cfg.loss, probe_envs(cfg, chat)[2]))  # success: the judges' outcome
    result = evaluate(policy, chat, cfg)
    Path(cfg.output_dir).mkdir(parents=True, exist_ok=True)
    summary = {"policy": cfg.policy, "checkpoint": source, **result}
    (Path(cfg.output_dir) / "eval.json").write_text(json.dumps(summary, indent=2))
    return result


def main(argv: Sequence[str] | None = None) -> int:
    """Console entry point of ``train-agent``."""
    from prm_gym.core.errors import ConfigError, PRMError
    from prm_gym.core.imports import import_modules

    try:
        cfg = parse(argv)
        try:  # a path that cannot be a folder fails here, not as a traceback at the first metrics line
            Path(cfg.output_dir).mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"--output-dir {cfg.output_dir!r}: {exc.strerror or exc}") from None
        import_modules(cfg.imports)
        if cfg.mode == "eval":
            print(json.dumps(run_eval(cfg), indent=2))
            return 0
        from prm_gym.training.summary import run_summary
        from prm_gym.training.trainer import train

        t0 = time.perf_counter()
        train(cfg)
        if os.environ.get("RANK", "0") == "0":  # torchrun: rank 0 alone logs and writes
            print(run_summary(cfg.output_dir, time.perf_counter() - t0))
        return 0
    except PRMError as exc:
        print(f"train-agent: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        # The loop's finally blocks have closed envs, sandboxes and servers by now; the last
        # checkpoint on disk is intact (writes are atomic), so --resume continues from it.
        print("train-agent: interrupted; resume with --resume", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
