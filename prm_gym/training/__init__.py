"""GRPO / Tree-GRPO / async GRPO training for prm-gym agents (``train-agent``).

Import the pieces from their modules (``prm_gym.training.advantages``, ``prm_gym.training.losses``, ...);
this package import stays light so ``train-agent --help`` is fast.
"""
