"""The SQL family: prm/SQL-v0 (:mod:`.env`), its tasks (:mod:`.tasks`, :mod:`.schemas`; on
PostgreSQL :mod:`.pg`), the database layer (:mod:`.db` SQLite, :mod:`.postgres`, :mod:`.pgserver`
and :mod:`.pghost` for a throwaway PostgreSQL, :mod:`.open`) and the SQL judges (:mod:`.judges`,
with :mod:`.results`, :mod:`.shape`, :mod:`.suite` and :mod:`.neighbours`).

The judges live with the family because they execute SQL through its database layer; the judge
registry (:data:`prm_gym.rewards.registry.BUILTIN_JUDGES`) names them by module path and imports
them on first use, so ``rewards`` never imports ``envs``.
"""
