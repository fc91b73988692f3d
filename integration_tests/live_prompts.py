"""Prompts for the live-engine integration tests, across the workloads specdraft targets (the
benchmark workloads are specdraft.workloads)."""

from __future__ import annotations

import inspect
import json
import textwrap

_CODE = textwrap.dedent(inspect.getsource(json.dumps))[:1400]

_ARTICLE = (
    "The city council met on Tuesday to discuss the new bicycle lanes on Main Street. "
    "Supporters said the lanes made the street safer for children riding to school, while "
    "several shop owners complained that the loss of parking spaces had reduced the number of "
    "customers. After two hours of debate the council voted to keep the lanes for another six "
    "months and to collect data on traffic, accidents and sales before making a final decision. "
)

_SHARED_PREFIX = (
    "You are a helpful assistant. Answer briefly and precisely. The following reference text "
    "may help you. " + _ARTICLE * 2
)

# name -> prompt; the first ones are long enough to be prefilled in several chunks.
PROMPTS: dict[str, str] = {
    "code_edit": f"{_CODE}\n\n# Rewrite the function above with type hints. Keep everything else "
                 f"the same.\n",
    "code_repeat": f"Repeat the following code exactly.\n\n{_CODE[:600]}\n\nRepeated:\n",
    "summarize": f"{_ARTICLE * 3}\nSummarize the article above in two sentences.\n",
    "echo_sentence": "Repeat this sentence five times: the quick brown fox jumps over the lazy "
                     "dog.\n",
    "echo_list": "Copy this list: apple, banana, cherry, date, elderberry, fig, grape, apple, "
                 "banana, cherry, date, elderberry, fig, grape,",
    "count": "1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12,",
    "alphabet": "A B C D E F G H I J K L M N O P",
    "json_records": 'Records:\n{"id": 1, "name": "Ada", "role": "engineer"}\n'
                    '{"id": 2, "name": "Bob", "role": "designer"}\n'
                    '{"id": 3, "name": "Cy", "role": "engineer"}\n',
    "chat_capital": "What is the capital of France? Explain in one paragraph.",
    "chat_recipe": "Give me a simple recipe for pancakes.",
    "chat_python": "How do I reverse a list in Python? Show an example.",
    "math": "Question: Tom has 3 apples and buys 5 more. He gives 2 to Ann. How many apples does "
            "Tom have? Answer step by step.\n",
    "translate": "Translate to French: The weather is nice today. I will go to the park with "
                 "my friends.\n",
    "story": "Once upon a time, in a small village by the sea, there lived an old fisherman who",
    "table": "| name | age |\n|------|-----|\n| Ann | 31 |\n| Bob | 27 |\n| Cid | 45 |\n",
    "html": "<ul>\n  <li>Home</li>\n  <li>About</li>\n  <li>Contact</li>\n",
    "sql": "SELECT name, age FROM users WHERE age > 30 ORDER BY",
    "poem": "Roses are red, violets are blue,",
    "shared_q1": _SHARED_PREFIX + "\nQuestion: What did the council vote?\nAnswer:",
    "shared_q2": _SHARED_PREFIX + "\nQuestion: Who complained about the lanes?\nAnswer:",
    "shared_q3": _SHARED_PREFIX + "\nQuestion: How long was the debate?\nAnswer:",
    "tool_transcript": 'call search({"q": "weather paris"}) -> {"temp": 21, "sky": "clear"}\n'
                       'call search({"q": "weather rome"}) -> {"temp": 25, "sky": "clear"}\n'
                       'call search({"q": "weather oslo"}) -> ',
}

# An echo-style prompt: the answer repeats text from the prompt, so lookup drafts are accepted.
ECHO_PROMPT = ("Repeat the following text exactly, twice.\n\nText: " + _ARTICLE[:420]
               + "\n\nRepeated text: " + _ARTICLE[:200])
