"""GRPO / Tree-GRPO / async GRPO training for prm-gym agents (``train-agent``).

Import the pieces from their modules (``training.advantages``, ``training.losses``, ...);
this package import stays light so ``train-agent --help`` is fast.
"""
