"""Studies run from the repository root (``python -m experiments.<name>``), outside the library:
``demo`` (make demo), ``learn`` (make learn), ``compare`` (make compare*), ``gpu_learn``."""
