"""The search family: prm/Search-v0 (:mod:`.env`), its seeded world and questions (:mod:`.tasks`),
and the retrieval index and server (:mod:`.index`)."""
