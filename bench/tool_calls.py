"""Tool calls through the official openai client (issue 45): with tool_choice "required" and
with a named function, every prompt gets a call whose arguments parse and fit the function's
schema; the streamed deltas reassemble to the same call; and a conversation with the tool's
result goes back through the chat template to a final answer.

    ~/.cache/tpc-venv/bin/python bench/tool_calls.py CKPT [--prompts 20] [--parallel]
        [--repetition-penalty R] [--tpc PATH] [-- tpc serve flags...]

The tools are the OpenAI documentation's kind: a weather lookup (a city, a unit from an enum),
a sum of numbers (a list of at least one), a calendar entry (a title, a day 1 to 31, optional
attendees), each number bounded (a JSON number is unbounded otherwise, and a small model may
write digits until max_tokens: SmolLM2 did, "1111...", on one prompt of 20). Each prompt is asked greedy with max_tokens 256 twice, once with "required" (any
of the tools; one call, parallel_tool_calls false, unless --parallel: SmolLM2-135M, free to
add calls, tends to repeat them up to max_tokens) and once naming the tool the prompt is
about; the arguments are checked by
pydantic models written apart from the tools' JSON schemas (not by tpc's grammar). Streamed, the same
request's deltas are put together as a client does (name from the first delta, arguments
concatenated) and compared with the whole answer's call. --repetition-penalty R asks the
calls for vLLM's repetition penalty (a client's setting, against a small model's loops).
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import openai  # noqa: E402
from pydantic import BaseModel, ConfigDict, Field, ValidationError  # noqa: E402
from typing import Annotated, List, Literal, Optional  # noqa: E402

from prefix_cache import Server, serve_arguments  # noqa: E402  (tpc serve, its flags)

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The current weather in a city.",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "maxLength": 40},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
        "required": ["city", "unit"], "additionalProperties": False}}}
SUM = {"type": "function", "function": {
    "name": "sum", "description": "Adds numbers.",
    "parameters": {"type": "object", "properties": {
        "values": {"type": "array", "minItems": 1, "maxItems": 8,
                   "items": {"type": "number", "minimum": -1000000, "maximum": 1000000}}},
        "required": ["values"], "additionalProperties": False}}}
CALENDAR = {"type": "function", "function": {
    "name": "add_event", "description": "Puts an event in the calendar.",
    "parameters": {"type": "object", "properties": {
        "title": {"type": "string", "maxLength": 60},
        "day": {"type": "integer", "minimum": 1, "maximum": 31},
        "attendees": {"type": "array", "items": {"type": "string", "maxLength": 30},
                      "maxItems": 5}},
        "required": ["title", "day"], "additionalProperties": False}}}
TOOLS = [WEATHER, SUM, CALENDAR]


# The same parameters as pydantic models: the check of each call's arguments, written apart
# from the JSON schemas that tpc's grammar is compiled from.
class Weather(BaseModel):
    model_config = ConfigDict(extra="forbid")
    city: str = Field(max_length=40)
    unit: Literal["celsius", "fahrenheit"]


class Sum(BaseModel):
    model_config = ConfigDict(extra="forbid")
    values: List[Annotated[float, Field(ge=-1000000, le=1000000)]] = Field(min_length=1,
                                                                            max_length=8)


class Event(BaseModel):
    model_config = ConfigDict(extra="forbid")
    title: str = Field(max_length=60)
    day: int = Field(ge=1, le=31)
    attendees: Optional[List[str]] = Field(default=None, max_length=5)


CHECKS = {"get_weather": Weather, "sum": Sum, "add_event": Event}

PROMPTS = [
    ("get_weather", "What is the weather in Paris?"),
    ("sum", "Add 3, 4 and 5."),
    ("add_event", "Put a dentist appointment on the 12th in my calendar."),
    ("get_weather", "Is it cold in Oslo right now, in fahrenheit?"),
    ("sum", "What is 1.5 plus 2.25?"),
    ("add_event", "Schedule a team lunch with Ann and Bob on day 3."),
    ("get_weather", "Tell me the temperature in Tokyo."),
    ("sum", "Sum the numbers 10, 20, 30 and 40."),
    ("add_event", "Remind me of Mum's birthday on the 28th."),
    ("get_weather", "Weather for Buenos Aires, please."),
    ("sum", "Please total 7 and 35."),
    ("add_event", "Book a meeting called Planning for the 1st."),
    ("get_weather", "How warm is it in Cairo?"),
    ("sum", "Add up 0.1, 0.2 and 0.3."),
    ("add_event", "Add a yoga class on the 15th with Lee."),
    ("get_weather", "Do I need an umbrella in London today?"),
    ("sum", "What do 100 and -42 make together?"),
    ("add_event", "Create an event: Code review, day 9, attendees Sam and Kim."),
    ("get_weather", "Weather in Zürich in celsius."),
    ("sum", "Sum 2, 4, 6, 8."),
]


def check_call(call, allowed):
    """None where `call` names one of `allowed` and its arguments fit that tool's schema."""
    if call.function.name not in allowed:
        return "called %r" % call.function.name
    try:
        CHECKS[call.function.name].model_validate_json(call.function.arguments, strict=False)
        if any(len(s) > 30 for s in json.loads(call.function.arguments).get("attendees") or []):
            return "arguments %r: an attendee over 30 characters" % call.function.arguments
    except ValidationError as e:
        return "arguments %r: %s" % (call.function.arguments, str(e).splitlines()[0])
    return None


def streamed_call(client, **request):
    """(name, arguments) of call 0 as a client reassembles the streamed deltas."""
    name, arguments = None, ""
    for chunk in client.chat.completions.create(stream=True, **request):
        for choice in chunk.choices:
            for delta in choice.delta.tool_calls or []:
                if delta.index != 0:
                    continue
                if delta.function.name:
                    name = delta.function.name
                arguments += delta.function.arguments or ""
    return name, arguments


def calls_hold(client, prompts, parallel, penalty=None):
    held, streamed_same, failures = {"required": 0, "named": 0}, 0, []
    extra = {"extra_body": {"repetition_penalty": penalty}} if penalty else {}
    for expected, question in PROMPTS[:prompts]:
        messages = [{"role": "user", "content": question}]
        for mode in ("required", "named"):
            choice = "required" if mode == "required" else {
                "type": "function", "function": {"name": expected}}
            allowed = [t["function"]["name"] for t in TOOLS] if mode == "required" else [expected]
            request = dict(model="ckpt", messages=messages, tools=TOOLS, tool_choice=choice,
                           max_tokens=256, temperature=0, parallel_tool_calls=parallel,
                           **extra)
            try:
                reply = client.chat.completions.create(**request)
                calls = reply.choices[0].message.tool_calls or []
                bad = "no tool call (finish %s, content %r)" % (
                    reply.choices[0].finish_reason,
                    (reply.choices[0].message.content or "")[:80]) if not calls else None
                bad = bad or next(filter(None, (check_call(c, allowed) for c in calls)), None)
                if bad:
                    failures.append((mode, question, bad))
                    continue
                held[mode] += 1
                if mode == "named":
                    got = streamed_call(client, **request)
                    if got == (calls[0].function.name, calls[0].function.arguments):
                        streamed_same += 1
                    else:
                        failures.append((mode, question, "streamed %r, whole %r" % (
                            got, (calls[0].function.name, calls[0].function.arguments))))
            except openai.OpenAIError as e:
                failures.append((mode, question, str(e)[:200]))
    return held, streamed_same, failures


def round_trip(client):
    """A call, its result sent back as a tool message, and the model's final answer."""
    messages = [{"role": "user", "content": "What is the weather in Paris?"}]
    reply = client.chat.completions.create(
        model="ckpt", messages=messages, tools=TOOLS, max_tokens=128, temperature=0,
        tool_choice={"type": "function", "function": {"name": "get_weather"}})
    call = reply.choices[0].message.tool_calls[0]
    messages.append({"role": "assistant", "content": None, "tool_calls": [
        {"id": call.id, "type": "function",
         "function": {"name": call.function.name, "arguments": call.function.arguments}}]})
    messages.append({"role": "tool", "tool_call_id": call.id,
                     "content": json.dumps({"temperature": 21, "unit": "celsius"})})
    final = client.chat.completions.create(model="ckpt", messages=messages, tools=TOOLS,
                                           max_tokens=64, temperature=0)
    return call, final.choices[0]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("ckpt")
    parser.add_argument("--prompts", type=int, default=len(PROMPTS))
    parser.add_argument("--parallel", action="store_true",
                        help="parallel_tool_calls true (several calls allowed) under required")
    parser.add_argument("--repetition-penalty", type=float, default=None)
    args, flags = serve_arguments(parser)  # tpc serve's flags after "--"
    server = Server(args.tpc, args.ckpt, flags)
    try:
        client = openai.OpenAI(base_url="http://127.0.0.1:%d/v1" % server.port,
                               api_key="unused", max_retries=0, timeout=600)
        prompts = min(args.prompts, len(PROMPTS))
        held, streamed_same, failures = calls_hold(client, prompts, args.parallel,
                                                   args.repetition_penalty)
        print("tool_choice required: %d of %d calls parse and fit (max_tokens 256, greedy, "
              "parallel_tool_calls %s%s)" % (
                  held["required"], prompts, str(args.parallel).lower(),
                  ", repetition_penalty %g" % args.repetition_penalty
                  if args.repetition_penalty else ""))
        print("tool_choice named: %d of %d calls parse and fit" % (held["named"], prompts))
        print("streamed: %d of %d reassemble to the same call" % (streamed_same, held["named"]))
        for f in failures:
            print("  failed: %s %r: %s" % f)
        call, final = round_trip(client)
        print("round trip: called %s, then answered %s with %d characters of content" % (
            call.function.name, "(%s)" % final.finish_reason,
            len(final.message.content or "")))
    finally:
        server.stop()


if __name__ == "__main__":
    main()
