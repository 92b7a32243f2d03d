"""The shared vocabulary every prm-gym package uses; it imports none of them.

``errors`` (one hierarchy), ``parsing`` (tool-call parsing), ``tasks`` (task records and loaders),
``tools`` (tool schemas), ``spaces`` (the text space), ``policy`` (the policy protocol and
sampling parameters) and ``models`` (policy models by id).
"""
