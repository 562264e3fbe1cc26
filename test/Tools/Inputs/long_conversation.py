"""Writes a conversation of N user/assistant turns (after a system message unless --no-system)
as tpc-chat's MESSAGES_JSON: python long_conversation.py N OUT [--no-system]."""
import json
import sys

n, out = int(sys.argv[1]), sys.argv[2]
messages = [] if "--no-system" in sys.argv else [{"role": "system", "content": "Be brief. " * 20}]
for k in range(n):
    content = f"Message {k}: " + "lorem ipsum dolor sit amet, é ✓ " * 30
    messages.append({"role": "user" if k % 2 == 0 else "assistant", "content": content})
with open(out, "w", encoding="utf-8") as f:
    json.dump(messages, f, ensure_ascii=False)
