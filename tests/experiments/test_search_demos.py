"""The search demonstrator: one search per gold hop, then the gold answer, played through prm/Search-v0."""

from __future__ import annotations

from typing import Any

from experiments.search_demos import demo_actions, search_call, search_demonstrations
from prm_gym.agents.chat import ChatTemplate


def test_demo_actions_search_each_hop_by_name_then_answer() -> None:
    meta = {"gold_ids": ["person-1", "city-2"]}
    titles = {"person-1": "Kawyn Ixendo", "city-2": "Orolgal"}
    assert demo_actions(meta, "Varn", titles) == [
        search_call("Kawyn Ixendo"),
        search_call("Orolgal"),
        "<answer>Varn</answer>",
    ]


def test_demonstrations_score_one_with_exact_match_and_mask_only_the_assistant(tiny_tokenizer: Any) -> None:
    chat = ChatTemplate(tiny_tokenizer, tools_block="compact")
    kw = {"judge": "rule/exact_match", "world_people": 60, "num_tasks": 12}
    demos, reward = search_demonstrations(chat, 6, kw)
    assert len(demos) == 6 and reward == 1.0  # every demonstration answers right through the real env
    for tokens, mask in demos:
        assert len(tokens) == len(mask)
        text = tiny_tokenizer.decode([t for t, m in zip(tokens, mask, strict=True) if m])
        assert text.count('"name": "search"') >= 2 and "<answer>" in text  # multi-hop: two or more searches
        assert "<tool_response>" not in text  # observations are never trained on


def test_the_domain_tokenizer_shortens_episodes_and_still_encodes_any_text(tiny_tokenizer: Any) -> None:
    from experiments.search_tokenizer import VOCAB_SIZE, domain_tokenizer

    tok = domain_tokenizer(world_people=60)
    assert len(tok) <= VOCAB_SIZE and tok.eos_token == "<|im_end|>" and tok.pad_token_id == 0
    for text in ("héllo \x00 wörld ✓ \udcff".encode("utf-8", "replace").decode(), "Kawyn Ixendo", "<tool_call>"):
        assert tok.decode(tok.encode(text)) == text  # byte-level: nothing is lost
    kw = {"judge": "rule/exact_match", "world_people": 60, "num_tasks": 12}
    short, _ = search_demonstrations(ChatTemplate(tok, tools_block="compact"), 4, kw)
    long, _ = search_demonstrations(ChatTemplate(tiny_tokenizer, tools_block="compact"), 4, kw)
    assert sum(len(t) for t, _ in short) * 3 < sum(len(t) for t, _ in long)
    assert domain_tokenizer(world_people=60).get_vocab() == tok.get_vocab()  # deterministic


def test_unseen_questions_share_no_text_with_training_and_load_as_eval_tasks(tmp_path: Any) -> None:
    import json

    import gymnasium as gym

    from experiments.search_demos import ENV_KWARGS, unseen_questions
    from prm_gym.envs.search.tasks import generate_search_tasks, generate_world

    path = unseen_questions(40, tmp_path / "unseen.jsonl")
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    train = {t.prompt for t in generate_search_tasks(generate_world(300, 0), 2000, 0, "train", "multi")}
    assert len(rows) == 40 and len({r["question"] for r in rows}) == 40
    assert not {r["question"] for r in rows} & train
    env = gym.make("prm/Search-v0", **{**ENV_KWARGS, "tasks": str(path), "judge": "rule/exact_match"})
    env.reset(options={"task_id": rows[0]["id"]})
    assert env.step(f"<answer>{rows[0]['answer'][0]}</answer>")[1] == 1.0
    env.close()
