"""The math family: prm/Math-v0 (:mod:`.env`), its task generators and loaders (:mod:`.tasks`, the
many-phrasing word problems of :mod:`.words`), the safe calculator tool (:mod:`.calculator`) and
prm/MathSlowTools-v0 (:mod:`.slow_tools`)."""
