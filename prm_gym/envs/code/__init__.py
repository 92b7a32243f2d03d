"""The code family: prm/Code-v0 (:mod:`.env`), its seeded task generator (:mod:`.gen`) and the
HumanEval/MBPP loaders (:mod:`.tasks`). Execution itself is :mod:`prm_gym.sandbox`'s."""
