"""``train-agent``: train (or evaluate) any registered env with any policy, judge and algorithm.

Examples::

    train-agent --env prm/Math-v0 --policy hf:tiny --algo grpo --steps 20
    train-agent --env prm/Math-v0 --algo tree-grpo --tree.num-trees 2 --tree.expand-nodes 3
    train-agent --asynchronous.enabled --asynchronous.max-staleness 2 --output-dir runs/async
    train-agent --mode eval --output-dir runs/async
    train-agent --backend ray --num-workers 4 --steps 20
    train-agent --imports weather_agent --env weather/Forecast-v0 --steps 5
"""

from __future__ import annotations

import importlib
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from prm_gym.training.config import TrainConfig


def parse(argv: Sequence[str] | None = None) -> TrainConfig:
    """The config from command-line flags (``--help`` lists every knob)."""
    import tyro

    return tyro.cli(TrainConfig, args=list(argv) if argv is not None else None, description=__doc__)


def run_eval(cfg: TrainConfig) -> dict[str, float]:
    """Evaluate the latest checkpoint in ``cfg.output_dir`` (or the initial policy) and save eval.json."""
    from prm_gym.agents.chat import ChatTemplate
    from prm_gym.core.hf import HFPolicy
    from prm_gym.training.checkpoint import CHECKPOINT, load_checkpoint, model_state
    from prm_gym.training.evaluation import evaluate

    policy = HFPolicy.from_id(cfg.policy, seed=cfg.seed)
    ckpt = Path(cfg.output_dir) / CHECKPOINT
    source = cfg.init_checkpoint or (str(ckpt) if ckpt.exists() else "")
    if source:
        policy.model.load_state_dict(model_state(load_checkpoint(source)))
    chat = ChatTemplate(policy.tokenizer, tools_block=cfg.tools_prompt, tool_format=cfg.tool_format)
    result = evaluate(policy, chat, cfg)
    Path(cfg.output_dir).mkdir(parents=True, exist_ok=True)
    (Path(cfg.output_dir) / "eval.json").write_text(json.dumps({"checkpoint": source, **result}, indent=2))
    return result


def main(argv: Sequence[str] | None = None) -> int:
    """Console entry point of ``train-agent``."""
    from prm_gym.core.errors import PRMError

    try:
        cfg = parse(argv)
        for module in cfg.imports:
            try:
                importlib.import_module(module)
            except ImportError as exc:
                print(f"train-agent: error: --imports {module}: {exc}", file=sys.stderr)
                return 2
        if cfg.mode == "eval":
            print(json.dumps(run_eval(cfg), indent=2))
            return 0
        from prm_gym.training.trainer import train

        run = train(cfg)
        print(f"trained {run.step} steps; outputs in {cfg.output_dir}")
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
